// Pins an lb_rings as older versions wrote it, for the tests of what a load makes of such pins
// (src/bpf/dataplane/migrate.ts): versions before rings of real slots (a hash of maps without BPF_F_RDONLY_PROG
// whose rings hold real ids, one word per element), and versions before rings of blocks (BPF_F_RDONLY_PROG alone:
// rings of real slots + 1, one word per element, with the membership bitmap after the entries).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, MapType } from '../../src/bpf/libbpf.js';
import { BPF_F_INNER_MAP, BPF_F_RDONLY_PROG, ringMembership } from '../../src/bpf/dataplane/rings.js';
import { encodeU32 } from '../../src/bpf/dataplane/codec.js';

/** An inner array of one word per element: the size, the entries, then `after` (a membership bitmap). */
function wordRingMap(serviceId: number, ring: ArrayLike<number>, after: ArrayLike<number> = []): BpfMap {
  const m = BpfMap.create({ name: `ring_${serviceId}`, type: MapType.array, keySize: 4, valueSize: 4,
    maxEntries: ring.length + 1 + after.length, flags: BPF_F_INNER_MAP });
  const words = [ring.length, ...Array.from(ring), ...Array.from(after)];
  const keys = Buffer.concat(words.map((_, i) => encodeU32(i)));
  m.updateBatch(keys, Buffer.concat(words.map((w) => encodeU32(w))), words.length);
  m.freeze();
  return m;
}

/** membership: false writes rings as the versions before membership bitmaps did (1 + M words, nothing after). */
export interface WordRingOptions { membership?: boolean }

/** A new (unpinned) lb_rings of the word-per-element layout of real slots (the version before blocks) holding
 * `rings` (service id -> slots + 1, each with its membership bitmap). The caller owns (closes) it. */
export function wordSlotRings(rings: ReadonlyArray<{ id: number; ring: Uint32Array }>, opts: WordRingOptions = {}): BpfMap {
  const template = wordRingMap(0, [0]);
  const outer = BpfMap.create({ name: 'lb_rings', type: MapType.hashOfMaps, keySize: 4, valueSize: 4, maxEntries: 1024,
    flags: BPF_F_RDONLY_PROG, inner: template });
  template.close();
  setWordSlotRings(outer, rings, opts);
  return outer;
}

/** Points `outer` (an lb_rings of the word-per-element layout of real slots) at a ring of that layout for each of
 * `rings` (service id -> slots + 1, each with its membership bitmap). */
export function setWordSlotRings(outer: BpfMap, rings: ReadonlyArray<{ id: number; ring: Uint32Array }>, opts: WordRingOptions = {}): void {
  for (const { id, ring } of rings) {
    const inner = wordRingMap(id, ring, opts.membership === false ? [] : ringMembership(ring));
    outer.setInner(encodeU32(id), inner);
    inner.close();
  }
}

/** Replaces the lb_rings pin under `pinRoot` by one of the word-per-element layout of real slots (wordSlotRings). */
export function pinWordSlotRings(pinRoot: string, rings: ReadonlyArray<{ id: number; ring: Uint32Array }>, opts: WordRingOptions = {}): void {
  const outer = wordSlotRings(rings, opts);
  try {
    rmSync(join(pinRoot, 'lb_rings'), { force: true });
    outer.pin(join(pinRoot, 'lb_rings'));
  } finally {
    outer.close();
  }
}

const idRingMap = (serviceId: number, ring: ArrayLike<number>) => wordRingMap(serviceId, ring);

/** Replaces the lb_rings pin under `pinRoot` by one of the older layout holding `rings` (service id -> real ids). */
export function pinIdRings(pinRoot: string, rings: ReadonlyArray<{ id: number; ring: ArrayLike<number> }>): void {
  const template = idRingMap(0, [0]);
  const outer = BpfMap.create({ name: 'lb_rings', type: MapType.hashOfMaps, keySize: 4, valueSize: 4, maxEntries: 1024, inner: template });
  template.close();
  try {
    for (const { id, ring } of rings) {
      const inner = idRingMap(id, ring);
      outer.setInner(encodeU32(id), inner);
      inner.close();
    }
    rmSync(join(pinRoot, 'lb_rings'), { force: true });
    outer.pin(join(pinRoot, 'lb_rings'));
  } finally {
    outer.close();
  }
}
