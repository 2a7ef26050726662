// Runs jobs one at a time. A trigger that arrives while a job of the same kind is running or queued is
// folded into one follow-up run, so a burst of webhooks, polls and ref events costs at most one extra pass.
export type JobKind = 'reconcile' | 'refresh' | 'drift';

export class SerialRunner {
  private running = false;
  private readonly queued = new Map<JobKind, Map<string, number>>(); // kind -> coalesced trigger sources, counted
  private idleWaiters: (() => void)[] = [];
  private stopped = false;
  readonly stats = { runs: 0, coalesced: 0 };

  constructor(
    private readonly jobs: Partial<Record<JobKind, (why: string) => Promise<unknown>>>,
    private readonly onError: (kind: JobKind, err: unknown) => void = () => {},
  ) {}

  trigger(kind: JobKind, why: string): void {
    if (this.stopped) return;
    const q = this.queued.get(kind);
    if (q) {
      this.stats.coalesced++;
      // distinct sources are bounded (a flood of distinct texts collapses into 'other')
      const key = q.has(why) || q.size < 8 ? why : 'other';
      q.set(key, (q.get(key) ?? 0) + 1);
    } else this.queued.set(kind, new Map([[why, 1]]));
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
        const why = this.queued.get(kind)!;
        this.queued.delete(kind);
        this.stats.runs++;
        try {
          await this.jobs[kind]?.(describeTriggers(why));
        } catch (err) {
          this.onError(kind, err);
        }
      }
    } finally {
      this.running = false;
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  /** Resolves when nothing is running or queued. */
  idle(): Promise<void> {
    if (!this.running && this.queued.size === 0) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  stop(): void {
    this.stopped = true;
    this.queued.clear();
  }
}

/** "poll x8, webhook": each coalesced trigger source once, with its count when it came more than once. */
export function describeTriggers(sources: ReadonlyMap<string, number>): string {
  return [...sources].map(([why, n]) => (n > 1 ? `${why} x${n}` : why)).join(', ');
}
