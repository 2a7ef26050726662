// The XDP bench's data-plane state (measure.ts, newflow-variants.ts): four services over the bench's 100 reals, one
// per DSR mode; the dsr-ipip and dsr-gue ones share the Maglev ring that Katran's peer is given.
import { makeState } from '../../test/lib/lb-state.js';
import type { DesiredState } from '../../src/render/state.js';
import { BENCH_REAL_COUNT, benchReal, benchRing } from './bench-reals.js';

export const CT_ENTRIES = 65536;
export const ring = benchRing();
const single = (id: number) => new Uint32Array(65537).fill(id);

export function benchState(): DesiredState {
  const reals = Object.fromEntries(Array.from({ length: BENCH_REAL_COUNT }, (_, i) => [i + 1, benchReal(i)]));
  return makeState({
    reals, addresses: ['198.51.100.1'], hashSeed: 1, conntrackMaxEntries: CT_ENTRIES,
    services: [
      { id: 1, vip: '203.0.113.10', forwarding: 'dsr-l2', ring: single(1) },
      { id: 2, vip: '203.0.113.11', forwarding: 'dsr-ipip', ring },
      { id: 3, vip: '203.0.113.12', forwarding: 'dsr-ipopt', ring: single(2), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] },
      { id: 4, vip: '203.0.113.13', forwarding: 'dsr-gue', ring },
    ],
  });
}
