// Probation: checks of reals a revision adds or changes (address, port, target port, check) run before that
// revision is applied, so a real gets table entries only after `rise` consecutive successes (make-before-break for
// health; docs/health.md). A target starts `down` here, not `unknown`: the first success alone does not admit it.
// It ends `up` after `rise` successes in a row, `down` after `fall` failures in a row, or `down` when the deadline
// passes first. Probes of different targets run concurrently, bounded by one semaphore.
import { stepHealth, type CheckResult, type RealHealth } from './hysteresis.js';
import { runProbe } from './probes.js';
import { Semaphore } from './semaphore.js';
import type { CheckTarget } from './targets.js';

export interface ProbationResult {
  target: CheckTarget;
  health: RealHealth;
  /** Probes run for it. */
  checks: number;
}

export async function probation(targets: readonly CheckTarget[], o: { deadlineMs: number; maxInFlight?: number; signal?: AbortSignal; now?: () => number;
  /** How one probe runs (the checker's, for via: vip routing); default runProbe. */
  probe?: (t: CheckTarget, signal?: AbortSignal) => Promise<CheckResult> }): Promise<ProbationResult[]> {
  const now = o.now ?? Date.now;
  const end = now() + o.deadlineMs;
  const sem = new Semaphore(o.maxInFlight ?? 64);
  const probe = o.probe ?? ((t: CheckTarget, signal?: AbortSignal) => runProbe(t.probe, signal));
  return Promise.all(targets.map(async (target): Promise<ProbationResult> => {
    let health: RealHealth = { state: 'down', since: now(), streak: 0 };
    let checks = 0;
    const rise = Math.max(1, target.rise);
    const fall = Math.max(1, target.fall);
    while (now() < end && !o.signal?.aborted && health.streak < rise && -health.streak < fall) {
      const begun = now();
      const release = await sem.acquire(o.signal).catch(() => null);
      if (!release) break;
      try {
        health = stepHealth(health, await probe(target, o.signal), rise, fall).next;
        checks++;
      } finally {
        release();
      }
      if (health.streak >= rise || -health.streak >= fall) break;
      const wait = Math.min(begun + target.intervalMs - now(), end - now());
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    return { target, health, checks };
  }));
}
