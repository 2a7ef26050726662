// Nonces seen inside the skew window. A message dated outside the window is refused anyway, so a nonce can be
// forgotten once its message's time is a window old: memory stays bounded by the message rate times the window.
export class NonceWindow {
  private readonly seen = new Map<string, number>(); // key -> expiry (local ms)

  constructor(private readonly windowMs: number, private readonly maxEntries = 100_000) {}

  /** True when (from, nonce) is new (and remembers it); false for a replay or when the window is full. */
  admit(from: string, nonce: string, time: number, now: number): boolean {
    this.expire(now);
    const key = `${from}\n${nonce}`;
    if (this.seen.has(key) || this.seen.size >= this.maxEntries) return false;
    // Kept until the message could no longer pass the time check (its time + window), measured on the local clock.
    this.seen.set(key, Math.max(now, time) + this.windowMs);
    return true;
  }

  size(): number {
    return this.seen.size;
  }

  private expire(now: number): void {
    // Insertion order is close to expiry order; stop at the first entry still live.
    for (const [key, until] of this.seen) {
      if (until > now) break;
      this.seen.delete(key);
    }
  }
}
