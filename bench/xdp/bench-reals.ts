// The bench's IPIP reals (shared by gitlb and its Katran peer): 100 on-link addresses with permanent neighbours
// in the bench namespace, and one Maglev ring over them (real ids / Katran real indexes 1..100).
import { buildMaglevTable, maglevBackendId } from '../../src/render/maglev.js';

export const BENCH_REAL_COUNT = 100;
export const benchReal = (i: number) => `198.51.100.${101 + i}`;
export const benchRealMac = (i: number) => `02:00:00:00:06:${(i + 1).toString(16).padStart(2, '0')}`;

export function benchRing(): Uint32Array {
  return buildMaglevTable(Array.from({ length: BENCH_REAL_COUNT }, (_, i) => ({
    id: maglevBackendId(benchReal(i), 80, 'TCP'), weight: 1, realId: i + 1,
  })), 65537, 1);
}
