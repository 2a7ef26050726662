// Carries the listeners and node settings of pins written by an older layout across a load: lb_vips values grew
// from 8 to 12 bytes (the service's stats slot) and lb_config from 64 to 68 (the new-flow rate). The loader
// re-creates such pins empty (replaceIncompatiblePins); without this, VIP traffic would go to the kernel until
// the first apply after the upgrade. Read before the load, written into the new maps right after it.
import type { BpfMap } from '../libbpf.js';
import { encodeU32, isMarkerKey } from './codec.js';
import { withMap } from './pinned-stats.js';

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
