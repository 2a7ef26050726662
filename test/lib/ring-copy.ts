// Rings another writer could put under lb_rings: inner arrays of this version's layout (blocks of RING_LANES words,
// src/bpf/dataplane/rings.ts) that stay writable (the daemon's own are frozen), for the drift tests that rewrite an
// entry in place after swapping such a copy in.
import type { BpfMap } from '../../src/bpf/libbpf.js';
import { RING_LANES, createRing } from '../../src/bpf/dataplane/rings.js';
import { encodeU32 } from '../../src/bpf/dataplane/codec.js';

/** A writable inner array holding `entries` (as the program reads them: slots + 1) and its membership bitmap, in the
 * daemon's own layout (createRing), not frozen. */
export function writableRing(entries: ArrayLike<number>): BpfMap {
  return createRing(0, Uint32Array.from(entries), { frozen: false });
}

/** Entry `index` (0-based) of a ring in `m`: its block and lane (the stream's word 0 is the size). */
function entryAt(index: number): { block: Buffer; lane: number } {
  const word = 1 + index;
  return { block: encodeU32(Math.floor(word / RING_LANES)), lane: word % RING_LANES };
}

/** Entry `index` of the ring held by `m`. */
export function ringEntry(m: BpfMap, index: number): number {
  const { block, lane } = entryAt(index);
  return m.lookup(block)!.readUInt32LE(lane * 4);
}

/** Rewrites entry `index` of the (writable) ring held by `m` in place. */
export function rewriteRingEntry(m: BpfMap, index: number, value: number): void {
  const { block, lane } = entryAt(index);
  const v = Buffer.from(m.lookup(block)!);
  v.writeUInt32LE(value, lane * 4);
  m.update(block, v);
}
