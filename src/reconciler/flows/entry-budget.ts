// What one peer of the connection-state sync may insert here (flow-sync.ts, docs/datapath.md "Connection-state sync":
// at most 50,000 entries a second by default, twice that at once): a token bucket per peer, on the sync's clock.
/** Entries a key may insert: `perSecond` sustained, twice that at once. */
export class EntryBudget {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  constructor(private readonly perSecond: number) {}
  take(key: string, n: number, now: number): number {
    const burst = 2 * this.perSecond;
    const b = this.buckets.get(key) ?? { tokens: burst, at: now };
    b.tokens = Math.min(burst, b.tokens + ((now - b.at) / 1000) * this.perSecond);
    b.at = now;
    this.buckets.set(key, b);
    const granted = Math.max(0, Math.min(n, Math.floor(b.tokens)));
    b.tokens -= granted;
    return granted;
  }
}
