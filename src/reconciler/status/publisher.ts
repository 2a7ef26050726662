// The status publisher: hands status snapshots to the writer (status-writer.ts, through the daemon's sink) without
// waiting for the push, so a slow Git server never delays a reconcile or a health re-render. A failed push is
// counted and logged once however many snapshots it carried, retried (every 5 s for the first few failures in a
// row, then backing off up to the retry maximum) unless a newer snapshot was handed over meanwhile, and its
// recovery is said. docs/reconciler.md, "One reconcile" (status).
import type { NodeStatus } from './status-doc.js';
import { humanMs } from '../source/fetch-backoff.js';

/** Delay before a failed status write is tried again (the writer already retried races and timeouts). */
const STATUS_RETRY_MS = 5000;
const STATUS_FLAT_RETRIES = 3;

export interface StatusPublisherOptions {
  /** Writes status to Git; absent: nothing is published (unit use). */
  sink?: (status: NodeStatus, statusBranch: string, why: string) => Promise<void>;
  /** The snapshot and the branch to write it to, taken when a publish happens. */
  snapshot(): NodeStatus;
  branch(): string;
  clock: () => Date;
  /** Upper bound of the retry delay (the reconciler's retry maximum). */
  retryMaxMs: number;
  log: { info(msg: string, fields?: Record<string, unknown>): void; warn(msg: string, fields?: Record<string, unknown>): void };
}

const errorText = (err: unknown): string => (err instanceof Error ? err.message : String(err));

export class StatusPublisher {
  private generation = 0;
  private retry: NodeJS.Timeout | undefined;
  private stopped = false;
  private pending: Promise<void> = Promise.resolve();
  /** Failed pushes in a row: they back off the retry and are summed up when a push succeeds. */
  private failures = 0;
  /** The rejection last counted and logged: publish() calls coalesced into one push share it (one line per push). */
  private countedError: unknown = null;
  private loggedError: unknown = null;
  private lastPublishedMs = 0;

  constructor(private readonly o: StatusPublisherOptions) {}

  /** Publishes when nothing else did for `maxAgeMs` (an idle node's status stays fresh). */
  heartbeat(maxAgeMs: number): void {
    if (this.lastPublishedMs > 0 && this.o.clock().getTime() - this.lastPublishedMs >= maxAgeMs) this.publish('heartbeat');
  }

  /**
   * Hands a status snapshot to the sink without waiting for the push, so a slow Git server never delays the
   * next reconcile; `flush()` waits for everything handed over so far.
   */
  publish(why: string): void {
    const sink = this.o.sink;
    if (!sink) return;
    this.lastPublishedMs = this.o.clock().getTime();
    clearTimeout(this.retry);
    const generation = ++this.generation;
    const log = this.o.log;
    const write = sink(this.o.snapshot(), this.o.branch(), why).then(() => {
      if (this.failures) log.info(`status write recovered after ${this.failures} failed pushes`, { stage: 'status', failures: this.failures });
      this.failures = 0;
      this.countedError = this.loggedError = null;
    }, async (err: unknown) => {
      // Coalesced publish() calls share one push and so one rejection: it is counted and logged once.
      if (err !== this.countedError) {
        this.countedError = err;
        this.failures++;
      }
      // The branch must not keep an old status until the next change: try again later, unless a newer
      // status was handed over meanwhile (it carries everything this one did). The retry backs off (5 s
      // doubling, at most the retry maximum), so an outage of the Git server costs a few pushes, not one per 5 s.
      const logOnce = (retryMs?: number) => {
        if (err === this.loggedError) return;
        this.loggedError = err;
        log.warn(`status write failed (${this.failures} in a row${retryMs ? `; retry in ${humanMs(retryMs)}` : ''}): ${errorText(err)}`,
          { stage: 'status', reason: errorText(err), failures: this.failures, ...(retryMs && { retryMs }) });
      };
      if (generation === this.generation && !this.stopped) {
        // The first STATUS_FLAT_RETRIES retries come every 5 s: a push that lost to a slow moment must not leave the
        // branch stale for long. Only a failure that persists (an outage) backs off.
        const steps = Math.max(0, this.failures - STATUS_FLAT_RETRIES);
        const delay = Math.min(Math.max(this.o.retryMaxMs, STATUS_RETRY_MS), STATUS_RETRY_MS * 2 ** Math.min(steps, 16));
        logOnce(delay);
        this.retry = setTimeout(() => {
          if (generation === this.generation) this.publish(`retry: ${why}`);
        }, delay);
        this.retry.unref();
      } else {
        // The caller holding the newest status (if it shares this push) logs with its retry: let it go first.
        await new Promise((r) => setImmediate(r));
        logOnce();
      }
    });
    this.pending = Promise.all([this.pending, write]).then(() => undefined);
  }

  /** Stops retrying failed writes (daemon shutdown). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
  }

  /**
   * Resolves when every status handed to the sink so far has been written (or has failed and been logged). Not
   * the ones handed over meanwhile: waiting for those too never ends while health flips or status retries keep
   * publishing.
   */
  flush(): Promise<void> {
    return this.pending;
  }
}
