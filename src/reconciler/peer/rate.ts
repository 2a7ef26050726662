// A token bucket per key (peer and kind): `ratePerSec` sustained, `burst` at once. Pure given `now`.
export class RateBound {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly ratePerSec: number, private readonly burst: number) {}

  take(key: string, now: number): boolean {
    const b = this.buckets.get(key) ?? { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.ratePerSec);
    b.at = now;
    this.buckets.set(key, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }
}
