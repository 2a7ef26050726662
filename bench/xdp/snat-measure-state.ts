// The SNAT bench's data-plane state: one snat service over eight reals (so new translations spread over
// eight real endpoints' port ranges) and a dsr-ipip service over the same reals, the node's lab address as snatAddress.
import { makeState } from '../../test/lib/lb-state.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import type { DesiredState } from '../../src/render/state.js';

export const BENCH_REALS = Array.from({ length: 8 }, (_, i) => `198.51.100.${21 + i}`);
export const benchRealMac = (i: number) => `02:00:00:00:05:${(0x21 + i).toString(16)}`;
export const BENCH_VIP = '203.0.113.13';
export const BENCH_CLIENT = '192.0.2.1';
/** A dsr-ipip service over the same reals: its connection-table hit is measured in the same run, for comparison. */
export const BENCH_IPIP_VIP = '203.0.113.11';

export function benchState(): DesiredState {
  const reals = Object.fromEntries(BENCH_REALS.map((a, i) => [i + 1, a]));
  const ring = Array.from({ length: 65537 }, (_, i) => 1 + (i % BENCH_REALS.length));
  const s = makeState({ reals, addresses: [LAB.lbA.v4], hashSeed: 1, conntrackMaxEntries: 262144,
    services: [{ id: 1, vip: BENCH_VIP, forwarding: 'snat', ring, ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] },
      { id: 2, vip: BENCH_IPIP_VIP, forwarding: 'dsr-ipip', ring }] });
  return { ...s, snatAddress: LAB.lbA.v4 };
}
