// The revision loop: event-driven (webhook, poll, ref watch, retry timer), serial. Each pass is one revision pass
// (./revision-pass.ts: fetch -> verify -> validate -> render -> converge -> status), so a burst of triggers costs
// at most one extra pass; a pushed automatic revert is picked up at once, a transient failure comes back on the
// reconciler's backoff, and the node's own verification state is written after every pass that moved it. Drift
// checks (drift/drift-check.ts) run on the same runner (never overlapping a pass: a check against a revision about
// to be replaced is wasted) and keep an idle node's status fresh. The health loop (./health-loop.ts) never waits
// for this one. docs/reconciler.md, "Architecture".
import type { Outcome, Reconciler } from './reconciler.js';
import { writeLocalState } from '../state/local-state.js';
import { SerialRunner } from '../triggers/serial-runner.js';

export interface RevisionLoopOptions {
  reconciler: Reconciler;
  node: string;
  branch: string;
  /** The node's local state file (last verified revision and policy), written after a pass that changed it. */
  stateFile: string;
  /** An idle node rewrites its status at least this often (checked on every drift check). */
  heartbeatMs: number;
  onReconcile?: (why: string, outcome: Outcome) => void;
  log: { warn(msg: string, fields?: Record<string, unknown>): void };
}

export class RevisionLoop {
  readonly runner: SerialRunner;
  private retryTimer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly o: RevisionLoopOptions) {
    this.runner = new SerialRunner({ reconcile: (why) => this.pass(why), drift: () => this.drift() },
      (kind, err) => o.log.warn(`${kind} failed: ${(err as Error).message}`));
  }

  /** A reconcile pass is wanted (webhook, poll, ref watch, start). */
  trigger(why: string): void {
    this.runner.trigger('reconcile', why);
  }

  /** A drift check is due. */
  checkDrift(why = 'drift check'): void {
    this.runner.trigger('drift', why);
  }

  private async pass(why: string): Promise<void> {
    const r = this.o.reconciler;
    const before = r.appliedRevision;
    const out = await r.reconcile(why);
    this.o.onReconcile?.(why, out);
    if (r.appliedRevision !== before || out.kind === 'applied')
      await writeLocalState(this.o.stateFile, { node: this.o.node, branch: this.o.branch, appliedRevision: r.appliedRevision, verification: r.verifiedPolicy ?? null });
    // A pushed revert is a new revision: pick it up right away instead of waiting for the next trigger.
    if (out.kind === 'failed' && out.rollback?.pushed) this.runner.followUp('reconcile', 'automatic revert');
    // Transient failures (fetch included) come back on their own, with backoff.
    clearTimeout(this.retryTimer);
    const at = r.nextRetryAt;
    if (at && !this.stopped) this.retryTimer = setTimeout(() => this.trigger('retry'), Math.max(0, at.getTime() - Date.now()));
  }

  private async drift(): Promise<void> {
    await this.o.reconciler.checkDrift();
    this.o.reconciler.heartbeat(this.o.heartbeatMs);
  }

  /** Resolves when no pass or drift check is running or queued. */
  idle(): Promise<void> {
    return this.runner.idle();
  }

  /** Drops what is queued and sets no retry timer from now on (the running pass finishes; idle() resolves then). */
  stop(): void {
    this.stopped = true;
    this.runner.stop();
    clearTimeout(this.retryTimer);
  }

  /** Clears a retry timer a pass that was running at stop() may have set (nothing keeps the process alive). */
  clearRetry(): void {
    clearTimeout(this.retryTimer);
  }
}
