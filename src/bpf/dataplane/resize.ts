// Resizing the tables Cluster.spec.conntrack.maxEntries sizes (lb_conntrack, lb_snat_fwd, lb_snat_rev) on a running
// node: no packet-path outage, no established flow or live translation lost, and no extra lookup per packet.
// A map's max_entries is fixed at its creation, so a resize is a new map and a new instance of xdp_lb that uses it:
//   1. a new map like the old one (type, flags, key, value, BTF) of the new size; the kernel's refusal leaves all as is
//   2. load xdp_lb again, the new maps given by fd, every other map the pinned one (1 and 2 are the slow steps)
//   3. copy every entry (batched); plain hash tables (SNAT) whose entries do not fit are refused here; pin the new
//      maps beside the old ones
//   4. swap the program in the pinned XDP link (bpf_link_update, compare-and-swap), rename the new pins over the old
//      ones (bpffs renames atomically: a pin never names nothing), wait for programs still running the old instance
//   5. carry over what the old program wrote between the copy and the swap: a three-way merge per key of the copy
//      (base), the old table now (ours) and the new one (theirs): a key the new program changed since the swap is
//      left alone; otherwise the old table's change (insert, new value, for SNAT also delete) is applied.
// The old maps are freed when the old program and object are closed. Spec: docs/datapath.md, "Resizing tables".
import { renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, MapType, onCpu, onlineCpus, waitForPrograms, type BpfError, type BpfObject } from '../libbpf.js';
import { GitlbError } from '../../errors.js';
import type { DesiredState } from '../../render/state.js';
import type { Op } from '../../render/ops.js';
import { SNAT_MAPS, snatMapSizes } from './snat.js';

/** The tables whose size comes from DesiredState.conntrackMaxEntries, in the order they are resized. */
export const RESIZABLE_TABLES = ['lb_conntrack', SNAT_MAPS.fwd, SNAT_MAPS.rev, 'lb_affinity'] as const;
export type TableResize = Extract<Op, { op: 'table.resize' }>;

/** A new map is pinned beside the old one under this suffix until the swap (pin names cannot hold a dot). */
export const NEXT_PIN_SUFFIX = '_next';
const BATCH = 4096;

/** The size each resizable table should have for `desired`. */
export function desiredTableSizes(d: DesiredState): Record<string, number> {
  // session affinity remembers at most one client per new flow: sized like the connection table
  return { lb_conntrack: d.conntrackMaxEntries, ...snatMapSizes(d), lb_affinity: d.conntrackMaxEntries };
}

/** The table.resize ops that take tables of sizes `current` (by map name; absent: not loaded) to `desired`. */
export function planResizes(current: Readonly<Record<string, number>>, desired: DesiredState): TableResize[] {
  const want = desiredTableSizes(desired);
  const out: TableResize[] = [];
  for (const map of RESIZABLE_TABLES) {
    const from = current[map];
    const to = want[map];
    if (from !== undefined && to !== undefined && from !== to) out.push({ op: 'table.resize', map, from, to });
  }
  return out;
}

/** Sizes of the resizable tables pinned under `pinRoot` (for `gitlb plan --live`); absent pins are left out. */
export function pinnedTableSizes(pinRoot: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of RESIZABLE_TABLES) {
    let m: BpfMap;
    try {
      m = BpfMap.open(join(pinRoot, name), name);
    } catch (e) {
      if ((e as BpfError).code === 'ENOENT') continue;
      throw e;
    }
    out[name] = m.maxEntries;
    m.close();
  }
  return out;
}

/** Removes new-map pins a crash between their pinning and the swap left behind (nothing uses them). */
export function removeStaleNextPins(pinRoot: string): void {
  for (const name of RESIZABLE_TABLES) rmSync(join(pinRoot, name + NEXT_PIN_SUFFIX), { force: true });
}

/** A table size the kernel or the live entries refuse: CapacityExceeded (errno ENOSPC), nothing changed. */
function refuse(message: string): never {
  throw new GitlbError('CapacityExceeded', message, { errno: 'ENOSPC' });
}

/** Packed entries as read by one batched walk. */
interface Snapshot { keys: Buffer; values: Buffer; count: number }

const keyAt = (s: Snapshot, m: BpfMap, i: number) => s.keys.subarray(i * m.keySize, (i + 1) * m.keySize);
const valueAt = (s: Snapshot, m: BpfMap, i: number) => s.values.subarray(i * m.valueBufferSize, (i + 1) * m.valueBufferSize);

/** BPF_F_NO_COMMON_LRU: an LRU map with a free list and an LRU list per CPU. */
const NO_COMMON_LRU = 2;

/** Writes entries [from, to) of `snap` into `map` in batches. */
function copyRange(snap: Snapshot, map: BpfMap, from: number, to: number): void {
  for (let i = from; i < to; i += BATCH) {
    const n = Math.min(BATCH, to - i);
    map.updateBatch(snap.keys.subarray(i * map.keySize, (i + n) * map.keySize),
      snap.values.subarray(i * map.valueBufferSize, (i + n) * map.valueBufferSize), n);
  }
}

/**
 * Writes `snap` into `to` in batches. A per-CPU LRU table (lb_conntrack) takes each insert from the share of the
 * CPU the syscall runs on (max_entries / possible CPUs): copied from one CPU, more entries than one share would
 * evict each other even in a table with room for all. So the copy is spread in equal parts over the online CPUs
 * (the thread moved to each in turn, its CPU set put back after), as the traffic that wrote them was. An LRU table
 * smaller than the entries keeps what fits (later copies evict earlier ones of the same CPU).
 */
function copyInto(snap: Snapshot, to: BpfMap): void {
  const cpus = to.type === MapType.lruHash && (to.flags & NO_COMMON_LRU) !== 0 ? onlineCpus() : [];
  if (cpus.length < 2) return copyRange(snap, to, 0, snap.count);
  for (let c = 0; c < cpus.length; c++) {
    const from = Math.floor((snap.count * c) / cpus.length);
    const end = Math.floor((snap.count * (c + 1)) / cpus.length);
    try {
      onCpu(cpus[c]!, () => copyRange(snap, to, from, end));
    } catch (e) {
      // a CPU this process may not use (cpuset): that part goes in from where the thread is
      if ((e as BpfError).code !== 'EINVAL') throw e;
      copyRange(snap, to, from, end);
    }
  }
}

/**
 * Index of packed keys: open addressing over a typed array, by a 32-bit hash of the key's words; a hit is
 * confirmed by comparing the bytes. (A Map of the keys as strings costs several times more at 60,000 keys.)
 */
class KeyIndex {
  private readonly slots: Int32Array;
  private readonly mask: number;
  private readonly words: Uint32Array | null;

  constructor(private readonly keys: Buffer, private readonly size: number, count: number) {
    let n = 16;
    while (n < count * 2) n *= 2;
    this.slots = new Int32Array(n).fill(-1);
    this.mask = n - 1;
    this.words = keys.byteOffset % 4 === 0 && size % 4 === 0 ? new Uint32Array(keys.buffer, keys.byteOffset, (count * size) / 4) : null;
    this.scratch = new Uint32Array(Math.ceil(size / 4));
    this.scratchBytes = Buffer.from(this.scratch.buffer);
    for (let i = 0; i < count; i++) {
      let h = this.hashAt(i) & this.mask;
      while (this.slots[h]! >= 0) h = (h + 1) & this.mask;
      this.slots[h] = i;
    }
  }

  private hashAt(i: number): number {
    let h = 0x811c9dc5;
    if (this.words) {
      const w = this.words;
      for (let o = (i * this.size) / 4, end = o + this.size / 4; o < end; o++) h = Math.imul(h ^ w[o]!, 0x01000193);
    } else {
      for (let o = i * this.size, end = o + this.size; o < end; o++) h = Math.imul(h ^ this.keys[o]!, 0x01000193);
    }
    return h ^ (h >>> 15);
  }

  /** Words of the key looked up, read like the packed keys' (host order): the key is copied in first. */
  private readonly scratch: Uint32Array;
  private readonly scratchBytes: Buffer;

  private hashOf(key: Buffer): number {
    let h = 0x811c9dc5;
    if (this.words) {
      key.copy(this.scratchBytes, 0, 0, this.size);
      for (const w of this.scratch) h = Math.imul(h ^ w, 0x01000193);
    } else {
      for (let o = 0; o < this.size; o++) h = Math.imul(h ^ key[o]!, 0x01000193);
    }
    return h ^ (h >>> 15);
  }

  /** The index of `key` among the packed keys, or -1. */
  find(key: Buffer): number {
    for (let h = this.hashOf(key) & this.mask; ; h = (h + 1) & this.mask) {
      const i = this.slots[h]!;
      if (i < 0) return -1;
      if (this.keys.compare(key, 0, this.size, i * this.size, (i + 1) * this.size) === 0) return i;
    }
  }
}

export interface MergeCounts {
  /** Entries the old program inserted or changed after the copy, written into the new table. */
  written: number;
  /** Entries the old program deleted after the copy, deleted from the new table (plain hash tables only). */
  deleted: number;
  /** Entries of the old table that found no room in the new one (a plain hash table full). */
  lost: number;
}

/**
 * Carries into `neu` what the old program changed in `old` after `base` was copied, once no program writes `old`
 * any more. Per key: base (the copy), ours (`old` now), theirs (`neu` now). Equal base and ours: nothing to do.
 * Otherwise the old table's change wins only while theirs is still the copy (the new program has not touched the
 * key since the swap): a flow the new instance already saw keeps what it saw. An LRU table's deletions are its own
 * evictions under pressure; the resized table had room, so they are not carried over.
 */
export function mergeSinceCopy(base: Snapshot, old: BpfMap, neu: BpfMap): MergeCounts {
  const counts: MergeCounts = { written: 0, deleted: 0, lost: 0 };
  const index = new KeyIndex(base.keys, old.keySize, base.count);
  const seen = new Uint8Array(base.count);
  const now = old.lookupBatch(BATCH);
  const theirs = Buffer.alloc(neu.valueBufferSize);
  const stillCopy = (k: Buffer, b: Buffer) => neu.lookupInto(k, theirs) && theirs.equals(b);
  for (let i = 0; i < now.count; i++) {
    const k = keyAt(now, old, i);
    const ours = valueAt(now, old, i);
    const j = index.find(k);
    if (j >= 0) {
      seen[j] = 1;
      const b = valueAt(base, old, j);
      if (b.equals(ours) || !stillCopy(k, b)) continue;
      try {
        neu.update(k, ours, 'exist');
        counts.written++;
      } catch (e) {
        if ((e as BpfError).code !== 'ENOENT') throw e; // deleted by the new program since the look-up: its call
      }
      continue;
    }
    try {
      neu.update(k, ours, 'noexist'); // inserted after the copy; the new program's own entry wins
      counts.written++;
    } catch (e) {
      const code = (e as BpfError).code;
      if (code === 'EEXIST') continue;
      if (code === 'E2BIG' || code === 'ENOMEM') { counts.lost++; continue; }
      throw e;
    }
  }
  if (old.type === MapType.lruHash || old.type === MapType.lruPercpuHash) return counts;
  for (let j = 0; j < base.count; j++) {
    if (seen[j]) continue;
    const k = keyAt(base, old, j);
    if (stillCopy(k, valueAt(base, old, j)) && neu.delete(k)) counts.deleted++;
  }
  return counts;
}

export interface ResizeContext {
  pinRoot: string;
  /** The loaded object: its maps are the pinned ones, its program the one the packet path runs. */
  obj: BpfObject;
  resizes: readonly TableResize[];
  /** Loads a new instance of the program whose maps named in `mapFds` are those, every other one the pinned one. */
  load(mapFds: Record<string, BpfMap>): Promise<BpfObject>;
  /** Makes the packet path run `obj`'s program instead of the current one, atomically; throws when it cannot. */
  swap(obj: BpfObject): void;
}

export interface ResizeResult {
  /** The new object (the caller adopts it and closes the old one). */
  obj: BpfObject;
  /** Per table: entries copied before the swap, and what the merge after it did. */
  tables: Record<string, { copied: number; size: number } & MergeCounts>;
  /** Milliseconds per phase: new maps, program load, copy and swap (the window the merge covers), re-pin and
   * wait for programs still running the old instance, merge. */
  ms: { create: number; load: number; copyAndSwap: number; wait: number; merge: number };
}

/**
 * Resizes the tables of `ctx.resizes` (see the top of this file). Until the swap, any failure leaves everything as
 * it was (new maps freed, their pins removed) and is thrown; a refusal of the kernel to allocate a table, or SNAT
 * translations that would not fit, is a CapacityExceeded error (errno ENOSPC) naming the table and both sizes.
 */
export async function resizeTables(ctx: ResizeContext): Promise<ResizeResult> {
  const made: Array<{ name: string; old: BpfMap; neu: BpfMap; base: Snapshot; pin: string }> = [];
  let obj: BpfObject | null = null;
  let swapped = false;
  const t0 = performance.now();
  let t1 = t0;
  let t2 = t0;
  try {
    // the slow parts first, the new maps (the kernel preallocates a hash table: ~0.7 s per million entries; created
    // side by side, off the main thread) and the program load, so that the copy -> swap window, whose writes the
    // merge has to carry over, is the copy alone. Any refusal frees the maps made.
    const created = await Promise.allSettled(ctx.resizes.map((r) => ctx.obj.createMapLike(r.map, r.to)));
    for (const [i, r] of ctx.resizes.entries()) {
      const c = created[i]!;
      if (c.status === 'fulfilled')
        made.push({ name: r.map, old: ctx.obj.map(r.map), neu: c.value, base: { keys: Buffer.alloc(0), values: Buffer.alloc(0), count: 0 },
          pin: join(ctx.pinRoot, r.map + NEXT_PIN_SUFFIX) });
    }
    const refused = ctx.resizes.findIndex((_, i) => created[i]!.status === 'rejected');
    if (refused >= 0) {
      const r = ctx.resizes[refused]!;
      const e = (created[refused] as PromiseRejectedResult).reason as BpfError;
      refuse(`${r.map}: the kernel refused a table of ${r.to} entries (${e.code ?? 'error'}: ${e.message}); ` +
        `the table of ${ctx.obj.map(r.map).maxEntries} entries stays in place, nothing was changed`);
    }
    t1 = performance.now();
    obj = await ctx.load(Object.fromEntries(made.map((t) => [t.name, t.neu])));
    t2 = performance.now();
    for (const t of made) {
      t.base = t.old.lookupBatch(BATCH);
      if (t.old.type === MapType.hash && t.base.count > t.neu.maxEntries)
        refuse(`${t.name}: ${t.base.count} live translations do not fit in ${t.neu.maxEntries} entries (a plain hash ` +
          `table never drops one); the table of ${t.old.maxEntries} entries stays in place, nothing was changed`);
      copyInto(t.base, t.neu);
    }
    for (const t of made) {
      rmSync(t.pin, { force: true });
      t.neu.pin(t.pin);
    }
    ctx.swap(obj);
    swapped = true;
  } catch (e) {
    if (!swapped) {
      obj?.close();
      for (const t of made) {
        t.neu.close();
        rmSync(t.pin, { force: true });
      }
    }
    throw e;
  }
  const t3 = performance.now();
  // the new program runs: the pins follow it at once (a crash from here on adopts the new tables)
  for (const t of made) renameSync(t.pin, join(ctx.pinRoot, t.name));
  waitForPrograms();
  const t4 = performance.now();
  const tables: ResizeResult['tables'] = {};
  for (const t of made) {
    const merged = mergeSinceCopy(t.base, t.old, t.neu);
    tables[t.name] = { copied: t.base.count, size: t.neu.maxEntries, ...merged };
    t.neu.close(); // the new object holds its own reference
  }
  const ms = { create: t1 - t0, load: t2 - t1, copyAndSwap: t3 - t2, wait: t4 - t3, merge: performance.now() - t4 };
  return { obj, tables, ms };
}
