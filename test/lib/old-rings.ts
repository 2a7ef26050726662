// Pins an lb_rings as versions before rings of real slots wrote it (a hash of maps without BPF_F_RDONLY_PROG whose
// rings hold real ids), for the tests of what a load makes of such pins (src/bpf/dataplane/migrate.ts).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, MapType } from '../../src/bpf/libbpf.js';
import { BPF_F_INNER_MAP } from '../../src/bpf/dataplane/rings.js';
import { encodeU32 } from '../../src/bpf/dataplane/codec.js';

function idRingMap(serviceId: number, ring: ArrayLike<number>): BpfMap {
  const m = BpfMap.create({ name: `ring_${serviceId}`, type: MapType.array, keySize: 4, valueSize: 4, maxEntries: ring.length + 1,
    flags: BPF_F_INNER_MAP });
  m.update(encodeU32(0), encodeU32(ring.length));
  for (let i = 0; i < ring.length; i++) m.update(encodeU32(i + 1), encodeU32(ring[i]!));
  m.freeze();
  return m;
}

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
