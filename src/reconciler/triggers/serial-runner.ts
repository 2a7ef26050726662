// Runs jobs one at a time. A trigger that arrives while a job of the same kind is running or queued is
// folded into one follow-up run, so a burst of webhooks, polls and ref events costs at most one extra pass.
export type JobKind = 'reconcile' | 'refresh' | 'drift';

/** Triggers of one kind waiting for their run: their sources, counted, and the oldest trigger's number. */
interface Queued {
  sources: Map<string, number>;
  oldest: number;
}

export class SerialRunner {
  private running = false;
  private readonly queued = new Map<JobKind, Queued>();
  /** Every trigger gets the next number; idle() waits for the triggers numbered up to the last one at its call. */
  private seq = 0;
  /** The oldest trigger number the running job covers (a follow-up it asks for inherits it). */
  private runningOldest: number | null = null;
  private idleWaiters: { upTo: number; resolve: () => void }[] = [];
  private stopped = false;
  readonly stats = { runs: 0, coalesced: 0 };

  constructor(
    private readonly jobs: Partial<Record<JobKind, (why: string) => Promise<unknown>>>,
    private readonly onError: (kind: JobKind, err: unknown) => void = () => {},
  ) {}

  trigger(kind: JobKind, why: string): void {
    this.enqueue(kind, why, ++this.seq);
  }

  /**
   * A run the running job asks for as part of its own work (a pushed revert must be applied): idle() callers
   * waiting for that job wait for this run too. Outside a job it is an ordinary trigger.
   */
  followUp(kind: JobKind, why: string): void {
    this.enqueue(kind, why, this.runningOldest ?? ++this.seq);
  }

  private enqueue(kind: JobKind, why: string, n: number): void {
    if (this.stopped) return;
    const q = this.queued.get(kind);
    if (q) {
      this.stats.coalesced++;
      // distinct sources are bounded (a flood of distinct texts collapses into 'other')
      const key = q.sources.has(why) || q.sources.size < 8 ? why : 'other';
      q.sources.set(key, (q.sources.get(key) ?? 0) + 1);
      q.oldest = Math.min(q.oldest, n);
    } else this.queued.set(kind, { sources: new Map([[why, 1]]), oldest: n });
    void this.pump();
  }

  private async pump(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      // Reconciles first: a drift check against a revision about to be replaced is wasted work.
      for (;;) {
        const kind = (['reconcile', 'refresh', 'drift'] as const).find((k) => this.queued.has(k));
        if (!kind || this.stopped) break;
        const { sources, oldest } = this.queued.get(kind)!;
        this.queued.delete(kind);
        this.stats.runs++;
        this.runningOldest = oldest;
        try {
          await this.jobs[kind]?.(describeTriggers(sources));
        } catch (err) {
          this.onError(kind, err);
        }
        this.runningOldest = null;
        this.wakeIdle();
      }
    } finally {
      this.running = false;
      this.runningOldest = null;
      this.wakeIdle();
    }
  }

  /** The oldest trigger not yet served (running or queued), Infinity when none. */
  private oldestPending(): number {
    let oldest = this.runningOldest ?? Infinity;
    if (!this.stopped) for (const q of this.queued.values()) oldest = Math.min(oldest, q.oldest);
    return oldest;
  }

  private wakeIdle(): void {
    const oldest = this.oldestPending();
    const waiting = this.idleWaiters;
    this.idleWaiters = waiting.filter((w) => w.upTo >= oldest);
    for (const w of waiting) if (w.upTo < oldest) w.resolve();
  }

  /**
   * Resolves when every trigger made before the call has been served: the job running then and the runs
   * queued then have finished, with the follow-ups they asked for. Triggers arriving meanwhile (a poll every
   * second, a flapping health check) are not waited for: a job slower than the poll interval would otherwise
   * keep the runner busy forever, and the caller waiting with it.
   */
  idle(): Promise<void> {
    const upTo = this.seq;
    if (this.oldestPending() > upTo) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push({ upTo, resolve }));
  }

  /** Drops what is queued; the running job finishes (idle() resolves then). */
  stop(): void {
    this.stopped = true;
    this.queued.clear();
    this.wakeIdle();
  }
}

/** "poll x8, webhook": each coalesced trigger source once, with its count when it came more than once. */
export function describeTriggers(sources: ReadonlyMap<string, number>): string {
  return [...sources].map(([why, n]) => (n > 1 ? `${why} x${n}` : why)).join(', ');
}
