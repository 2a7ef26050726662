// The configurations the hostile-packet suites run the programs under (test/hostile-*.test.ts): one LB state with
// a VIP per forwarding mode and a SNAT address (xdp_lb, in the lab namespace of test/lib/xdp-lab.ts), and the
// backend's addresses (tc_backend). Shared so every corpus, ours or another project's, meets the same VIPs.
import { LAB } from './xdp-lab.js';
import { makeState } from './lb-state.js';
import type { EthSpec } from './packets.js';

export const XDP = {
  seed: 0x12345678,
  client4: '192.0.2.1',
  client6: '2001:db8:c::1',
  real4: '198.51.100.11',
  real6: '2001:db8:2::11',
  /** on the lab's second link (a known neighbour), so a translated SNAT reply has a next hop */
  snatClient: '192.0.2.140',
  vips: { l2: '203.0.113.10', ipip: '203.0.113.11', ipopt: '203.0.113.12', snat: '203.0.113.13', l2v6: '2001:db8:f::10', ipipv6: '2001:db8:f::11',
    ipoptv6: '2001:db8:f::12', gue: '203.0.113.14', guev6: '2001:db8:f::13' },
  mtu: 1500,
  /** QUIC server ids (connection-ID routing on the UDP listeners of the l2/ipip services): v4 id -> real 1, v6 -> real 3 */
  quicId4: 1000,
  quicId6: 7,
} as const;

const V = XDP.vips;
const ring = (id: number) => Array.from({ length: 7 }, () => id);
const TCP_UDP = [{ port: 80, protocol: 'TCP' as const }, { port: 53, protocol: 'UDP' as const }];

export const XDP_STATE = {
  ...makeState({
    reals: { 1: XDP.real4, 3: XDP.real6 }, hashSeed: XDP.seed, addresses: [LAB.lbA.v4, LAB.lbA.v6],
    services: [
      // session affinity on one service of each kind (l2, ipopt, snat, ipip v6): every corpus meets its path too
      // QUIC connection-ID routing on the l2 and ipip services of both families, so the QUIC frame kinds and every
      // UDP corpus meet its parser
      { id: 1, vip: V.l2, forwarding: 'dsr-l2', ring: ring(1), ports: TCP_UDP, affinityTimeoutS: 10800, quic: { 1000: 1 } },
      // source ranges on one v4, one v6 and the snat service (the clients are inside; a flipped source bit is not)
      { id: 2, vip: V.ipip, forwarding: 'dsr-ipip', ring: ring(1), ports: TCP_UDP, sourceRanges: ['192.0.2.0/24'], quic: { 1000: 1 } },
      { id: 3, vip: V.ipopt, forwarding: 'dsr-ipopt', ring: ring(1), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }],
        affinityTimeoutS: 1 },
      { id: 4, vip: V.snat, forwarding: 'snat', ring: ring(1), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }],
        sourceRanges: ['192.0.2.0/24'], affinityTimeoutS: 10800 },
      { id: 6, vip: V.l2v6, forwarding: 'dsr-l2', ring: ring(3), ports: TCP_UDP, quic: { 7: 3 } },
      { id: 7, vip: V.ipipv6, forwarding: 'dsr-ipip', ring: ring(3), ports: TCP_UDP, sourceRanges: ['2001:db8:c::/48'], affinityTimeoutS: 10800, quic: { 7: 3 } },
      { id: 9, vip: V.gue, forwarding: 'dsr-gue', ring: ring(1), ports: TCP_UDP },
      { id: 10, vip: V.guev6, forwarding: 'dsr-gue', ring: ring(3), ports: TCP_UDP, affinityTimeoutS: 10800 },
      { id: 8, vip: V.ipoptv6, forwarding: 'dsr-ipopt', ring: ring(3), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }] },
    ],
  }),
  snatAddress: LAB.lbA.v4,
  snatPorts: { min: 40000, max: 40999 },
};

/** Frames from the client, and from the real (replies to the SNAT address), as the LB receives them on lbA. */
export const ETH_IN: EthSpec = { dst: LAB.lbA.mac, src: LAB.clientMac };
export const ETH_REAL: EthSpec = { dst: LAB.lbA.mac, src: LAB.neighbours[XDP.real4]! };

/** The backend: its own address (real), the lb node it accepts tunnels from, a client, an ipip VIP (any port), an
 * ipopt VIP (VIP_PORT delivered to TARGET_PORT), and an address that is none of these. */
interface BackendAddrs { lb: string; real: string; client: string; ipipVip: string; optVip: string; stranger: string }
export const BACKEND: { v4: BackendAddrs; v6: BackendAddrs; vipPort: number; targetPort: number } = {
  v4: { lb: '203.0.113.1', real: '203.0.113.2', client: '198.51.100.7', ipipVip: '192.0.2.10', optVip: '192.0.2.20', stranger: '203.0.113.66' },
  v6: { lb: '2001:db8:1::1', real: '2001:db8:1::2', client: '2001:db8:2::7', ipipVip: '2001:db8:f::10', optVip: '2001:db8:f::20', stranger: '2001:db8:1::66' },
  vipPort: 80,
  targetPort: 8080,
};
