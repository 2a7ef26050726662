// Table-driven tests of the LB XDP program through BPF_PROG_TEST_RUN: for each case an input frame, the
// map state (a DesiredState applied with the real apply()), the expected action, the expected output frame
// byte for byte (built independently with test/lib/packets.ts) and the counter that must move.
// The program runs in a namespace of its own (test/lib/xdp-lab.ts) so bpf_fib_lookup has known neighbours.
import test from 'ava';
import {
  IPPROTO, TCP_FLAGS, dsrOption, encapsulate, frame, hex, icmpv4, icmpv6, ipPacket, ipv4Header, ipv6FragmentHeader,
  ipv6Header, mac, tcpSegment, udpDatagram, ethernet, gueEncapsulate, checksumProblems, type IpPacketSpec, type EthSpec,
} from '../lib/packets.js';
import { dsrExt6 } from '../lib/packets-backend.js';
import { LAB, runHarness, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { flowHash } from '../../src/bpf/dataplane/flow-hash.js';
import type { DesiredState } from '../../src/render/state.js';

const TAG = 'xdpt';
const SEED = 0x12345678;
const CLIENT4 = '192.0.2.1';
const CLIENT6 = '2001:db8:c::1';
const REALS: Record<number, string> = {
  1: '198.51.100.11', 2: '198.51.100.12', 3: '2001:db8:2::11', 4: '2001:db8:2::12', 5: '203.0.113.200',
  6: '192.0.2.140', 7: '198.51.100.99', 8: '2001:db8:9::1', 9: '198.51.100.13',
};
const REAL_MAC: Record<string, string> = { ...LAB.neighbours, ...LAB.lbCNeighbours, '203.0.113.200': LAB.gwMac };
const ring7 = (...ids: number[]) => Array.from({ length: 7 }, (_, i) => ids[i % ids.length]!);

const SERVICES: SvcSpec[] = [
  { id: 1, vip: '203.0.113.10', forwarding: 'dsr-l2', ring: ring7(1, 2) },
  { id: 2, vip: '203.0.113.11', forwarding: 'dsr-ipip', ring: ring7(1), ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }] },
  { id: 3, vip: '203.0.113.12', forwarding: 'dsr-ipopt', ring: ring7(1),
    ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }] },
  { id: 4, vip: '203.0.113.13', forwarding: 'snat', ring: ring7(1) },
  { id: 5, vip: '203.0.113.14', forwarding: 'dsr-l2', ring: ring7(0) },
  { id: 6, vip: '2001:db8:f::10', forwarding: 'dsr-l2', ring: ring7(3, 4) },
  { id: 7, vip: '2001:db8:f::11', forwarding: 'dsr-ipip', ring: ring7(3), ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }] },
  { id: 8, vip: '2001:db8:f::12', forwarding: 'dsr-ipopt', ring: ring7(3),
    ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }] },
  { id: 9, vip: '203.0.113.15', forwarding: 'dsr-ipip', ring: ring7(3) },
  { id: 10, vip: '203.0.113.16', forwarding: 'dsr-l2', ring: ring7(5) },
  { id: 11, vip: '203.0.113.17', forwarding: 'dsr-l2', ring: ring7(6) },
  { id: 12, vip: '203.0.113.18', forwarding: 'dsr-l2', ring: ring7(7) },
  { id: 13, vip: '2001:db8:f::18', forwarding: 'dsr-l2', ring: ring7(8) },
  { id: 14, vip: '203.0.113.19', forwarding: 'dsr-l2', ring: ring7(1, 2), hashSourcePort: false },
  { id: 15, vip: '203.0.113.20', forwarding: 'dsr-l2', ring: ring7(9) },
  { id: 16, vip: '203.0.113.21', forwarding: 'dsr-ipip', ring: ring7(5) },
  { id: 17, vip: '203.0.113.22', forwarding: 'dsr-ipopt', ring: ring7(3) },
  { id: 18, vip: '203.0.113.23', forwarding: 'dsr-gue', ring: ring7(1), ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }] },
  { id: 19, vip: '2001:db8:f::13', forwarding: 'dsr-gue', ring: ring7(3), ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }] },
  { id: 20, vip: '203.0.113.24', forwarding: 'dsr-gue', ring: ring7(3) },
  { id: 21, vip: '203.0.113.25', forwarding: 'dsr-gue', ring: ring7(1), guePort: 9999 },
];
const withRing = (id: number, ring: number[]) => SERVICES.map((s) => (s.id === id ? { ...s, ring } : s));
const STATES: Record<string, DesiredState> = {
  base: makeState({ reals: REALS, services: SERVICES, addresses: ['198.51.100.1', '2001:db8:2::1'], hashSeed: SEED }),
  // service 15's ring moves to real 2; real 9 stays known (draining): its established flows continue
  drain: makeState({ reals: REALS, services: withRing(15, ring7(2)), addresses: ['198.51.100.1', '2001:db8:2::1'], hashSeed: SEED }),
  // real 9 removed entirely: its flows fall back to the ring
  removed: makeState({ reals: Object.fromEntries(Object.entries(REALS).filter(([id]) => id !== '9')),
    services: withRing(15, ring7(2)), addresses: ['198.51.100.1', '2001:db8:2::1'], hashSeed: SEED }),
  multiSrc: makeState({ reals: REALS, services: SERVICES, addresses: ['198.51.100.1', '198.51.100.2', '198.51.100.3'], hashSeed: SEED }),
  kernelSrc: makeState({ reals: REALS, services: SERVICES, hashSeed: SEED }),
};

type Action = 'drop' | 'pass' | 'tx' | 'redirect';
const ACTION: Record<Action, number> = { drop: 1, pass: 2, tx: 3, redirect: 4 };
interface Case {
  name: string;
  state?: keyof typeof STATES;
  keepCt?: boolean;
  input: Buffer;
  action: Action;
  output?: Buffer; // default for pass: the input, unchanged
  counter?: string;
  /** the expected output carries a wrong checksum on purpose (a damaged input's, never laundered) */
  damaged?: true;
}

const ETH_IN: EthSpec = { dst: LAB.lbA.mac, src: LAB.clientMac };
const tcp = (src: string, dst: string, sport: number, dport: number, flags: number = TCP_FLAGS.SYN, extra: Partial<IpPacketSpec> = {}) =>
  ipPacket({ src, dst, l4: { tcp: { sport, dport, flags, seq: 1000, ack: flags & TCP_FLAGS.ACK ? 2000 : 0 } }, ...extra });
const udp = (src: string, dst: string, sport: number, dport: number, payload = Buffer.from('query'), extra: Partial<IpPacketSpec> = {}) =>
  ipPacket({ src, dst, l4: { udp: { sport, dport, payload } }, ...extra });
const inFrame = (ip: Buffer, eth: EthSpec = ETH_IN) => frame(eth, ip);
/** dsr-l2 output: MACs rewritten, the rest byte-identical */
const l2Out = (input: Buffer, realMac: string, ourMac: string = LAB.lbA.mac) =>
  Buffer.concat([mac(realMac), mac(ourMac), input.subarray(12)]);
const hashOf = (src: string, dst: string, sport: number, dport: number, proto: number, useSport = true) =>
  flowHash({ src, dst, sport, dport, proto }, useSport, SEED);
const realFor = (svc: number, src: string, dst: string, sport: number, dport: number, proto: number, useSport = true) => {
  const ring = SERVICES.find((s) => s.id === svc)!.ring as number[];
  return ring[hashOf(src, dst, sport, dport, proto, useSport) % ring.length]!;
};
const ipipOut = (inner: Buffer, realId: number, src: string, hash: number, eth: EthSpec = {}) => {
  const real = REALS[realId]!;
  const innerTos = inner[0]! >> 4 === 4 ? inner[1]! : ((inner.readUInt16BE(0) >> 4) & 0xff);
  const outer = encapsulate({ src, dst: real, v4: { tos: innerTos, df: true, ttl: 64, id: 0 },
    v6: { trafficClass: innerTos, flowLabel: hash & 0xfffff, hopLimit: 64 } }, inner);
  return frame({ dst: REAL_MAC[real]!, src: LAB.lbA.mac, vlan: eth.vlan }, outer);
};
/** dsr-gue output: outer header as ipip's, then UDP from 0xc000 | 14 bits of the flow hash to the GUE port */
const gueOut = (inner: Buffer, realId: number, src: string, hash: number, port = 6080, eth: EthSpec = {}) => {
  const real = REALS[realId]!;
  const innerTos = inner[0]! >> 4 === 4 ? inner[1]! : ((inner.readUInt16BE(0) >> 4) & 0xff);
  const outer = gueEncapsulate({ src, dst: real, sport: 0xc000 | (hash & 0x3fff), dport: port, v4: { tos: innerTos, df: true, ttl: 64, id: 0 },
    v6: { trafficClass: innerTos, flowLabel: hash & 0xfffff, hopLimit: 64 } }, inner);
  return frame({ dst: REAL_MAC[real]!, src: LAB.lbA.mac, vlan: eth.vlan }, outer);
};
/** ICMP frag-needed from the VIP back to the client: original IP header + 8 bytes of L4 quoted */
const fragNeeded = (inner: Buffer, mtu: number, eth: EthSpec = ETH_IN) => {
  const ihl = (inner[0]! & 0xf) * 4;
  const rest = Buffer.alloc(4);
  rest.writeUInt16BE(mtu, 2);
  const icmp = icmpv4(3, 4, rest, inner.subarray(0, ihl + 8));
  const src = [...inner.subarray(16, 20)].join('.');
  const dst = [...inner.subarray(12, 16)].join('.');
  return frame({ dst: eth.src, src: eth.dst, vlan: eth.vlan }, Buffer.concat([ipv4Header({ src, dst, proto: IPPROTO.ICMP, ttl: 64 }, icmp.length), icmp]));
};
const tooBig = (inner: Buffer, mtu: number, vip: string, client: string) => {
  const rest = Buffer.alloc(4);
  rest.writeUInt32BE(mtu);
  const icmp = icmpv6(vip, client, 2, 0, rest, inner.subarray(0, 48));
  return frame({ dst: ETH_IN.src, src: ETH_IN.dst }, Buffer.concat([ipv6Header({ src: vip, dst: client, nextHeader: IPPROTO.ICMPV6, hopLimit: 64 }, icmp.length), icmp]));
};
const big = (n: number) => Buffer.alloc(n, 0x61);

const cases: Case[] = [];
const add = (c: Case) => cases.push(c);

// ---- dsr-l2
{
  const p = tcp(CLIENT4, '203.0.113.10', 40001, 80);
  const r = realFor(1, CLIENT4, '203.0.113.10', 40001, 80, 6);
  add({ name: 'l2 v4 SYN goes to the ring real with MACs rewritten', input: inFrame(p), action: 'tx', output: l2Out(inFrame(p), REAL_MAC[REALS[r]!]!), counter: 'tx' });
  const a = tcp(CLIENT4, '203.0.113.10', 40001, 80, TCP_FLAGS.ACK);
  add({ name: 'l2 v4 ACK after the SYN hits the connection table', keepCt: true, input: inFrame(a), action: 'tx', output: l2Out(inFrame(a), REAL_MAC[REALS[r]!]!), counter: 'ct_hit' });
  const a2 = tcp(CLIENT4, '203.0.113.10', 40002, 80, TCP_FLAGS.ACK);
  const r2 = realFor(1, CLIENT4, '203.0.113.10', 40002, 80, 6);
  add({ name: 'l2 v4 non-SYN without entry misses and still uses the ring', input: inFrame(a2), action: 'tx', output: l2Out(inFrame(a2), REAL_MAC[REALS[r2]!]!), counter: 'ct_miss' });
  const u = udp(CLIENT4, '203.0.113.10', 40003, 80);
  add({ name: 'l2 UDP to a TCP-only VIP port passes', input: inFrame(u), action: 'pass', counter: 'pass_not_vip' });
  const v = tcp(CLIENT4, '203.0.113.10', 40004, 80);
  const rv = realFor(1, CLIENT4, '203.0.113.10', 40004, 80, 6);
  const vin = inFrame(v, { ...ETH_IN, vlan: 42 });
  add({ name: 'l2 v4 SYN with an 802.1Q tag keeps the tag', input: vin, action: 'tx', output: l2Out(vin, REAL_MAC[REALS[rv]!]!), counter: 'tx' });
  const o = tcp(CLIENT4, '203.0.113.10', 40005, 80, TCP_FLAGS.SYN, { v4: { options: Buffer.from([0x94, 0x04, 0, 0]) } });
  const ro = realFor(1, CLIENT4, '203.0.113.10', 40005, 80, 6);
  add({ name: 'l2 v4 SYN with IPv4 options (router alert) is forwarded untouched', input: inFrame(o), action: 'tx', output: l2Out(inFrame(o), REAL_MAC[REALS[ro]!]!) });
  const p6 = tcp(CLIENT6, '2001:db8:f::10', 40006, 80);
  const r6 = realFor(6, CLIENT6, '2001:db8:f::10', 40006, 80, 6);
  add({ name: 'l2 v6 SYN', input: inFrame(p6), action: 'tx', output: l2Out(inFrame(p6), REAL_MAC[REALS[r6]!]!), counter: 'tx' });
  const a6 = tcp(CLIENT6, '2001:db8:f::10', 40006, 80, TCP_FLAGS.ACK | TCP_FLAGS.PSH);
  add({ name: 'l2 v6 ACK hits the connection table', keepCt: true, input: inFrame(a6), action: 'tx', output: l2Out(inFrame(a6), REAL_MAC[REALS[r6]!]!), counter: 'ct_hit' });
  const g = tcp(CLIENT4, '203.0.113.16', 40007, 80);
  add({ name: 'l2 routed real gets the gateway MAC', input: inFrame(g), action: 'tx', output: l2Out(inFrame(g), LAB.gwMac) });
  const rd = tcp(CLIENT4, '203.0.113.17', 40008, 80);
  add({ name: 'l2 real behind another interface is redirected', input: inFrame(rd), action: 'redirect',
    output: l2Out(inFrame(rd), LAB.lbCNeighbours['192.0.2.140']!, LAB.lbC.mac), counter: 'redirect' });
  const nn = tcp(CLIENT4, '203.0.113.18', 40009, 80);
  add({ name: 'l2 real without neighbour entry is dropped and counted', input: inFrame(nn), action: 'drop', counter: 'drop_fib_no_neigh' });
  const nr = tcp(CLIENT6, '2001:db8:f::18', 40010, 80);
  add({ name: 'l2 real without route is dropped and counted', input: inFrame(nr), action: 'drop', counter: 'drop_fib' });
  // hash.sourcePort false: the source port does not influence the choice
  for (const sport of [41000, 41001, 41002]) {
    const h = tcp(CLIENT4, '203.0.113.19', sport, 80);
    const rh = realFor(14, CLIENT4, '203.0.113.19', 41000, 80, 6, false);
    add({ name: `l2 hashSourcePort=false: sport ${sport} gets the same real as sport 41000`, input: inFrame(h), action: 'tx', output: l2Out(inFrame(h), REAL_MAC[REALS[rh]!]!) });
  }
  // several source ports with the source port hashed: each gets the real its hash names (both reals used)
  for (const sport of [42000, 42001, 42002, 42003]) {
    const h = tcp(CLIENT4, '203.0.113.10', sport, 80);
    const rh = realFor(1, CLIENT4, '203.0.113.10', sport, 80, 6);
    add({ name: `l2 ring choice for sport ${sport} matches the documented hash (real ${rh})`, input: inFrame(h), action: 'tx', output: l2Out(inFrame(h), REAL_MAC[REALS[rh]!]!) });
  }
}

// ---- connection table across ring changes, drain, removal
{
  const s = tcp(CLIENT4, '203.0.113.20', 43000, 80);
  add({ name: 'ct: SYN under ring A goes to real 9', input: inFrame(s), action: 'tx', output: l2Out(inFrame(s), REAL_MAC[REALS[9]!]!) });
  const a = tcp(CLIENT4, '203.0.113.20', 43000, 80, TCP_FLAGS.ACK);
  add({ name: 'ct: after the ring switched to real 2 (real 9 draining), the established flow stays on real 9', state: 'drain', keepCt: true,
    input: inFrame(a), action: 'tx', output: l2Out(inFrame(a), REAL_MAC[REALS[9]!]!), counter: 'ct_hit' });
  const n = tcp(CLIENT4, '203.0.113.20', 43001, 80);
  add({ name: 'ct: a new flow under the drained ring goes to real 2', state: 'drain', keepCt: true, input: inFrame(n), action: 'tx', output: l2Out(inFrame(n), REAL_MAC[REALS[2]!]!) });
  add({ name: 'ct: once real 9 is removed its flows fall back to the ring', state: 'removed', keepCt: true,
    input: inFrame(a), action: 'tx', output: l2Out(inFrame(a), REAL_MAC[REALS[2]!]!), counter: 'ct_miss' });
  const syn = tcp(CLIENT4, '203.0.113.20', 43002, 80);
  add({ name: 'ct: a SYN always consults the ring (state back to base: real 9)', state: 'base', input: inFrame(syn), action: 'tx', output: l2Out(inFrame(syn), REAL_MAC[REALS[9]!]!) });
  const e = tcp(CLIENT4, '203.0.113.14', 43003, 80);
  add({ name: 'empty service drops new flows and counts them', input: inFrame(e), action: 'drop', counter: 'drop_no_real' });
}

// ---- dsr-ipip
{
  const p = tcp(CLIENT4, '203.0.113.11', 44000, 80, TCP_FLAGS.SYN, { v4: { tos: 0x28, id: 77 } });
  const h = hashOf(CLIENT4, '203.0.113.11', 44000, 80, 6);
  add({ name: 'ipip v4 SYN: outer IPv4 from the node address, DF, tos copied', input: inFrame(p), action: 'tx', output: ipipOut(p, 1, '198.51.100.1', h), counter: 'tx' });
  const a = tcp(CLIENT4, '203.0.113.11', 44000, 80, TCP_FLAGS.ACK);
  add({ name: 'ipip v4 ACK (ct hit) is encapsulated too', keepCt: true, input: inFrame(a), action: 'tx', output: ipipOut(a, 1, '198.51.100.1', h), counter: 'ct_hit' });
  const u = udp(CLIENT4, '203.0.113.11', 44001, 53);
  add({ name: 'ipip v4 UDP', input: inFrame(u), action: 'tx', output: ipipOut(u, 1, '198.51.100.1', hashOf(CLIENT4, '203.0.113.11', 44001, 53, 17)) });
  const v = tcp(CLIENT4, '203.0.113.11', 44002, 80);
  add({ name: 'ipip v4 SYN with VLAN tag', input: inFrame(v, { ...ETH_IN, vlan: 7 }), action: 'tx',
    output: ipipOut(v, 1, '198.51.100.1', hashOf(CLIENT4, '203.0.113.11', 44002, 80, 6), { vlan: 7 }) });
  const p6 = tcp(CLIENT6, '2001:db8:f::11', 44003, 80, TCP_FLAGS.SYN, { v6: { trafficClass: 0xb8, flowLabel: 0x12345 } });
  const h6 = hashOf(CLIENT6, '2001:db8:f::11', 44003, 80, 6);
  add({ name: 'ipip v6 SYN: IPv6-in-IPv6, flow label carries the flow hash', input: inFrame(p6), action: 'tx', output: ipipOut(p6, 3, '2001:db8:2::1', h6) });
  const u6 = udp(CLIENT6, '2001:db8:f::11', 44004, 53);
  add({ name: 'ipip v6 UDP', input: inFrame(u6), action: 'tx', output: ipipOut(u6, 3, '2001:db8:2::1', hashOf(CLIENT6, '2001:db8:f::11', 44004, 53, 17)) });
  const m = tcp(CLIENT4, '203.0.113.15', 44005, 80);
  add({ name: 'ipip v4 VIP with an IPv6 real: IPv4-in-IPv6', input: inFrame(m), action: 'tx', output: ipipOut(m, 3, '2001:db8:2::1', hashOf(CLIENT4, '203.0.113.15', 44005, 80, 6)) });
  const g = tcp(CLIENT4, '203.0.113.21', 44006, 80);
  add({ name: 'ipip routed real: outer header to the real, gateway MAC', input: inFrame(g), action: 'tx', output: ipipOut(g, 5, '198.51.100.1', hashOf(CLIENT4, '203.0.113.21', 44006, 80, 6)) });
  for (const sport of [44010, 44011, 44012]) {
    const q = tcp(CLIENT4, '203.0.113.11', sport, 80);
    const hq = hashOf(CLIENT4, '203.0.113.11', sport, 80, 6);
    const srcs = ['198.51.100.1', '198.51.100.2', '198.51.100.3'];
    add({ name: `ipip outer source picked per flow among the node's addresses (sport ${sport})`, state: 'multiSrc', input: inFrame(q), action: 'tx',
      output: ipipOut(q, 1, srcs[(hq >>> 16) % 3]!, hq) });
  }
  const k = tcp(CLIENT4, '203.0.113.11', 44013, 80);
  add({ name: 'ipip without configured addresses uses the kernel-chosen source', state: 'kernelSrc', input: inFrame(k), action: 'tx',
    output: ipipOut(k, 1, '198.51.100.1', hashOf(CLIENT4, '203.0.113.11', 44013, 80, 6)) });
  // MTU: 1500 - 20 leaves 1480 for the client's packet
  const fits = tcp(CLIENT4, '203.0.113.11', 44020, 80, TCP_FLAGS.ACK, { l4: { tcp: { sport: 44020, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1480 - 40) } } });
  add({ name: 'ipip v4 packet of exactly MTU-20 is encapsulated', state: 'base', input: inFrame(fits), action: 'tx', output: ipipOut(fits, 1, '198.51.100.1', hashOf(CLIENT4, '203.0.113.11', 44020, 80, 6)) });
  const tooLarge = tcp(CLIENT4, '203.0.113.11', 44021, 80, TCP_FLAGS.ACK, { v4: { df: true }, l4: { tcp: { sport: 44021, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1481 - 40) } } });
  add({ name: 'ipip v4 packet over MTU-20 gets ICMP frag-needed (mtu 1480) from the VIP', input: inFrame(tooLarge), action: 'tx', output: fragNeeded(tooLarge, 1480), counter: 'icmp_sent' });
  const vl = tcp(CLIENT4, '203.0.113.11', 44022, 80, TCP_FLAGS.ACK, { v4: { df: true }, l4: { tcp: { sport: 44022, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1470) } } });
  add({ name: 'ipip frag-needed keeps the VLAN tag', input: inFrame(vl, { ...ETH_IN, vlan: 9 }), action: 'tx', output: fragNeeded(vl, 1480, { ...ETH_IN, vlan: 9 }), counter: 'icmp_sent' });
  const t6 = tcp(CLIENT6, '2001:db8:f::11', 44023, 80, TCP_FLAGS.ACK, { l4: { tcp: { sport: 44023, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1500 - 40 - 20) } } });
  add({ name: 'ipip v6 packet over MTU-40 gets ICMPv6 packet-too-big (mtu 1460)', input: inFrame(t6), action: 'tx', output: tooBig(t6, 1460, '2001:db8:f::11', CLIENT6), counter: 'icmp_sent' });
}

// ---- dsr-ipopt
{
  const VIP = '203.0.113.12';
  const R = REALS[1]!;
  const p = tcp(CLIENT4, VIP, 45000, 80, TCP_FLAGS.SYN, { v4: { id: 99, ttl: 60 } });
  const out = ipPacket({ src: CLIENT4, dst: R, v4: { id: 99, ttl: 60, options: dsrOption(VIP, 80) },
    l4: { tcp: { sport: 45000, dport: 8080, flags: TCP_FLAGS.SYN, seq: 1000, ack: 0 } } });
  add({ name: 'ipopt SYN: dst -> real, port -> targetPort, DSR option (0x9a, 8, port, VIP) inserted', input: inFrame(p), action: 'tx',
    output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, out), counter: 'tx' });
  const a = tcp(CLIENT4, VIP, 45000, 80, TCP_FLAGS.ACK);
  const aout = ipPacket({ src: CLIENT4, dst: R, l4: { tcp: { sport: 45000, dport: 8080, flags: TCP_FLAGS.ACK, seq: 1000, ack: 2000 } } });
  add({ name: 'ipopt ACK: rewritten without option', keepCt: true, input: inFrame(a), action: 'tx', output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, aout), counter: 'ct_hit' });
  const u = udp(CLIENT4, VIP, 45001, 53);
  const uout = ipPacket({ src: CLIENT4, dst: R, v4: { options: dsrOption(VIP, 53) }, l4: { udp: { sport: 45001, dport: 53, payload: Buffer.from('query') } } });
  add({ name: 'ipopt UDP: every datagram carries the option', input: inFrame(u), action: 'tx', output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, uout) });
  add({ name: 'ipopt UDP: second datagram of the flow carries it too', keepCt: true, input: inFrame(u), action: 'tx', output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, uout), counter: 'ct_hit' });
  const u0 = ipPacket({ src: CLIENT4, dst: VIP, l4: { udp: { sport: 45002, dport: 53, payload: Buffer.from('q'), checksum: 0 } } });
  const u0out = ipPacket({ src: CLIENT4, dst: R, v4: { options: dsrOption(VIP, 53) }, l4: { udp: { sport: 45002, dport: 53, payload: Buffer.from('q'), checksum: 0 } } });
  add({ name: 'ipopt UDP without checksum keeps checksum 0', input: inFrame(u0), action: 'tx', output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, u0out) });
  const opts = Buffer.from([0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00]); // router alert, NOP NOP NOP, EOL
  const wo = tcp(CLIENT4, VIP, 45003, 80, TCP_FLAGS.SYN, { v4: { options: opts } });
  const woout = ipPacket({ src: CLIENT4, dst: R, v4: { options: Buffer.concat([dsrOption(VIP, 80), opts]) },
    l4: { tcp: { sport: 45003, dport: 8080, flags: TCP_FLAGS.SYN, seq: 1000, ack: 0 } } });
  add({ name: 'ipopt SYN with existing options: DSR option first, old options after', input: inFrame(wo), action: 'tx', output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, woout) });
  const full = tcp(CLIENT4, VIP, 45004, 80, TCP_FLAGS.SYN, { v4: { options: Buffer.alloc(36, 0x01) } });
  add({ name: 'ipopt SYN whose options leave no room is refused', input: inFrame(full), action: 'drop', counter: 'drop_ipopt_no_room' });
  const edge = tcp(CLIENT4, VIP, 45005, 80, TCP_FLAGS.SYN, { v4: { options: Buffer.alloc(32, 0x01) } });
  const edgeOut = ipPacket({ src: CLIENT4, dst: R, v4: { options: Buffer.concat([dsrOption(VIP, 80), Buffer.alloc(32, 0x01)]) },
    l4: { tcp: { sport: 45005, dport: 8080, flags: TCP_FLAGS.SYN, seq: 1000, ack: 0 } } });
  add({ name: 'ipopt SYN with 32 bytes of options fills the header to 60 bytes', input: inFrame(edge), action: 'tx', output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, edgeOut) });
  const bigU = udp(CLIENT4, VIP, 45006, 53, big(1500 - 28 - 4), { v4: { df: true } });
  add({ name: 'ipopt UDP over MTU-8 gets ICMP frag-needed (mtu 1492)', input: inFrame(bigU), action: 'tx', output: fragNeeded(bigU, 1492), counter: 'icmp_sent' });
  const mixed = tcp(CLIENT4, '203.0.113.22', 45007, 80);
  add({ name: 'ipopt with an IPv4 VIP and an IPv6 real is unsupported: dropped and counted', input: inFrame(mixed), action: 'drop', counter: 'drop_unsupported' });
}

// ---- dsr-gue: IP in UDP (GUE variant 1)
{
  const V4 = '203.0.113.23';
  const V6 = '2001:db8:f::13';
  const p = tcp(CLIENT4, V4, 48000, 80, TCP_FLAGS.SYN, { v4: { tos: 0x28, id: 5 } });
  const h = hashOf(CLIENT4, V4, 48000, 80, 6);
  add({ name: 'gue v4 SYN: outer IPv4 + UDP to 6080, source port from the flow hash, UDP checksum 0', input: inFrame(p), action: 'tx', output: gueOut(p, 1, '198.51.100.1', h), counter: 'tx' });
  const a = tcp(CLIENT4, V4, 48000, 80, TCP_FLAGS.ACK);
  add({ name: 'gue v4 ACK (ct hit): the same outer source port', keepCt: true, input: inFrame(a), action: 'tx', output: gueOut(a, 1, '198.51.100.1', h), counter: 'ct_hit' });
  for (const sport of [48001, 48002, 48003]) {
    const q = tcp(CLIENT4, V4, sport, 80);
    add({ name: `gue v4 outer source port follows the flow hash (client port ${sport})`, input: inFrame(q), action: 'tx',
      output: gueOut(q, 1, '198.51.100.1', hashOf(CLIENT4, V4, sport, 80, 6)) });
  }
  const u = udp(CLIENT4, V4, 48004, 53);
  add({ name: 'gue v4 UDP', input: inFrame(u), action: 'tx', output: gueOut(u, 1, '198.51.100.1', hashOf(CLIENT4, V4, 48004, 53, 17)) });
  const v = tcp(CLIENT4, V4, 48005, 80);
  add({ name: 'gue v4 SYN with a VLAN tag keeps the tag', input: inFrame(v, { ...ETH_IN, vlan: 12 }), action: 'tx',
    output: gueOut(v, 1, '198.51.100.1', hashOf(CLIENT4, V4, 48005, 80, 6), 6080, { vlan: 12 }) });
  const port = tcp(CLIENT4, '203.0.113.25', 48006, 80);
  add({ name: 'gue to another GUE port (the listener carries it)', input: inFrame(port), action: 'tx',
    output: gueOut(port, 1, '198.51.100.1', hashOf(CLIENT4, '203.0.113.25', 48006, 80, 6), 9999) });
  const p6 = tcp(CLIENT6, V6, 48007, 80, TCP_FLAGS.SYN, { v6: { trafficClass: 0xb8, flowLabel: 0x12345, hopLimit: 7 } });
  add({ name: 'gue v6 SYN: outer IPv6 + UDP, the UDP checksum over the whole inner packet', input: inFrame(p6), action: 'tx',
    output: gueOut(p6, 3, '2001:db8:2::1', hashOf(CLIENT6, V6, 48007, 80, 6)), counter: 'tx' });
  const a6 = tcp(CLIENT6, V6, 48007, 80, TCP_FLAGS.ACK, { l4: { tcp: { sport: 48007, dport: 80, flags: TCP_FLAGS.ACK, payload: big(333) } } });
  add({ name: 'gue v6 ACK with data (ct hit)', keepCt: true, input: inFrame(a6), action: 'tx', output: gueOut(a6, 3, '2001:db8:2::1', hashOf(CLIENT6, V6, 48007, 80, 6)), counter: 'ct_hit' });
  for (const n of [0, 1, 2, 3, 17, 1000]) {
    const u6 = udp(CLIENT6, V6, 48010 + n % 50, 53, big(n));
    add({ name: `gue v6 UDP with ${n} bytes of payload: the UDP checksum is right`, input: inFrame(u6), action: 'tx',
      output: gueOut(u6, 3, '2001:db8:2::1', hashOf(CLIENT6, V6, 48010 + n % 50, 53, 17)) });
  }
  // the outer checksum is the one of the packet as it should have been (the inner checksum right), so over the bytes
  // sent it is wrong by as much as the inner one
  const good6 = tcp(CLIENT6, V6, 48008, 80);
  const bad6 = inFrame(good6);
  bad6.writeUInt16BE(bad6.readUInt16BE(14 + 40 + 16) ^ 0x1234, 14 + 40 + 16);
  const badOut = gueOut(good6, 3, '2001:db8:2::1', hashOf(CLIENT6, V6, 48008, 80, 6));
  bad6.copy(badOut, 14 + 40 + 8, 14);
  add({ name: 'gue v6 with a wrong inner TCP checksum: the outer UDP checksum is not laundered', input: bad6, action: 'tx', output: badOut, damaged: true });
  const mixed = tcp(CLIENT4, '203.0.113.24', 48009, 80);
  add({ name: 'gue with an IPv4 VIP and an IPv6 real is unsupported: dropped and counted', input: inFrame(mixed), action: 'drop', counter: 'drop_unsupported' });
  // MTU: 1500 - 28 leaves 1472 (IPv4), 1500 - 48 leaves 1452 (IPv6)
  const fits = tcp(CLIENT4, V4, 48020, 80, TCP_FLAGS.ACK, { l4: { tcp: { sport: 48020, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1472 - 40) } } });
  add({ name: 'gue v4 packet of exactly MTU-28 is encapsulated', input: inFrame(fits), action: 'tx', output: gueOut(fits, 1, '198.51.100.1', hashOf(CLIENT4, V4, 48020, 80, 6)) });
  const over = tcp(CLIENT4, V4, 48021, 80, TCP_FLAGS.ACK, { v4: { df: true }, l4: { tcp: { sport: 48021, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1473 - 40) } } });
  add({ name: 'gue v4 packet over MTU-28 gets ICMP frag-needed (mtu 1472)', input: inFrame(over), action: 'tx', output: fragNeeded(over, 1472), counter: 'icmp_sent' });
  const over6 = tcp(CLIENT6, V6, 48022, 80, TCP_FLAGS.ACK, { l4: { tcp: { sport: 48022, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1453 - 60) } } });
  add({ name: 'gue v6 packet over MTU-48 gets ICMPv6 packet-too-big (mtu 1452)', input: inFrame(over6), action: 'tx', output: tooBig(over6, 1452, V6, CLIENT6), counter: 'icmp_sent' });
  const fits6 = tcp(CLIENT6, V6, 48023, 80, TCP_FLAGS.ACK, { l4: { tcp: { sport: 48023, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1452 - 60) } } });
  add({ name: 'gue v6 packet of exactly MTU-48 is encapsulated', input: inFrame(fits6), action: 'tx', output: gueOut(fits6, 3, '2001:db8:2::1', hashOf(CLIENT6, V6, 48023, 80, 6)) });
}

// ---- dsr-ipopt over IPv6: the VIP:port in a destination-options header right after the fixed header
{
  const VIP = '2001:db8:f::12';
  const R = REALS[3]!;
  /** what the real gets: client -> real, next header 60, the 24-byte header naming VIP:port, then the segment */
  const opt6 = (seg: Buffer, port: number, extra: Partial<IpPacketSpec['v6']> = {}) => frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac },
    Buffer.concat([ipv6Header({ src: CLIENT6, dst: R, nextHeader: 60, ...extra }, 24 + seg.length),
      dsrExt6(port === 53 ? IPPROTO.UDP : IPPROTO.TCP, VIP, port), seg]));
  const p = tcp(CLIENT6, VIP, 45100, 80, TCP_FLAGS.SYN, { v6: { trafficClass: 0xb8, flowLabel: 0x54321, hopLimit: 33 } });
  add({ name: 'ipopt v6 SYN: dst -> real, port -> targetPort, destination options (0x1b, VIP, port) inserted', input: inFrame(p), action: 'tx',
    output: opt6(tcpSegment(CLIENT6, R, { sport: 45100, dport: 8080, flags: TCP_FLAGS.SYN, seq: 1000, ack: 0 }), 80, { trafficClass: 0xb8, flowLabel: 0x54321, hopLimit: 33 }), counter: 'tx' });
  const a = tcp(CLIENT6, VIP, 45100, 80, TCP_FLAGS.ACK);
  add({ name: 'ipopt v6 ACK: rewritten without the header', keepCt: true, input: inFrame(a), action: 'tx',
    output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, ipPacket({ src: CLIENT6, dst: R, l4: { tcp: { sport: 45100, dport: 8080, flags: TCP_FLAGS.ACK, seq: 1000, ack: 2000 } } })), counter: 'ct_hit' });
  const u = udp(CLIENT6, VIP, 45101, 53);
  const uout = opt6(udpDatagram(CLIENT6, R, { sport: 45101, dport: 53, payload: Buffer.from('query') }), 53);
  add({ name: 'ipopt v6 UDP: every datagram carries the header', input: inFrame(u), action: 'tx', output: uout });
  add({ name: 'ipopt v6 UDP: the second datagram of the flow too', keepCt: true, input: inFrame(u), action: 'tx', output: uout, counter: 'ct_hit' });
  const v = tcp(CLIENT6, VIP, 45102, 80);
  add({ name: 'ipopt v6 SYN with a VLAN tag keeps the tag', input: inFrame(v, { ...ETH_IN, vlan: 11 }), action: 'tx',
    output: Buffer.concat([ethernet({ dst: REAL_MAC[R]!, src: LAB.lbA.mac, vlan: 11 }, 0x86dd),
      opt6(tcpSegment(CLIENT6, R, { sport: 45102, dport: 8080, flags: TCP_FLAGS.SYN, seq: 1000, ack: 0 }), 80).subarray(14)]) });
  // MTU: 1500 - 24 leaves 1476 for the client's packet
  const fits = udp(CLIENT6, VIP, 45103, 53, big(1476 - 48));
  add({ name: 'ipopt v6 UDP of exactly MTU-24 gets the header', input: inFrame(fits), action: 'tx',
    output: opt6(udpDatagram(CLIENT6, R, { sport: 45103, dport: 53, payload: big(1476 - 48) }), 53) });
  const over = udp(CLIENT6, VIP, 45104, 53, big(1477 - 48));
  add({ name: 'ipopt v6 UDP over MTU-24 gets ICMPv6 packet-too-big (mtu 1476)', input: inFrame(over), action: 'tx', output: tooBig(over, 1476, VIP, CLIENT6), counter: 'icmp_sent' });
  const bigAck = tcp(CLIENT6, VIP, 45100, 80, TCP_FLAGS.ACK, { l4: { tcp: { sport: 45100, dport: 80, flags: TCP_FLAGS.ACK, payload: big(1500 - 60) } } });
  add({ name: 'ipopt v6 full-size ACK needs no header and is forwarded', input: inFrame(bigAck), action: 'tx',
    output: frame({ dst: REAL_MAC[R]!, src: LAB.lbA.mac }, ipPacket({ src: CLIENT6, dst: R, l4: { tcp: { sport: 45100, dport: 8080, flags: TCP_FLAGS.ACK, payload: big(1500 - 60) } } })) });
}

// ---- snat, non-VIP traffic
{
  const s = tcp(CLIENT4, '203.0.113.13', 46000, 80);
  add({ name: 'snat service: handed to the kernel untouched', input: inFrame(s), action: 'pass', counter: 'pass_snat' });
  const other = tcp(CLIENT4, '203.0.113.99', 46001, 80);
  add({ name: 'non-VIP address passes untouched', input: inFrame(other), action: 'pass', counter: 'pass_not_vip' });
  const port = tcp(CLIENT4, '203.0.113.10', 46002, 443);
  add({ name: 'VIP address on another port passes', input: inFrame(port), action: 'pass', counter: 'pass_not_vip' });
}

// ---- ping a VIP: echo requests to a VIP address are answered from it (docs/datapath.md, "Echo")
{
  const VIP = '203.0.113.10';
  const VIP6 = '2001:db8:f::10';
  const idSeq = Buffer.from([0x12, 0x34, 0, 7]);
  const data = Buffer.from('ping payload 0123456789');
  const echo4 = (type: number, src = CLIENT4, dst = VIP, v4: Partial<IpPacketSpec['v4']> = {}) =>
    ipPacket({ src, dst, v4: { proto: IPPROTO.ICMP, ttl: 7, id: 0x4242, df: true, tos: 0x10, ...v4 }, l4: { raw: icmpv4(type, 0, idSeq, data) } });
  const echo6 = (type: number, src = CLIENT6, dst = VIP6) => {
    const m = icmpv6(src, dst, type, 0, idSeq, data);
    return Buffer.concat([ipv6Header({ src, dst, nextHeader: IPPROTO.ICMPV6, hopLimit: 5 }, m.length), m]);
  };
  // the expected replies are built from scratch (full checksums), so they check the program's incremental updates
  const reply4 = echo4(0, VIP, CLIENT4, { ttl: 64 });
  const reply6 = (() => {
    const m = icmpv6(VIP6, CLIENT6, 129, 0, idSeq, data);
    return Buffer.concat([ipv6Header({ src: VIP6, dst: CLIENT6, nextHeader: IPPROTO.ICMPV6, hopLimit: 64 }, m.length), m]);
  })();
  const back = (ip: Buffer, eth: EthSpec = ETH_IN) => frame({ dst: eth.src, src: eth.dst, vlan: eth.vlan }, ip);
  add({ name: 'ICMP echo to a VIP address is answered from it (TTL 64, checksums right)', input: inFrame(echo4(8)), action: 'tx', output: back(reply4), counter: 'icmp_echo_reply' });
  add({ name: 'ICMP echo to a VIP on a VLAN is answered on it', input: inFrame(echo4(8), { ...ETH_IN, vlan: 9 }), action: 'tx', output: back(reply4, { ...ETH_IN, vlan: 9 }), counter: 'icmp_echo_reply' });
  add({ name: 'ICMPv6 echo to a VIP address is answered from it (hop limit 64)', input: inFrame(echo6(128)), action: 'tx', output: back(reply6), counter: 'icmp_echo_reply' });
  add({ name: 'ICMP echo with trailer bytes: the answer carries the IP packet only', input: Buffer.concat([inFrame(echo4(8)), Buffer.alloc(6, 0xee)]), action: 'tx', output: back(reply4), counter: 'icmp_echo_reply' });
  // what must be left alone
  add({ name: 'ICMP echo to a non-VIP address passes', input: inFrame(echo4(8, CLIENT4, '203.0.113.99')), action: 'pass', counter: 'pass_not_vip' });
  add({ name: 'ICMPv6 echo to a non-VIP address passes', input: inFrame(echo6(128, CLIENT6, '2001:db8:f::99')), action: 'pass', counter: 'pass_not_vip' });
  add({ name: 'ICMP echo reply to a VIP passes', input: inFrame(echo4(0)), action: 'pass', counter: 'pass_not_vip' });
  add({ name: 'ICMP echo with IPv4 options to a VIP passes (the kernel\'s)', input: inFrame(echo4(8, CLIENT4, VIP, { options: Buffer.from([1, 1, 1, 0]) })), action: 'pass', counter: 'pass_not_vip' });
  // and what gets no answer
  add({ name: 'ICMP echo to a VIP with a wrong IPv4 header checksum is dropped unanswered', input: inFrame(echo4(8, CLIENT4, VIP, { checksum: 0xbad })), action: 'drop', counter: 'drop_bad_ip_csum' });
  add({ name: 'ICMP echo to a VIP from a martian source is dropped', input: inFrame(echo4(8, '127.0.0.1')), action: 'drop', counter: 'drop_martian' });
  add({ name: 'ICMP echo to a VIP via the broadcast MAC is dropped', input: inFrame(echo4(8), { ...ETH_IN, dst: 'ff:ff:ff:ff:ff:ff' }), action: 'drop', counter: 'drop_l2_not_unicast' });
  add({ name: 'ICMPv6 echo to a VIP from a multicast source is dropped', input: inFrame(echo6(128, 'ff02::1')), action: 'drop', counter: 'drop_martian' });
}
{
  const arp = Buffer.concat([mac('ff:ff:ff:ff:ff:ff'), mac(LAB.clientMac), Buffer.from([0x08, 0x06]), Buffer.alloc(28, 1)]);
  add({ name: 'ARP passes', input: arp, action: 'pass', counter: 'pass_not_ip' });
}

// ---- fragments, malformed, truncation
{
  const VIP = '203.0.113.10';
  const mf = tcp(CLIENT4, VIP, 47000, 80, TCP_FLAGS.SYN, { v4: { mf: true, id: 5 } });
  add({ name: 'first IPv4 fragment (MF) to a VIP is dropped', input: inFrame(mf), action: 'drop', counter: 'drop_fragment' });
  const later = ipPacket({ src: CLIENT4, dst: VIP, v4: { proto: IPPROTO.TCP, fragOffset: 10, id: 5 }, l4: { raw: big(16) } });
  add({ name: 'later IPv4 fragment to a VIP is dropped', input: inFrame(later), action: 'drop', counter: 'drop_fragment' });
  const fragOther = ipPacket({ src: CLIENT4, dst: '203.0.113.99', v4: { proto: IPPROTO.TCP, fragOffset: 10, id: 5 }, l4: { raw: big(16) } });
  add({ name: 'IPv4 fragment to a non-VIP passes', input: inFrame(fragOther), action: 'pass' });
  const seg = tcpSegment(CLIENT6, '2001:db8:f::10', { sport: 47001, dport: 80 });
  const f6 = Buffer.concat([ipv6Header({ src: CLIENT6, dst: '2001:db8:f::10', nextHeader: IPPROTO.FRAGMENT }, 8 + seg.length), ipv6FragmentHeader(IPPROTO.TCP, 0, true, 1), seg]);
  add({ name: 'IPv6 fragment to a VIP is dropped', input: inFrame(f6), action: 'drop', counter: 'drop_fragment' });
  const badVer = tcp(CLIENT4, VIP, 47002, 80, TCP_FLAGS.SYN, { v4: { version: 5 } });
  add({ name: 'IPv4 ethertype with version 5 to a VIP is dropped', input: inFrame(badVer), action: 'drop', counter: 'drop_malformed_l3' });
  const badIhl = tcp(CLIENT4, VIP, 47003, 80, TCP_FLAGS.SYN, { v4: { ihl: 4 } });
  add({ name: 'IPv4 IHL 4 to a VIP is dropped', input: inFrame(badIhl), action: 'drop', counter: 'drop_malformed_l3' });
  const badTot = tcp(CLIENT4, VIP, 47004, 80, TCP_FLAGS.SYN, { v4: { totalLength: 19 } });
  add({ name: 'IPv4 total length below the header to a VIP is dropped', input: inFrame(badTot), action: 'drop', counter: 'drop_malformed_l3' });
  const doff = ipPacket({ src: CLIENT4, dst: VIP, l4: { tcp: { sport: 47005, dport: 80, dataOffset: 15 } } });
  add({ name: 'TCP data offset beyond the segment is dropped', input: inFrame(doff), action: 'drop', counter: 'drop_malformed_l4' });
  const doff4 = ipPacket({ src: CLIENT4, dst: VIP, l4: { tcp: { sport: 47006, dport: 80, dataOffset: 4 } } });
  add({ name: 'TCP data offset 4 is dropped', input: inFrame(doff4), action: 'drop', counter: 'drop_malformed_l4' });
  // every truncation point of a TCP SYN with IPv4 options to a VIP (frame cut, headers unchanged)
  const syn = inFrame(tcp(CLIENT4, VIP, 47007, 80, TCP_FLAGS.SYN, { v4: { options: Buffer.from([1, 1, 1, 0]) } }));
  for (let cut = 14; cut < syn.length; cut++) { // the kernel refuses test frames under 14 bytes
    const input = syn.subarray(0, cut);
    const reason = cut < 14 + 20 ? 'pass_short_header' : 'drop_truncated_l3';
    add({ name: `IPv4 TCP SYN cut at ${cut}/${syn.length} bytes: ${reason}`, input, action: reason.startsWith('pass') ? 'pass' : 'drop', counter: reason });
  }
  // consistent lengths, L4 header cut short
  const l4cut = ipPacket({ src: CLIENT4, dst: VIP, v4: { proto: IPPROTO.TCP }, l4: { raw: tcpSegment(CLIENT4, VIP, { sport: 47008, dport: 80 }).subarray(0, 12) } });
  add({ name: 'TCP header of 12 bytes (lengths consistent) to a VIP is dropped', input: inFrame(l4cut), action: 'drop', counter: 'drop_truncated_l4' });
  const udpcut = ipPacket({ src: CLIENT4, dst: '203.0.113.11', v4: { proto: IPPROTO.UDP }, l4: { raw: Buffer.from([0x9c, 0x40, 0, 53]) } });
  add({ name: 'UDP header of 4 bytes to a VIP is dropped', input: inFrame(udpcut), action: 'drop', counter: 'drop_truncated_l4' });
  const syn6 = inFrame(tcp(CLIENT6, '2001:db8:f::10', 47009, 80));
  for (const cut of [14, 17, 53, 54, 55, 60, 66, 73]) {
    const input = syn6.subarray(0, cut);
    const reason = cut < 14 + 40 ? 'pass_short_header' : 'drop_truncated_l3';
    add({ name: `IPv6 TCP SYN cut at ${cut}/${syn6.length} bytes: ${reason}`, input, action: reason.startsWith('pass') ? 'pass' : 'drop', counter: reason });
  }
  const vlanCut = inFrame(tcp(CLIENT4, VIP, 47010, 80), { ...ETH_IN, vlan: 3 }).subarray(0, 16);
  add({ name: 'VLAN tag cut short passes', input: vlanCut, action: 'pass', counter: 'pass_short_header' });
}

interface Result { retval: number; data: string; counters: Record<string, number>; error?: string }
let results: Promise<{ byCase: Map<Case, Result>; applies: any[]; live: any }>;

test.before(() => {
  setupLab(TAG);
  const { ns, pinRoot } = { ns: `glb${process.pid}-${TAG}`, pinRoot: `/sys/fs/bpf/glb${process.pid}-${TAG}` };
  const steps: unknown[] = [];
  const index: Array<Case | 'apply' | 'live' | null> = [];
  let current: string | undefined;
  for (const c of cases) {
    const want = c.state ?? (c.keepCt ? current : 'base') ?? 'base';
    if (want !== current) {
      steps.push({ op: 'apply', state: stateToJson(STATES[want]!) });
      index.push('apply');
      current = want;
    }
    if (!c.keepCt) { steps.push({ op: 'ctClear' }); index.push(null); }
    steps.push({ op: 'run', data: c.input.toString('hex'), ifname: 'lbA' });
    index.push(c);
  }
  steps.push({ op: 'apply', state: stateToJson(STATES.base!) });
  index.push('apply');
  steps.push({ op: 'live' });
  index.push('live');
  results = runHarness(ns, { pinRoot, steps }).then((out) => {
    const byCase = new Map<Case, Result>();
    const applies: any[] = [];
    let live: any;
    out.forEach((r, i) => {
      const what = index[i];
      if (what === 'apply') applies.push(r);
      else if (what === 'live') live = r;
      else if (what) byCase.set(what, r);
    });
    return { byCase, applies, live };
  });
  results.catch(() => undefined);
});

test.after.always(() => teardownLab(TAG));

// A guard on the table itself, not a test: fewer cases means a builder above silently stopped adding them.
if (cases.length < 40) throw new Error(`only ${cases.length} xdp table cases (expected at least 40)`);

test('every apply() succeeded and readLive() returns what was applied', async (t) => {
  const { applies, live } = await results;
  for (const a of applies) t.falsy(a.error, a.error);
  t.falsy(live.error);
  const want = STATES.base!;
  t.deepEqual(live.live.reals, want.reals);
  t.deepEqual(live.live.vips, want.vips);
  t.is(live.live.settings.hashSeed, SEED);
  t.deepEqual(live.live.markers.map((m: any) => m.address).sort(), [...new Set(want.vips.map((v) => v.vip))].sort());
  t.deepEqual(live.live.services.map((s: any) => [s.id, s.tableSize, s.ring, s.digest]),
    want.services.map((s) => [s.id, s.tableSize, [...s.ring], s.digest]));
});

const seen = new Set<string>();
for (const c of cases) {
  let name = c.name;
  for (let i = 2; seen.has(name); i++) name = `${c.name} (${i})`;
  seen.add(name);
  test(`xdp: ${name}`, async (t) => {
    const r = (await results).byCase.get(c)!;
    t.falsy(r.error, r.error);
    t.is(r.retval, ACTION[c.action], `action ${r.retval}, expected ${c.action}`);
    // The oracle itself: an expected frame built by packets.ts carries valid checksums.
    if (c.output && !c.damaged) t.deepEqual(checksumProblems(c.output.subarray(c.output.readUInt16BE(12) === 0x8100 ? 18 : 14)), [], 'expected frame checksums');
    const expected = c.output ?? (c.action === 'pass' ? c.input : undefined);
    if (expected) {
      const got = Buffer.from(r.data, 'hex');
      t.is(hex(got), hex(expected));
    }
    if (c.counter) t.true((r.counters[c.counter] ?? 0) >= 1, `counter ${c.counter} did not move: ${JSON.stringify(r.counters)}`);
  });
}
