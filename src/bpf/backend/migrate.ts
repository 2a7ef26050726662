// Carries a backend node's pins across a layout change of its maps: be_vips values grew from 4 to 16 bytes (the
// previous targetPort a listener keeps trusting, docs/backend.md) and be_stats from 21 to 22 counters. The loader
// re-creates such pins empty (replaceIncompatiblePins); without this, ipopt and ipip traffic would pass
// untranslated from the upgrade until the first apply, and the counters would restart at zero. Read before the
// load, written into the new maps right after it, before the new programs are attached: until then the old
// programs keep their old maps.
import type { BpfMap } from '../libbpf.js';
import { withMap } from '../dataplane/pinned-stats.js';
import { encodeU32 } from '../dataplane/codec.js';
import { entriesOfOldLayout } from '../dataplane/migrate.js';
import { OLD_VIP_VALUE_SIZE, STAT_NAMES } from './codec.js';

/** What old-layout pins held; null fields when the pin was absent or already had the current layout. */
export interface OldBackendPins {
  vips: Array<[Buffer, Buffer]> | null;
  /** be_stats per index: every CPU's value, as the kernel returns it. */
  stats: Buffer[] | null;
}

export function readOldBackendPins(pinRoot: string): OldBackendPins {
  return {
    vips: entriesOfOldLayout(pinRoot, 'be_vips', OLD_VIP_VALUE_SIZE),
    stats: withMap(pinRoot, 'be_stats', (m) => (m.maxEntries < STAT_NAMES.length
      ? Array.from({ length: m.maxEntries }, (_, i) => Buffer.from(m.lookup(encodeU32(i)) ?? Buffer.alloc(0))) : null)) ?? null,
  };
}

/** Writes what old pins held into the freshly created maps: be_vips values zero-padded (same first bytes, no
 * previous targetPort), counters at their old indexes (the new ones start at zero). */
export function restoreOldBackendPins(old: OldBackendPins, maps: { vips: BpfMap; stats: BpfMap }): void {
  for (const [k, v] of old.vips ?? []) {
    const value = Buffer.alloc(maps.vips.valueSize);
    v.copy(value, 0, 0, OLD_VIP_VALUE_SIZE);
    maps.vips.update(k, value);
  }
  (old.stats ?? []).forEach((v, i) => {
    if (v.length === maps.stats.valueBufferSize) maps.stats.update(encodeU32(i), v);
  });
}
