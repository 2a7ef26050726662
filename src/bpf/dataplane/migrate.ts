// Carries the listeners and node settings of pins written by an older layout across a load: lb_vips values grew
// from 8 to 12 bytes (the service's stats slot), then to 16 (the session affinity timeout, 0 = none until the next
// apply), and lb_config from 64 to 68 (the new-flow rate), then to 72 (flags, lb_sync.h). The loader
// re-creates such pins empty (replaceIncompatiblePins); without this, VIP traffic would go to the kernel until
// the first apply after the upgrade. Read before the load, written into the new maps right after it.
// lb_conntrack values grew from 12 to 24 bytes (the recency mark and a coarse last-seen): the established flows of
// the old table are carried over with both 0 ("chosen at an unknown time", the oldest for the connection-state sync).
// Rings changed twice. Meaning: an older lb_rings (created without BPF_F_RDONLY_PROG) holds rings of real ids,
// later ones rings of real slots. Layout: until this version every word of a ring had an array element of its own
// (4-byte values); this version packs them in blocks of 16 (lb_rings created with BPF_F_NO_PREALLOC as the mark,
// lb_maps.h). The loader replaces a pin of either older kind with an empty lb_rings, and every old ring is rebuilt
// in it, in blocks of slots, before the new program is attached (openOldRings, restoreOldRings): the new program
// never reads an old ring, and the old one keeps reading its own (now unpinned) lb_rings until it is replaced, so
// no packet sees a mix of layouts.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap } from '../libbpf.js';
import { encodeU32, isMarkerKey } from './codec.js';
import { withMap } from './pinned-stats.js';
import { checkRingMaps, createRing, readRing, ringIdentities, ringsArePacked, ringsHoldSlots, slotRing } from './rings.js';

/** What old-layout pins held; null fields when the pin was absent or already had the current layout. */
export interface OldPins {
  vips: Array<[Buffer, Buffer]> | null;
  /** Bytes of the old lb_vips values (8: without the stats slot, 12: without the affinity timeout). */
  vipValueSize?: number;
  config: Buffer | null;
  /** lb_conntrack entries of the 12-byte layout (without recency mark) */
  conntrack?: Array<[Buffer, Buffer]> | null;
}

/** Older lb_vips value sizes: without stats slot, without affinity timeout. */
const OLD_VIP_VALUES = [8, 12] as const;
const VIP_WITHOUT_SLOT = 8;
/** Older lb_config value sizes: without the new-flow rate, without the flags. */
const OLD_CONFIGS = [64, 68];
const OLD_FLOW_VALUE = 12;

/** Every entry of the pin `name` when its values are still `oldValueSize` bytes (an older layout); else null. */
export function entriesOfOldLayout(pinRoot: string, name: string, oldValueSize: number): Array<[Buffer, Buffer]> | null {
  return withMap(pinRoot, name, (m) => (m.valueSize === oldValueSize
    ? m.entries().map(([k, v]) => [Buffer.from(k), Buffer.from(v)] as [Buffer, Buffer]) : null)) ?? null;
}

export function readOldPins(pinRoot: string): OldPins {
  let vips: Array<[Buffer, Buffer]> | null = null;
  let vipValueSize: number | undefined;
  for (const size of OLD_VIP_VALUES) {
    vips = entriesOfOldLayout(pinRoot, 'lb_vips', size);
    if (vips) { vipValueSize = size; break; }
  }
  return {
    vips,
    conntrack: entriesOfOldLayout(pinRoot, 'lb_conntrack', OLD_FLOW_VALUE),
    ...(vipValueSize !== undefined && { vipValueSize }),
    config: withMap(pinRoot, 'lb_config', (m) => {
      if (!OLD_CONFIGS.includes(m.valueSize)) return null;
      const v = m.lookup(encodeU32(0));
      return v ? Buffer.from(v) : null;
    }) ?? null,
  };
}

/** Writes what old pins held into the freshly created maps: listeners keep their bytes, without a stats slot get
 * one per service (zeroed), without an affinity timeout get 0 (none); address markers the all-zero value; the
 * settings keep their bytes with the rate guard off. */
export function restoreOldPins(old: OldPins, maps: { vips: BpfMap; config: BpfMap; serviceStats: BpfMap; conntrack?: BpfMap }): void {
  if (old.config) maps.config.update(encodeU32(0), Buffer.concat([old.config, Buffer.alloc(maps.config.valueSize - old.config.length)]));
  if (old.conntrack?.length && maps.conntrack) {
    const ct = maps.conntrack;
    const keys = Buffer.concat(old.conntrack.map(([k]) => k));
    const values = Buffer.concat(old.conntrack.map(([, v]) => Buffer.concat([v, Buffer.alloc(ct.valueBufferSize - OLD_FLOW_VALUE)])));
    ct.updateBatch(keys, values, old.conntrack.length);
  }
  if (!old.vips) return;
  const oldSize = old.vipValueSize ?? VIP_WITHOUT_SLOT;
  const slots = new Map<number, number>();
  for (const [k, v] of old.vips) {
    const value = Buffer.alloc(maps.vips.valueSize);
    if (!isMarkerKey(k)) {
      v.copy(value, 0, 0, Math.min(oldSize, value.length));
      if (oldSize === VIP_WITHOUT_SLOT) {
        const serviceId = v.readUInt32LE(0);
        let slot = slots.get(serviceId);
        if (slot === undefined) {
          slot = slots.size;
          slots.set(serviceId, slot);
          maps.serviceStats.update(encodeU32(slot), Buffer.alloc(maps.serviceStats.valueSize));
        }
        value.writeUInt32LE(slot, VIP_WITHOUT_SLOT);
      }
    }
    maps.vips.update(k, value);
  }
}

/** The pinned lb_rings when it is of an older version's layout (rings of real ids, or of one word per element),
 * open (the caller closes it); else null. */
export function openOldRings(pinRoot: string): BpfMap | null {
  const path = join(pinRoot, 'lb_rings');
  if (!existsSync(path)) return null;
  const m = BpfMap.open(path, 'lb_rings');
  try {
    checkRingMaps(m);
    if (!ringsArePacked(m)) return m;
  } catch {
    // another layout: the loader replaces it, there is nothing to carry over
  }
  m.close();
  return null;
}

/**
 * Rebuilds every ring of `old` (an older layout: real ids, or real slots one word per element) in `rings` (blocks of
 * real slots), all switched in by one batch (one wait for running programs). Rings of slots keep their entries (the
 * slots lb_real_slots holds are pinned and stay); rings of ids are translated: `slotOf` gives the node's slot of a
 * real id, null for a real lb_reals does not hold: its entries become "no real" (the old program dropped them too;
 * the ring's digest then differs from the rendered one and the next apply refills it). Every rebuilt ring gets its
 * membership bitmap (a ring of a version without one gains it). Returns how many rings were rebuilt.
 */
export function restoreOldRings(old: BpfMap, rings: BpfMap, slotOf: (realId: number) => number | null): number {
  const ofSlots = ringsHoldSlots(old);
  const keys: Buffer[] = [];
  const built: BpfMap[] = [];
  try {
    for (const [serviceId] of ringIdentities(old)) {
      const key = encodeU32(serviceId);
      const inner = old.openInner(key);
      if (!inner) continue;
      let entries: Uint32Array;
      try {
        entries = readRing(inner);
      } finally {
        inner.close();
      }
      built.push(createRing(serviceId, ofSlots ? entries : slotRing(entries, (id) => slotOf(id) ?? -1)));
      keys.push(key);
    }
    if (keys.length) rings.setInnerBatch(keys, built);
  } finally {
    for (const r of built) r.close(); // lb_rings holds its own references
  }
  return built.length;
}
