// Time-based triggers: the poll floor (when webhooks cannot reach the node) and the drift check.
// A spec is either a number of seconds ("30", "30s", "5m") or a cron expression with optional seconds
// field ("*/30 * * * * *"). Every tick is delayed by a random jitter so a fleet does not hit the Git
// server in the same second.
import { CronJob, validateCronExpression } from 'cron';
import { GitlbError } from '../../errors.js';

export interface Schedule {
  stop(): void;
}

export interface ScheduleOptions {
  spec: string;
  onTick: () => void;
  /** Largest jitter as a share of the period (default 0.1), capped at `maxJitterMs` (default 30 s). */
  jitterShare?: number;
  maxJitterMs?: number;
  random?: () => number;
}

const UNITS: Record<string, number> = { '': 1000, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds for an interval spec, or null when the spec is a cron expression. */
export function intervalMs(spec: string): number | null {
  const m = /^(\d+(?:\.\d+)?)(s|m|h)?$/.exec(spec.trim());
  if (!m) return null;
  const ms = Number(m[1]) * UNITS[m[2] ?? '']!;
  if (!(ms >= 100)) throw new GitlbError('InvalidOption', `schedule '${spec}': interval must be at least 100 ms`);
  return ms;
}

export function validateSchedule(spec: string): void {
  if (intervalMs(spec) !== null) return;
  const v = validateCronExpression(spec);
  if (!v.valid) throw new GitlbError('InvalidOption', `schedule '${spec}': not a number of seconds nor a cron expression (${v.error?.message ?? 'invalid'})`);
}

export function startSchedule(o: ScheduleOptions): Schedule {
  validateSchedule(o.spec);
  const random = o.random ?? Math.random;
  const share = o.jitterShare ?? 0.1;
  const maxJitter = o.maxJitterMs ?? 30_000;
  const pending = new Set<NodeJS.Timeout>();
  const fire = (periodMs: number) => {
    const t = setTimeout(() => {
      pending.delete(t);
      o.onTick();
    }, Math.floor(random() * Math.min(maxJitter, periodMs * share)));
    pending.add(t);
  };
  const every = intervalMs(o.spec);
  if (every !== null) {
    const timer = setInterval(() => fire(every), every);
    return {
      stop: () => {
        clearInterval(timer);
        for (const t of pending) clearTimeout(t);
      },
    };
  }
  const job: CronJob<null, null> = CronJob.from<null, null>({
    cronTime: o.spec,
    onTick: (): void => fire(cronPeriodMs(job)),
    start: true,
  });
  return {
    stop: () => {
      void job.stop();
      for (const t of pending) clearTimeout(t);
    },
  };
}

function cronPeriodMs(job: CronJob<null, null>): number {
  const [a, b] = job.nextDates(2);
  return a && b ? b.toMillis() - a.toMillis() : 60_000;
}

/**
 * Runs `task` on a schedule, skipping a tick while the previous run is still going, so a slow dependency (the
 * Git server, `ip`) never piles up work. Errors are logged with `what`; they never stop the schedule.
 */
export function everyExclusive(spec: string, what: string, task: () => Promise<void>, log: { warn(msg: string): void }): { stop(): void; now(): void } {
  let running = false;
  const tick = () => {
    if (running) return;
    running = true;
    task()
      .catch((err) => log.warn(`${what}: ${(err as Error).message}`))
      .finally(() => (running = false));
  };
  return { ...startSchedule({ spec, onTick: tick }), now: tick };
}
