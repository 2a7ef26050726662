// The age of a recency mark as connection-state sync carries it (docs/datapath.md "Connection-state sync"): marks are
// CLOCK_MONOTONIC times of one node, so they travel as ages (ms before sending) and become marks again on the
// receiver's clock. Shared by the import (flow-state.ts) and the deletions (flow-gone.ts).

/** The oldest age a sync message may carry (7 days): a sender clamps older marks to it, a receiver refuses more. */
export const MAX_AGE_MS = 7 * 24 * 3600 * 1000;

/** The age of a mark taken on this node's clock, in whole ms (clamped to MAX_AGE_MS); null for an unknown mark (0). */
export function ageOf(markNs: bigint, nowNs: bigint): number | null {
  if (markNs === 0n) return null;
  const ms = markNs >= nowNs ? 0n : (nowNs - markNs) / 1_000_000n;
  return ms > BigInt(MAX_AGE_MS) ? MAX_AGE_MS : Number(ms);
}

/** A peer's age as a mark on this node's clock (never before boot: at least 1 ns); 0n for an unknown age. */
export function markOf(ageMs: number | null, nowNs: bigint): bigint {
  if (ageMs === null) return 0n;
  const m = nowNs - BigInt(ageMs) * 1_000_000n;
  return m > 0n ? m : 1n;
}

/** An age a peer may send: unknown (null), or whole ms from 0 to MAX_AGE_MS. */
export const validAge = (a: number | null) => a === null || (Number.isInteger(a) && a >= 0 && a <= MAX_AGE_MS);
