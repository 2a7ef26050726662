// Warnings that anyone who reaches a port can cause at will (a rejected webhook delivery) are logged at a bounded
// rate: within each window the first few one by one (an operator who misconfigured a secret sees the reason at
// once), the rest counted, and one summary line with the counts when the window ends. 3000 forged deliveries a
// second write a handful of lines, not 3000.

export interface RateLimitedOptions {
  warn(msg: string): void;
  /** What the lines are about, e.g. 'webhook rejected'. */
  what: string;
  /** Lines shown one by one per window. */
  burst?: number;
  windowMs?: number;
}

export class RateLimitedWarnings {
  private windowStart = -Infinity;
  private shown = 0;
  private readonly counts = new Map<string, number>();
  /** Distinct sources of the counted events (capped: it is only reported as a number). */
  private readonly sources = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private readonly burst: number;
  private readonly windowMs: number;

  constructor(private readonly o: RateLimitedOptions) {
    this.burst = o.burst ?? 5;
    this.windowMs = o.windowMs ?? 10_000;
  }

  note(reason: string, source: string, now = Date.now()): void {
    if (now - this.windowStart >= this.windowMs) {
      this.flush();
      this.windowStart = now;
      this.shown = 0;
    }
    if (this.shown < this.burst) {
      this.shown++;
      this.o.warn(`${this.o.what} from ${source}: ${reason}`);
      return;
    }
    this.counts.set(reason, (this.counts.get(reason) ?? 0) + 1);
    if (this.sources.size < 10_000) this.sources.add(source);
    if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), Math.max(0, this.windowStart + this.windowMs - now));
      this.timer.unref();
    }
  }

  /** Writes the summary of what was counted and not shown (nothing when nothing was). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const total = [...this.counts.values()].reduce((a, b) => a + b, 0);
    if (total === 0) return;
    const reasons = [...this.counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([r, n]) => `${n} ${r}`).join('; ');
    const sources = this.sources.size >= 10_000 ? 'at least 10000 addresses' : `${this.sources.size} address${this.sources.size === 1 ? '' : 'es'}`;
    this.o.warn(`${this.o.what}: ${total} more in the last ${Math.round(this.windowMs / 1000)} s, not shown one by one (${reasons}) from ${sources}`);
    this.counts.clear();
    this.sources.clear();
  }
}
