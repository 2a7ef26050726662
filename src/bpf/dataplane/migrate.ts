// Carries the listeners and node settings of pins written by an older layout across a load: lb_vips values grew
// from 8 to 12 bytes (the service's stats slot) and lb_config from 64 to 68 (the new-flow rate). The loader
// re-creates such pins empty (replaceIncompatiblePins); without this, VIP traffic would go to the kernel until
// the first apply after the upgrade. Read before the load, written into the new maps right after it.
// Rings changed meaning, not size: an older lb_rings (created without BPF_F_RDONLY_PROG) holds rings of real ids,
// this version's rings of real slots. The loader replaces such a pin with an empty lb_rings; every old ring is
// rebuilt in it from ids (openOldRings, restoreOldRings) before the new program is attached, and no ring of ids
// is ever read as slots. The old program keeps reading its own (unpinned) lb_rings until it is replaced.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap } from '../libbpf.js';
import { encodeU32, isMarkerKey } from './codec.js';
import { withMap } from './pinned-stats.js';
import { checkRingMaps, createRing, readRing, ringIdentities, ringsHoldSlots, slotRing } from './rings.js';

/** What old-layout pins held; null fields when the pin was absent or already had the current layout. */
export interface OldPins {
  vips: Array<[Buffer, Buffer]> | null;
  config: Buffer | null;
}

const OLD_VIP_VALUE = 8;
const OLD_CONFIG = 64;

/** Every entry of the pin `name` when its values are still `oldValueSize` bytes (an older layout); else null. */
export function entriesOfOldLayout(pinRoot: string, name: string, oldValueSize: number): Array<[Buffer, Buffer]> | null {
  return withMap(pinRoot, name, (m) => (m.valueSize === oldValueSize
    ? m.entries().map(([k, v]) => [Buffer.from(k), Buffer.from(v)] as [Buffer, Buffer]) : null)) ?? null;
}

export function readOldPins(pinRoot: string): OldPins {
  return {
    vips: entriesOfOldLayout(pinRoot, 'lb_vips', OLD_VIP_VALUE),
    config: withMap(pinRoot, 'lb_config', (m) => {
      if (m.valueSize !== OLD_CONFIG) return null;
      const v = m.lookup(encodeU32(0));
      return v ? Buffer.from(v) : null;
    }) ?? null,
  };
}

/** Writes what old pins held into the freshly created maps: listeners get one stats slot per service (zeroed),
 * address markers the all-zero value; the settings keep their bytes with the rate guard off. */
export function restoreOldPins(old: OldPins, maps: { vips: BpfMap; config: BpfMap; serviceStats: BpfMap }): void {
  if (old.config) maps.config.update(encodeU32(0), Buffer.concat([old.config, Buffer.alloc(maps.config.valueSize - OLD_CONFIG)]));
  if (!old.vips) return;
  const slots = new Map<number, number>();
  for (const [k, v] of old.vips) {
    const value = Buffer.alloc(maps.vips.valueSize);
    if (!isMarkerKey(k)) {
      const serviceId = v.readUInt32LE(0);
      let slot = slots.get(serviceId);
      if (slot === undefined) {
        slot = slots.size;
        slots.set(serviceId, slot);
        maps.serviceStats.update(encodeU32(slot), Buffer.alloc(maps.serviceStats.valueSize));
      }
      v.copy(value, 0, 0, OLD_VIP_VALUE);
      value.writeUInt32LE(slot, OLD_VIP_VALUE);
    }
    maps.vips.update(k, value);
  }
}

/** The pinned lb_rings when its rings hold real ids (an older version), open (the caller closes it); else null. */
export function openOldRings(pinRoot: string): BpfMap | null {
  const path = join(pinRoot, 'lb_rings');
  if (!existsSync(path)) return null;
  const m = BpfMap.open(path, 'lb_rings');
  try {
    checkRingMaps(m);
    if (!ringsHoldSlots(m)) return m;
  } catch {
    // another layout: the loader replaces it, there is nothing to carry over
  }
  m.close();
  return null;
}

/**
 * Rebuilds every ring of `old` (real ids) in `rings` (real slots), all switched in by one batch (one wait for
 * running programs). `slotOf` gives the node's slot of a real id, null for a real lb_reals does not hold: its
 * entries become "no real" (the old program dropped them too; the ring's digest then differs from the rendered one
 * and the next apply refills it). Returns how many rings were rebuilt.
 */
export function restoreOldRings(old: BpfMap, rings: BpfMap, slotOf: (realId: number) => number | null): number {
  const keys: Buffer[] = [];
  const built: BpfMap[] = [];
  try {
    for (const [serviceId] of ringIdentities(old)) {
      const key = encodeU32(serviceId);
      const inner = old.openInner(key);
      if (!inner) continue;
      let ids: Uint32Array;
      try {
        ids = readRing(inner);
      } finally {
        inner.close();
      }
      built.push(createRing(serviceId, slotRing(ids, (id) => slotOf(id) ?? -1)));
      keys.push(key);
    }
    rings.setInnerBatch(keys, built);
  } finally {
    for (const r of built) r.close(); // lb_rings holds its own references
  }
  return built.length;
}
