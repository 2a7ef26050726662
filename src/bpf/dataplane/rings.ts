// Per-service Maglev rings of the LB program (lb_rings in lb_maps.h): one inner BPF array per service holding one
// stream of u32 words, word 0 the table size M, words 1..M the real of each entry as its real slot + 1 (0 = none),
// so the packet path reads the array lb_real_slots, then the membership bitmap (ringMembership). The stream is
// packed RING_LANES words to an array element (ringBlocks); rings of older versions hold one word per element
// (4-byte values), and every reader here takes both (ringWords), so a pin of either layout can be read back. Rings are rendered, planned, digested and compared in real ids (the same on
// every node); only the inner array holds this node's slots: slotRing() translates when a ring is filled, idRing()
// back when one is read. A ring is filled completely while nothing points at
// it and then switched in with one update of the outer map, so packets see the old table or the new one.
// Rings are never rewritten in place (and are frozen, so no other process can either), so a ring's content is
// known from the map's identity: the digest of each inner map is cached by its kernel map id, and reading the
// live state costs one batched read of the outer map instead of reading every table (docs/datapath.md).
import { createHash } from 'node:crypto';
import { U32Table } from './u32-table.js';
import { BpfMap, MapType } from '../libbpf.js';
import { encodeU32 } from './codec.js';

/** BPF_F_INNER_MAP: inner maps of one outer map may differ in max_entries (must match the template's flags). */
export const BPF_F_INNER_MAP = 1 << 12;

/** The largest table an inner array can hold (u32 index, slot 0 is the size). */
export const MAX_RING_ENTRIES = 0xfffffffe;

export function ringDigest(ring: Uint32Array): string {
  const le = Buffer.from(ring.buffer, ring.byteOffset, ring.byteLength);
  // Uint32Array is host-endian; every platform Node and BPF run on together here is little-endian.
  return createHash('sha256').update(le).digest('hex');
}

/** BPF_F_RDONLY_PROG on lb_rings: the program only reads it, and its rings hold real slots (see ringsHoldSlots). */
export const BPF_F_RDONLY_PROG = 1 << 7;
/** BPF_F_NO_PREALLOC on lb_rings: its rings are of packed blocks (see ringsArePacked). */
export const BPF_F_NO_PREALLOC = 1 << 0;

/** Words of a ring's stream per inner array element (LB_RING_LANES in lb_maps.h: 16 x 4 bytes, one cache line). */
export const RING_LANES = 16;
const RING_BLOCK_BYTES = RING_LANES * 4;

/** Whether the rings under `outer` hold real slots + 1 (this version) or real ids (versions before it, whose
 * lb_rings was created without BPF_F_RDONLY_PROG). */
export function ringsHoldSlots(outer: BpfMap): boolean {
  return (outer.flags & BPF_F_RDONLY_PROG) !== 0;
}

/** Whether `outer` is of this version's layout: rings of real slots in packed blocks (BPF_F_NO_PREALLOC marks the
 * blocks; lb_rings of versions before it held one word per element and is rebuilt at load, migrate.ts). */
export function ringsArePacked(outer: BpfMap): boolean {
  return ringsHoldSlots(outer) && (outer.flags & BPF_F_NO_PREALLOC) !== 0;
}

/** lb_rings must be a hash of maps keyed by a u32 service id (a pin from another layout is refused at load). */
export function checkRingMaps(outer: BpfMap): void {
  if (outer.type !== MapType.hashOfMaps || outer.keySize !== 4)
    throw Object.assign(new Error(`lb_rings: type ${outer.type}, key ${outer.keySize} bytes; expected a hash of maps keyed by u32`),
      { code: 'EPROTO' });
}

/**
 * A ring of real ids as the inner array holds it on this node: each id as its real slot + 1, 0 (no real) as 0.
 * `slotOf` gives the slot of a real id (throws for a real the node holds no slot for); asked once per id.
 */
export function slotRing(ring: Uint32Array, slotOf: (realId: number) => number): Uint32Array {
  const out = new Uint32Array(ring.length);
  const entries = new U32Table();
  entries.set(0, 0);
  for (let i = 0; i < ring.length; i++) {
    const id = ring[i]!;
    let e = entries.get(id);
    if (e === -1) entries.set(id, (e = slotOf(id) + 1));
    out[i] = e;
  }
  return out;
}

/** The ring of real ids an inner array of slots + 1 stands for; `idOf(slot)` is the real id lb_real_slots names
 * at `slot` (0 when free: such an entry reads as "no real", so a ring naming a freed slot differs from its digest).
 * `out` may be `entries` itself (converted in place: each entry is read before it is written). */
export function idRing(entries: Uint32Array, idOf: (slot: number) => number, out: Uint32Array = new Uint32Array(entries.length)): Uint32Array {
  const ids = new U32Table();
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    if (e === 0) {
      out[i] = 0;
      continue;
    }
    let id = ids.get(e);
    if (id === -1) ids.set(e, (id = idOf(e - 1)));
    out[i] = id;
  }
  return out;
}

// The batch buffers of createRing, reused from ring to ring (the kernel copies them in; at 1,000 rings of 10,007
// entries new ones were 80 MB of garbage per cold apply). Keys are 0..n-1 for every ring, so they are written once;
// values are n blocks.
let ringKeys = Buffer.alloc(0);
let ringValues = Buffer.alloc(0);

function ringBuffers(n: number): { keys: Buffer; values: Buffer } {
  if (ringKeys.length < n * 4) {
    const from = ringKeys.length / 4;
    const grown = Buffer.allocUnsafe(Math.max(n, 2 * from) * 4);
    ringKeys.copy(grown);
    for (let i = from; i < grown.length / 4; i++) grown.writeUInt32LE(i, i * 4);
    ringKeys = grown;
    ringValues = Buffer.allocUnsafe(grown.length * RING_LANES);
  }
  return { keys: ringKeys.subarray(0, n * 4), values: ringValues.subarray(0, n * RING_BLOCK_BYTES) };
}

/**
 * The membership bitmap stored after a ring's entries: bit s%32 of word s/32 is set when the ring names real slot s
 * (entries are slots + 1). Session affinity (lb_affinity.h) trusts a remembered real only while the service's
 * current ring has its bit, so the check switches with the ring in the same outer-map update. As many words as
 * the highest slot named needs (none for an empty ring).
 */
export function ringMembership(ring: Uint32Array): Uint32Array {
  let max = 0;
  for (let i = 0; i < ring.length; i++) if (ring[i]! > max) max = ring[i]!;
  const words = new Uint32Array(max === 0 ? 0 : ((max - 1) >>> 5) + 1);
  let last = 0; // rings are long runs of few slots
  for (let i = 0; i < ring.length; i++) {
    const e = ring[i]!;
    if (e === 0 || e === last) continue;
    last = e;
    const slot = e - 1;
    words[slot >>> 5] = (words[slot >>> 5]! | (1 << (slot & 31))) >>> 0;
  }
  return words;
}

/** How many array elements (blocks of RING_LANES words) a stream of `words` words takes. */
export function ringBlocks(words: number): number {
  return Math.ceil(words / RING_LANES);
}

/** A new inner array holding `ring` (entries as the program reads them: slots + 1) and its membership bitmap
 * (ringMembership) as one stream packed in blocks (the last one padded with 0), frozen (not yet referenced by
 * lb_rings; `frozen: false` only for tests that stand in for another writer). The caller owns (closes) it. */
export function createRing(serviceId: number, ring: Uint32Array, { frozen = true } = {}): BpfMap {
  const members = ringMembership(ring);
  const n = ringBlocks(ring.length + 1 + members.length);
  const m = BpfMap.create({ name: `ring_${serviceId.toString(16)}`, type: MapType.array, keySize: 4,
    valueSize: RING_BLOCK_BYTES, maxEntries: n, flags: BPF_F_INNER_MAP });
  try {
    const { keys, values } = ringBuffers(n);
    values.writeUInt32LE(ring.length, 0);
    Buffer.from(ring.buffer, ring.byteOffset, ring.byteLength).copy(values, 4);
    Buffer.from(members.buffer, members.byteOffset, members.byteLength).copy(values, 4 + ring.byteLength);
    values.fill(0, 4 + ring.byteLength + members.byteLength);
    m.updateBatch(keys, values, n);
    // Read-only from now on for every process: the ring is never rewritten in place (a new table is a new map),
    // so only its identity can change, and the drift check reads identities (docs/reconciler.md, "Drift").
    if (frozen) m.freeze();
    return m;
  } catch (e) {
    m.close();
    throw e;
  }
}

/** The whole stream of words an inner array holds (size, entries, membership bitmap, padding), whichever layout it
 * is of: blocks of RING_LANES words (this version) or one word per element (older versions; their lb_rings is read
 * by the migration and by `gitlb plan --live` before an upgrade's load). */
export function ringWords(m: BpfMap): Uint32Array {
  // One batch of the map's own size (a bigger chunk only costs buffers the addon clears and copies).
  const { keys, values, count } = m.lookupBatch(Math.max(1, m.maxEntries));
  const lanes = m.valueSize / 4;
  const out = new Uint32Array(m.maxEntries * lanes);
  const k32 = u32View(keys, count);
  const v32 = u32View(values, count * lanes);
  for (let i = 0; i < count; i++) {
    const k = k32[i]!;
    if (k < m.maxEntries) out.set(v32.subarray(i * lanes, (i + 1) * lanes), k * lanes);
  }
  return out;
}

/** The entries held by an inner array (word 0 of its stream is their count), as stored (slots + 1; see idRing);
 * the membership bitmap after them is not part of the ring. */
export function readRing(m: BpfMap): Uint32Array {
  const words = ringWords(m);
  const size = words.length ? words[0]! : 0;
  return words.slice(1, 1 + Math.min(size, words.length - 1));
}

/** The membership bitmap stored after a ring's entries (ringMembership), as many words as the array holds after
 * them (for a ring of blocks, with the zero padding of its last block). */
export function readRingMembership(m: BpfMap): Uint32Array {
  const words = ringWords(m);
  const size = words.length ? words[0]! : 0;
  return words.slice(Math.min(1 + size, words.length));
}

/** The first `count` u32 values of `b` (host order, as the kernel wrote them), without a copy when aligned. */
function u32View(b: Buffer, count: number): Uint32Array {
  if (b.byteOffset % 4 === 0) return new Uint32Array(b.buffer, b.byteOffset, count);
  return new Uint32Array(new Uint8Array(b.subarray(0, count * 4)).buffer);
}

/** What a ring holds, by identity: size, digest and the distinct real ids it names (the planner's real deletes). */
export interface RingInfo { tableSize: number; digest: string; reals?: readonly number[] }

/** Digest of each inner map by kernel map id (ids are not reused while a map lives; see docs/bpf-binding.md). */
export class RingCache {
  private byId = new Map<number, RingInfo>();

  get(mapId: number): RingInfo | undefined {
    return this.byId.get(mapId);
  }

  set(mapId: number, info: RingInfo): void {
    this.byId.set(mapId, info);
  }

  /** Forgets maps no service refers to any more. */
  retain(liveIds: Iterable<number>): void {
    const keep = new Set(liveIds);
    for (const id of this.byId.keys()) if (!keep.has(id)) this.byId.delete(id);
  }
}

/**
 * Each service's ring identity, [service id, inner map id], sorted by service id. One BPF_MAP_LOOKUP_BATCH per
 * 4096 services (the kernel answers an outer map's batch read with inner map ids); one lookup per service on a
 * kernel without batch reads of map-in-maps.
 */
export function ringIdentities(outer: BpfMap): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  try {
    const { keys, values, count } = outer.lookupBatch(4096);
    for (let i = 0; i < count; i++) out.push([keys.readUInt32LE(i * 4), values.readUInt32LE(i * 4)]);
  } catch (e) {
    if (!['EINVAL', 'ENOTSUPP', 'EOPNOTSUPP'].includes((e as { code?: string }).code ?? '')) throw e;
    for (const key of outer.keys()) {
      const mapId = outer.innerMapId(key);
      if (mapId !== null) out.push([key.readUInt32LE(0), mapId]); // null: deleted while we walked
    }
  }
  return out.sort((a, b) => a[0] - b[0]);
}
