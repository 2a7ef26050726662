// Nonces seen inside the skew window. A message dated outside the window is refused anyway, so a nonce can be
// forgotten once its message's time is a window old: memory stays bounded by the message rate times the window.
// Each sender has its own window and capacity: one peer (its key stolen, or just misbehaving) can fill only its own
// and never makes another peer's messages look like replays. The caller checks the sender's rate between `seen`
// and `remember`, so what a sender can make this node remember is bounded by its rate, not by what it sends.
export class NonceWindow {
  private readonly bySender = new Map<string, Map<string, number>>(); // sender -> nonce -> expiry (local ms)

  constructor(private readonly windowMs: number, private readonly maxPerSender = 50_000) {}

  /** True when `from` already sent `nonce` inside the window (a replay). */
  seen(from: string, nonce: string, now: number): boolean {
    const w = this.bySender.get(from);
    if (!w) return false;
    this.expire(w, now);
    return w.has(nonce);
  }

  /** Remembers (from, nonce); false when the nonce is known or the sender's window is full (the message is refused). */
  remember(from: string, nonce: string, time: number, now: number): boolean {
    let w = this.bySender.get(from);
    if (!w) this.bySender.set(from, (w = new Map()));
    this.expire(w, now);
    if (w.has(nonce) || w.size >= this.maxPerSender) return false;
    // Kept until the message could no longer pass the time check (its time + window), measured on the local clock.
    w.set(nonce, Math.max(now, time) + this.windowMs);
    return true;
  }

  /** Both steps at once (no rate check between them). */
  admit(from: string, nonce: string, time: number, now: number): boolean {
    return !this.seen(from, nonce, now) && this.remember(from, nonce, time, now);
  }

  size(from?: string): number {
    if (from !== undefined) return this.bySender.get(from)?.size ?? 0;
    let n = 0;
    for (const w of this.bySender.values()) n += w.size;
    return n;
  }

  private expire(w: Map<string, number>, now: number): void {
    // Insertion order is close to expiry order; stop at the first entry still live.
    for (const [nonce, until] of w) {
      if (until > now) break;
      w.delete(nonce);
    }
  }
}
