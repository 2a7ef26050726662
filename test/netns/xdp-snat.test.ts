// SNAT and hybrid in the LB XDP program, through BPF_PROG_TEST_RUN: a script of steps (apply a desired
// state, run a frame, age a NAT entry, list or sweep the NAT table) executed in order by one harness process
// inside a namespace of its own (bpf_fib_lookup needs known neighbours), then one ava test per step.
// Expected frames are built independently with test/lib/packets.ts (checksums from scratch); the SNAT port
// a new flow gets is predicted by a model of the documented allocation (flow hash start, linear probes).
import test from 'ava';
import { execFileSync } from 'node:child_process';
import {
  IPPROTO, TCP_FLAGS, checksumProblems, encapsulate, frame, hex, icmpv4, icmpv6, ipPacket, ipv4Header, ipv6Header,
  type EthSpec,
} from '../lib/packets.js';
import { LAB, labNames, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { runSnatHarness, type SnatStep } from '../lib/snat-harness.js';
import { flowHash } from '../../src/bpf/dataplane/flow-hash.js';
import type { SnatRevKey } from '../../src/bpf/dataplane/snat.js';
import { addr16 } from '../../src/bpf/dataplane/codec.js';
import type { DesiredState } from '../../src/render/state.js';

const TAG = 'snat';
const SEED = 0x12345678;
const CLIENT4 = '192.0.2.1';
const CLIENT6 = '2001:db8:c::1';
const SNAT4 = LAB.lbA.v4; // the node's own address: its own traffic to it must still pass
const SNAT6 = LAB.lbA.v6;
const GW6 = '2001:db8:2::fe';
const ROUTER4 = '198.51.100.254';
const REALS: Record<number, string> = { 1: '198.51.100.11', 2: '198.51.100.12', 3: '2001:db8:2::11', 4: '2001:db8:2::12' };
const VIP4 = '203.0.113.13';
const VIP6 = '2001:db8:f::13';
const HYB = '203.0.113.14';
const VIPX = '203.0.113.15';
const VIPF = '203.0.113.16';
const ring = (id: number) => Array.from({ length: 7 }, () => id);
const MOVED_GW_MAC = '02:00:00:00:01:fd';
const ON_LINK_CLIENT_MAC = '02:00:00:00:0e:01';
/** lb_snat_client_slot (lb_snat.h) of a client: its address as 4 little-endian words (IPv4: the first, the rest 0)
 * xored, the halves folded, Fibonacci hashing to 10 bits. */
function clientSlot(addr: string): number {
  const b = addr16(addr);
  let h = (b.readUInt32LE(0) ^ b.readUInt32LE(4) ^ b.readUInt32LE(8) ^ b.readUInt32LE(12)) >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  return Math.imul(h, 0x9e3779b1) >>> 22;
}
/** A client on the segment (its own neighbour entry) and one routed via the router, in the same cache slot. */
const CLIENTS_SHARING_A_SLOT = ((): [string, string] => {
  for (let y = 200; y < 251; y++) for (let x = 2; x < 128; x++)
    if (clientSlot(`198.51.100.${y}`) === clientSlot(`192.0.2.${x}`)) return [`198.51.100.${y}`, `192.0.2.${x}`];
  throw new Error('no two clients share a slot');
})();
/** The same for IPv6: a client on the lab's segment (2001:db8:2::/64) and one routed via GW6 (2001:db8:c::/64). */
const CLIENTS6_SHARING_A_SLOT = ((): [string, string] => {
  for (let y = 0xc00; y < 0xd00; y++) for (let x = 2; x < 0x200; x++)
    if (clientSlot(`2001:db8:2::${y.toString(16)}`) === clientSlot(`2001:db8:c::${x.toString(16)}`))
      return [`2001:db8:2::${y.toString(16)}`, `2001:db8:c::${x.toString(16)}`];
  throw new Error('no two IPv6 clients share a slot');
})();

const SERVICES: SvcSpec[] = [
  { id: 1, vip: VIP4, forwarding: 'snat', ring: ring(1), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }] },
  { id: 2, vip: VIP6, forwarding: 'snat', ring: ring(3), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }] },
  // hybrid as render resolves it: TCP by dsr with the service's encap, UDP by snat, one ring
  { id: 3, vip: HYB, forwarding: 'dsr-ipip', ring: ring(2), ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }] },
  { id: 4, vip: VIPX, forwarding: 'snat', ring: ring(2), ports: [{ port: 9000, protocol: 'TCP' }] },
  { id: 5, vip: VIPF, forwarding: 'snat', ring: ring(4) },
];
const PORTS = { min: 40000, max: 40999 };
const TIGHT = { min: 50000, max: 50001 };

function state(extra: Partial<DesiredState>, conntrackMaxEntries = 4096): DesiredState {
  const s = makeState({ reals: REALS, services: SERVICES, addresses: [LAB.lbA.v4, LAB.lbA.v6], hashSeed: SEED, conntrackMaxEntries });
  s.vips = s.vips.map((v) => (v.vip === HYB && v.protocol === 'UDP' ? { ...v, forwarding: 'snat' } : v));
  return { ...s, ...extra };
}
/** The v4 state with service 1's ring replaced (every real stays a real of the node). */
function withRing1(ring1: number[]): DesiredState {
  const svcs = SERVICES.map((x) => (x.id === 1 ? { ...x, ring: ring1 } : x));
  const s = makeState({ reals: REALS, services: svcs, addresses: [LAB.lbA.v4, LAB.lbA.v6], hashSeed: SEED, conntrackMaxEntries: 4096 });
  s.vips = s.vips.map((v) => (v.vip === HYB && v.protocol === 'UDP' ? { ...v, forwarding: 'snat' } : v));
  return { ...s, snatAddress: SNAT4, snatPorts: PORTS };
}
const STATES = {
  v4: state({ snatAddress: SNAT4, snatPorts: PORTS }),
  v6: state({ snatAddress: SNAT6, snatPorts: PORTS }),
  tight: state({ snatAddress: SNAT4, snatPorts: TIGHT }),
  none: state({}),
  small: state({ snatAddress: SNAT4, snatPorts: PORTS }, 4),
};

// ---- the allocation model: start = min + flowHash(flow, with source port) % range, then up to 7 more probes
// (the next ports for a range of at most 8, triangular offsets 1, 3, 6, ... beyond)
type Endpoint = string;
const held = new Map<Endpoint, Map<number, string>>(); // endpoint -> port -> owner flow
const endpoint = (real: string, port: number, proto: number) => `${real}/${port}/${proto}`;
function allocate(flow: { src: string; dst: string; sport: number; dport: number; proto: number }, real: string, realPort: number,
  range: { min: number; max: number }): number | null {
  const ep = endpoint(real, realPort, flow.proto);
  const used = held.get(ep) ?? new Map<number, string>();
  held.set(ep, used);
  const n = range.max - range.min + 1;
  const start = flowHash(flow, true, SEED) % n;
  for (let i = 0; i < Math.min(8, n); i++) {
    const port = range.min + ((start + (n <= 8 ? i : (i * (i + 1)) / 2)) % n);
    if (!used.has(port)) {
      used.set(port, `${flow.src}:${flow.sport}`);
      return port;
    }
  }
  return null;
}

// ---- frames
const ETH_CLIENT: EthSpec = { dst: LAB.lbA.mac, src: LAB.clientMac };
const realMac = (a: string) => LAB.neighbours[a]!;
const ethFromReal = (real: string): EthSpec => ({ dst: LAB.lbA.mac, src: realMac(real) });
const ethToReal = (real: string): EthSpec => ({ dst: realMac(real), src: LAB.lbA.mac });
const ETH_TO_CLIENT: EthSpec = { dst: LAB.gwMac, src: LAB.lbA.mac }; // clients are routed via the gateway
const tcp = (src: string, dst: string, sport: number, dport: number, flags: number, seq = 1000, payload?: Buffer) =>
  ipPacket({ src, dst, v4: { id: 7, ttl: 61 }, v6: { hopLimit: 61 }, l4: { tcp: { sport, dport, flags, seq, ack: flags & TCP_FLAGS.ACK ? 555 : 0, payload } } });
const udp = (src: string, dst: string, sport: number, dport: number, payload = Buffer.from('dns query'), checksum?: number) =>
  ipPacket({ src, dst, v4: { id: 9, ttl: 61 }, v6: { hopLimit: 61 }, l4: { udp: { sport, dport, payload, ...(checksum !== undefined ? { checksum } : {}) } } });

type Action = 'drop' | 'pass' | 'tx';
const ACTION: Record<Action, number> = { drop: 1, pass: 2, tx: 3 };
interface Expect { action: Action; output?: Buffer; counters?: string[]; noCounters?: string[]; check?: (r: any) => string | null }
interface Step { name: string; step: SnatStep; expect?: Expect }
const script: Step[] = [];
const apply = (name: keyof typeof STATES) => script.push({ name: `apply ${name}`, step: { op: 'apply', state: stateToJson(STATES[name]) } });
const run = (name: string, input: Buffer, expect: Expect) =>
  script.push({ name, step: { op: 'run', data: input.toString('hex'), ifname: 'lbA' }, expect });
const age = (key: SnatRevKey, ageMs: number) => script.push({ name: `age ${JSON.stringify(key)}`, step: { op: 'age', key, ageMs } });
const shortTimeouts = () => script.push({ name: 'short timeouts: TCP established 60 s, closing 10 s, UDP 120 s',
  step: { op: 'timeouts', tcpEstablishedMs: 60_000, tcpClosingMs: 10_000, udpMs: 120_000 } });
const list = (name: string, check: (r: any) => string | null) => script.push({ name, step: { op: 'list' }, expect: { action: 'pass', check } });
/** A frame with another destination MAC. */
const withDst = (f: Buffer, mac: string) => { const b = Buffer.from(f); Buffer.from(mac.replaceAll(':', ''), 'hex').copy(b, 0); return b; };
/** Runs `input` until XDP answers `action` (and, when given, sends to `dstMac`): a change the per-CPU next-hop cache
 * follows once its entry expired, at most 10 s. */
const until = (name: string, input: Buffer, action: Action, expect: Expect, dstMac?: string) => script.push({ name,
  step: { op: 'runUntil', data: input.toString('hex'), ifname: 'lbA', retval: ACTION[action], ...(dstMac && { dstMac }), withinMs: 10_000 }, expect });
const ipStep = (name: string, ...args: string[]) => script.push({ name, step: { op: 'ip', args } });
const revKey = (real: string, realPort: number, snatPort: number, proto: number): SnatRevKey =>
  ({ real, realPort, snatPort, proto, family: real.includes(':') ? 6 : 4 });

/** A client flow through SNAT: its forward frame in and out, and a reply frame in and out. */
function snatFlow(o: { client: string; cport: number; vip: string; vport: number; real: string; rport: number; proto: 'tcp' | 'udp';
  snat: string; range?: { min: number; max: number }; udpChecksum?: number }) {
  const proto = o.proto === 'tcp' ? IPPROTO.TCP : IPPROTO.UDP;
  const port = allocate({ src: o.client, dst: o.vip, sport: o.cport, dport: o.vport, proto }, o.real, o.rport, o.range ?? PORTS);
  const mk = (src: string, dst: string, sport: number, dport: number, flags: number, seq: number) =>
    o.proto === 'tcp' ? tcp(src, dst, sport, dport, flags, seq) : udp(src, dst, sport, dport, undefined, o.udpChecksum);
  return {
    port: port!,
    key: revKey(o.real, o.rport, port!, proto),
    fwdIn: (flags: number = TCP_FLAGS.SYN) => frame(ETH_CLIENT, mk(o.client, o.vip, o.cport, o.vport, flags, 1000)),
    fwdOut: (flags: number = TCP_FLAGS.SYN) => frame(ethToReal(o.real), mk(o.snat, o.real, port!, o.rport, flags, 1000)),
    replyIn: (flags: number = TCP_FLAGS.SYN | TCP_FLAGS.ACK) => frame(ethFromReal(o.real), mk(o.real, o.snat, o.rport, port!, flags, 5000)),
    replyOut: (flags: number = TCP_FLAGS.SYN | TCP_FLAGS.ACK) => frame(ETH_TO_CLIENT, mk(o.vip, o.client, o.vport, o.cport, flags, 5000)),
    /** the packet as the real received it, and as the client sent it (quoted in ICMP errors) */
    sentToReal: () => mk(o.snat, o.real, port!, o.rport, TCP_FLAGS.SYN, 1000),
    sentByClient: () => mk(o.client, o.vip, o.cport, o.vport, TCP_FLAGS.SYN, 1000),
  };
}

const ACK = TCP_FLAGS.ACK;
const FIN = TCP_FLAGS.FIN | TCP_FLAGS.ACK;

type Flow = ReturnType<typeof snatFlow>;
/**
 * Next hops towards clients are cached per CPU (lb_snat_client_nh; the harness runs on one CPU): under the live flow
 * `live`, the clients' router changes its MAC (followed once the cached next hop expired), loses its neighbour entry
 * (dropped and counted once it expired) and gets it back (a failed lookup is never cached); then two clients of one
 * cache slot, `routed` via the router and `onLink` on the segment (`flow`'s flows 0 and 1), each get their own next
 * hop. Returns their flows [routed, onLink].
 */
function clientNextHopSteps(fam: 'v4' | 'v6', live: Flow, router: string, [onLink, routed]: [string, string],
  flow: (client: string, n: 0 | 1) => Flow): [Flow, Flow] {
  const neigh = (...args: string[]) => [...(fam === 'v6' ? ['-6'] : []), 'neigh', ...args, 'dev', 'lbA'];
  ipStep(`${fam}: the router (the clients' next hop) moves to another MAC`, ...neigh('replace', router, 'lladdr', MOVED_GW_MAC, 'nud', 'permanent'));
  until(`${fam} reply after the router's MAC changed: sent to its new MAC once the cached next hop expired`, live.replyIn(ACK), 'tx',
    { action: 'tx', output: withDst(live.replyOut(ACK), MOVED_GW_MAC), counters: ['snat_reply'] }, MOVED_GW_MAC);
  ipStep(`${fam}: the router's neighbour entry is removed`, ...neigh('del', router));
  until(`${fam} reply while the router has no neighbour entry: dropped once the cached next hop expired, counted`, live.replyIn(ACK), 'drop',
    { action: 'drop', counters: ['drop_fib_no_neigh'] });
  ipStep(`${fam}: the router's neighbour entry is back`, ...neigh('replace', router, 'lladdr', LAB.gwMac, 'nud', 'permanent'));
  run(`${fam} reply once the router is back: to its MAC (a failed lookup is never cached)`, live.replyIn(ACK),
    { action: 'tx', output: live.replyOut(ACK), counters: ['snat_reply'] });
  const a = flow(routed, 0);
  const b = flow(onLink, 1);
  run(`${fam} client ${routed} (routed via the router): translated`, a.fwdIn(), { action: 'tx', output: a.fwdOut(), counters: ['snat_new'] });
  run(`${fam} client ${onLink} (on the segment, the same cache slot): translated`, b.fwdIn(), { action: 'tx', output: b.fwdOut(), counters: ['snat_new'] });
  run(`${fam} reply to ${routed}: via the router`, a.replyIn(), { action: 'tx', output: a.replyOut(), counters: ['snat_reply'] });
  run(`${fam} reply to ${onLink}, whose slot holds ${routed}'s next hop: to its own MAC`, b.replyIn(),
    { action: 'tx', output: withDst(b.replyOut(), ON_LINK_CLIENT_MAC), counters: ['snat_reply'] });
  run(`${fam} reply to ${routed} again: via the router`, a.replyIn(ACK), { action: 'tx', output: a.replyOut(ACK), counters: ['snat_reply'] });
  return [a, b];
}

// ---- IPv4
apply('v4');
const t1 = snatFlow({ client: CLIENT4, cport: 40001, vip: VIP4, vport: 80, real: REALS[1]!, rport: 8080, proto: 'tcp', snat: SNAT4 });
run('v4 TCP SYN: source -> snatAddress:port from the range, destination -> real:targetPort', t1.fwdIn(), { action: 'tx', output: t1.fwdOut(), counters: ['snat_new', 'tx'] });
run('v4 TCP ACK of the same flow keeps its translation', t1.fwdIn(ACK), { action: 'tx', output: t1.fwdOut(ACK), counters: ['snat_hit'] });
run('v4 TCP reply from the real: back to the client from VIP:port', t1.replyIn(), { action: 'tx', output: t1.replyOut(), counters: ['snat_reply'] });
const t2 = snatFlow({ client: CLIENT4, cport: 40002, vip: VIP4, vport: 80, real: REALS[1]!, rport: 8080, proto: 'tcp', snat: SNAT4 });
run('v4 TCP second client flow gets its own port', t2.fwdIn(), { action: 'tx', output: t2.fwdOut(), counters: ['snat_new'] });
run('v4 TCP second flow reply', t2.replyIn(ACK), { action: 'tx', output: t2.replyOut(ACK), counters: ['snat_reply'] });
// ---- next hops towards clients are cached per CPU (lb_snat_client_nh, the harness runs on one CPU): a changed
// neighbour is followed within the cache's lifetime, a lost one stops the sends, two clients sharing a slot each
// get their own next hop
{
  const [a, b] = clientNextHopSteps('v4', t2, ROUTER4, CLIENTS_SHARING_A_SLOT,
    (client, n) => snatFlow({ client, cport: 40010 + n, vip: VIP4, vport: 80, real: REALS[1]!, rport: 8080, proto: 'tcp', snat: SNAT4 }));
  const [onLink, routed] = CLIENTS_SHARING_A_SLOT;
  // both flows close and are swept, so the NAT table holds what the steps below count
  for (const f of [a, b]) {
    run(`v4 FIN from ${f === a ? routed : onLink}: translated, closing`, f.fwdIn(FIN), { action: 'tx', output: f.fwdOut(FIN), counters: ['snat_hit'] });
    age(f.key, 61_000); // past the default closing timeout (60 s, src/render/ops.ts)
    held.get(endpoint(REALS[1]!, 8080, IPPROTO.TCP))!.delete(f.port);
  }
  script.push({ name: 'sweep removes the two closed flows (reverse and forward entries)', step: { op: 'sweep' },
    expect: { action: 'pass', check: (r) => (r.deleted === 4 ? null : `deleted ${r.deleted}, want 4`) } });
}
const u1 = snatFlow({ client: CLIENT4, cport: 40003, vip: VIP4, vport: 53, real: REALS[1]!, rport: 53, proto: 'udp', snat: SNAT4 });
run('v4 UDP datagram translated', u1.fwdIn(), { action: 'tx', output: u1.fwdOut(), counters: ['snat_new'] });
run('v4 UDP reply translated back', u1.replyIn(), { action: 'tx', output: u1.replyOut(), counters: ['snat_reply'] });
const u0 = snatFlow({ client: CLIENT4, cport: 40004, vip: VIP4, vport: 53, real: REALS[1]!, rport: 53, proto: 'udp', snat: SNAT4, udpChecksum: 0 });
run('v4 UDP without checksum keeps checksum 0', u0.fwdIn(), { action: 'tx', output: u0.fwdOut(), counters: ['snat_new'] });
run('v4 UDP without checksum: reply keeps 0 too', u0.replyIn(), { action: 'tx', output: u0.replyOut() });
{
  const stray = frame(ethFromReal(REALS[1]!), tcp(REALS[1]!, SNAT4, 8080, 39999, ACK));
  run('v4 packet to the SNAT address without a translation (node traffic) passes untouched', stray, { action: 'pass', counters: ['snat_pass_local'] });
  const ssh = frame(ETH_CLIENT, tcp(CLIENT4, SNAT4, 50123, 22, TCP_FLAGS.SYN));
  run('v4 SSH to the node address passes untouched', ssh, { action: 'pass', counters: ['snat_pass_local'] });
  const wrongReal = frame(ethFromReal(REALS[2]!), tcp(REALS[2]!, SNAT4, 8080, t1.port, ACK));
  run('v4 reply to a used SNAT port from another real is not translated', wrongReal, { action: 'pass', counters: ['snat_pass_local'] });
  const ping = frame(ETH_CLIENT, ipPacket({ src: CLIENT4, dst: SNAT4, v4: { proto: IPPROTO.ICMP }, l4: { raw: icmpv4(8, 0, Buffer.from([0, 1, 0, 1]), Buffer.from('ping')) } }));
  run('v4 ICMP echo to the SNAT address passes', ping, { action: 'pass', counters: ['snat_pass_local'] });
}
{
  // port unreachable from the real about the UDP flow: the whole datagram is quoted
  const err = icmpv4(3, 3, Buffer.alloc(4), u1.sentToReal());
  const input = frame(ethFromReal(REALS[1]!), Buffer.concat([ipv4Header({ src: REALS[1]!, dst: SNAT4, proto: IPPROTO.ICMP }, err.length), err]));
  const back = icmpv4(3, 3, Buffer.alloc(4), u1.sentByClient());
  const output = frame(ETH_TO_CLIENT, Buffer.concat([ipv4Header({ src: VIP4, dst: CLIENT4, proto: IPPROTO.ICMP }, back.length), back]));
  run('v4 ICMP port unreachable from the real: to the client from the VIP, quote translated (UDP checksum too)', input, { action: 'tx', output, counters: ['snat_icmp'] });
  // frag needed from a router about the TCP flow: IP header + 8 bytes quoted; the router stays the source
  const rest = Buffer.from([0, 0, 0x05, 0x78]);
  const err2 = icmpv4(3, 4, rest, t1.sentToReal().subarray(0, 28));
  const input2 = frame({ dst: LAB.lbA.mac, src: LAB.gwMac }, Buffer.concat([ipv4Header({ src: ROUTER4, dst: SNAT4, proto: IPPROTO.ICMP }, err2.length), err2]));
  const back2 = icmpv4(3, 4, rest, t1.sentByClient().subarray(0, 28));
  const output2 = frame(ETH_TO_CLIENT, Buffer.concat([ipv4Header({ src: ROUTER4, dst: CLIENT4, proto: IPPROTO.ICMP }, back2.length), back2]));
  run('v4 ICMP frag-needed from a router (8-byte quote) translated back, router kept as source', input2, { action: 'tx', output: output2, counters: ['snat_icmp'] });
  const unknown = snatFlow({ client: CLIENT4, cport: 1, vip: VIP4, vport: 53, real: REALS[2]!, rport: 53, proto: 'udp', snat: SNAT4 });
  held.get(endpoint(REALS[2]!, 53, IPPROTO.UDP))!.delete(unknown.port); // never sent: nothing allocated
  const err3 = icmpv4(3, 3, Buffer.alloc(4), unknown.sentToReal());
  const input3 = frame(ethFromReal(REALS[2]!), Buffer.concat([ipv4Header({ src: REALS[2]!, dst: SNAT4, proto: IPPROTO.ICMP }, err3.length), err3]));
  run('v4 ICMP error about a flow without translation passes untouched', input3, { action: 'pass', counters: ['snat_pass_local'] });
}
{
  const f = snatFlow({ client: CLIENT4, cport: 40005, vip: VIPF, vport: 80, real: REALS[4]!, rport: 80, proto: 'tcp', snat: SNAT4 });
  run('v4 VIP whose ring names an IPv6 real: dropped (no NAT46), counted', f.fwdIn(), { action: 'drop', counters: ['snat_drop_family'] });
}
list('NAT table holds the 4 IPv4 translations with client, VIP and real', (r) => {
  const got = r.nat.map((t: any) => `${t.rev.client}:${t.rev.clientPort}>${t.rev.vip}:${t.rev.vipPort}=${t.key.real}:${t.key.realPort}@${t.key.snatPort}`).sort();
  const want = [[t1, 40001, 80, 8080], [t2, 40002, 80, 8080], [u1, 40003, 53, 53], [u0, 40004, 53, 53]]
    .map(([f, c, v, rp]: any) => `${CLIENT4}:${c}>${VIP4}:${v}=${REALS[1]}:${rp}@${f.port}`).sort();
  return JSON.stringify(got) === JSON.stringify(want) && r.fwd === 4 ? null : `got ${JSON.stringify(got)} fwd=${r.fwd}, want ${JSON.stringify(want)}`;
});

// ---- timeouts (bpf_ktime_get_ns): entries aged by rewriting their last-seen time
run('v4 TCP FIN from the client: translated, the flow enters the closing state', t1.fwdIn(FIN), { action: 'tx', output: t1.fwdOut(FIN), counters: ['snat_hit'] });
age(t1.key, 61_000);
run('v4 TCP closing flow idle 61 s (> 60 s, Linux\'s TIME_WAIT): reply not translated, passed, counted', t1.replyIn(ACK), { action: 'pass', counters: ['snat_pass_expired'] });
age(t2.key, 130_000);
run('v4 TCP established flow idle 130 s (< 2 h 4 min) still translates', t2.replyIn(ACK), { action: 'tx', output: t2.replyOut(ACK), counters: ['snat_reply'] });
age(u1.key, 130_000);
run('v4 UDP flow idle 130 s (> 120 s): reply passed as expired', u1.replyIn(), { action: 'pass', counters: ['snat_pass_expired'] });
age(u0.key, 130_000);
run('v4 UDP flow idle 130 s: the client\'s next datagram gets a fresh translation', u0.fwdIn(), { action: 'tx', output: u0.fwdOut(), counters: ['snat_new'] });
list('expired translations are gone from both maps', (r) => {
  const ports = r.nat.map((t: any) => t.key.snatPort).sort();
  const want = [t2.port, u0.port].sort();
  return JSON.stringify(ports) === JSON.stringify(want) && r.fwd === 2 ? null : `ports ${ports} fwd ${r.fwd}, want ${want} and 2`;
});

// ---- 802.1Q tag and IPv4 options on the SNAT path
{
  const v = snatFlow({ client: CLIENT4, cport: 40020, vip: VIP4, vport: 80, real: REALS[1]!, rport: 8080, proto: 'tcp', snat: SNAT4 });
  const inV = frame({ ...ETH_CLIENT, vlan: 42 }, tcp(CLIENT4, VIP4, 40020, 80, TCP_FLAGS.SYN));
  const outV = frame({ ...ethToReal(REALS[1]!), vlan: 42 }, tcp(SNAT4, REALS[1]!, v.port, 8080, TCP_FLAGS.SYN));
  run('v4 TCP SYN with an 802.1Q tag: translated, tag kept', inV, { action: 'tx', output: outV, counters: ['snat_new'] });
  const repV = frame({ dst: LAB.lbA.mac, src: realMac(REALS[1]!), vlan: 42 }, tcp(REALS[1]!, SNAT4, 8080, v.port, ACK));
  const backV = frame({ ...ETH_TO_CLIENT, vlan: 42 }, tcp(VIP4, CLIENT4, 80, 40020, ACK));
  run('v4 reply with an 802.1Q tag: translated back, tag kept', repV, { action: 'tx', output: backV, counters: ['snat_reply'] });
  const opts = Buffer.from([0x94, 0x04, 0, 0]); // router alert
  const o = snatFlow({ client: CLIENT4, cport: 40021, vip: VIP4, vport: 53, real: REALS[1]!, rport: 53, proto: 'udp', snat: SNAT4 });
  const inO = frame(ETH_CLIENT, ipPacket({ src: CLIENT4, dst: VIP4, v4: { options: opts }, l4: { udp: { sport: 40021, dport: 53, payload: Buffer.from('q') } } }));
  const outO = frame(ethToReal(REALS[1]!), ipPacket({ src: SNAT4, dst: REALS[1]!, v4: { options: opts }, l4: { udp: { sport: o.port, dport: 53, payload: Buffer.from('q') } } }));
  run('v4 UDP with IPv4 options: translated, options kept', inO, { action: 'tx', output: outO, counters: ['snat_new'] });
}

// ---- hybrid: one VIP, TCP by dsr-ipip, UDP by snat
{
  const syn = tcp(CLIENT4, HYB, 41000, 80, TCP_FLAGS.SYN);
  const outer = encapsulate({ src: LAB.lbA.v4, dst: REALS[2]!, v4: { tos: 0, df: true, ttl: 64, id: 0 } }, syn);
  run('hybrid TCP goes by DSR (IP-in-IP, client packet untouched inside)', frame(ETH_CLIENT, syn), { action: 'tx', output: frame(ethToReal(REALS[2]!), outer), counters: ['tx'] });
  const hu = snatFlow({ client: CLIENT4, cport: 41001, vip: HYB, vport: 53, real: REALS[2]!, rport: 53, proto: 'udp', snat: SNAT4 });
  run('hybrid UDP on the same VIP goes by SNAT', hu.fwdIn(), { action: 'tx', output: hu.fwdOut(), counters: ['snat_new'] });
  run('hybrid UDP reply crosses the LB and leaves from the VIP', hu.replyIn(), { action: 'tx', output: hu.replyOut(), counters: ['snat_reply'] });
}

// ---- new connections follow the table (issue 24): a TCP SYN on a known 5-tuple, or a UDP flow whose translation
// expired, goes where service 1's ring sends it now; every other packet of an established flow keeps its translation
{
  const ring1Slot = (cport: number, proto: number, dport: number) =>
    flowHash({ src: CLIENT4, dst: VIP4, sport: cport, dport, proto }, true, SEED) % 7;
  const scriptApply = (name: string, st: DesiredState) => script.push({ name: `apply ${name}`, step: { op: 'apply', state: stateToJson(st) } });
  const mk = (cport: number, real: number, proto: 'tcp' | 'udp' = 'tcp') => snatFlow({ client: CLIENT4, cport, vip: VIP4,
    vport: proto === 'tcp' ? 80 : 53, real: REALS[real]!, rport: proto === 'tcp' ? 8080 : 53, proto, snat: SNAT4 });
  // the attacker's reproduction: connect from a fixed source port, close, take that real out, connect again
  const a1 = mk(46001, 1);
  run('table: SYN from a fixed source port goes to real 1', a1.fwdIn(), { action: 'tx', output: a1.fwdOut(), counters: ['snat_new'] });
  run('table: its retransmitted SYN (table unchanged) keeps the translation: same real, same SNAT port', a1.fwdIn(),
    { action: 'tx', output: a1.fwdOut(), counters: ['snat_hit'], noCounters: ['snat_new', 'snat_repicked'] });
  run('table: SYN-ACK from real 1 reaches the client', a1.replyIn(), { action: 'tx', output: a1.replyOut(), counters: ['snat_reply'] });
  run('table: the client\'s ACK keeps the translation', a1.fwdIn(ACK), { action: 'tx', output: a1.fwdOut(ACK), counters: ['snat_hit'] });
  run('table: the client closes (FIN): translation closing', a1.fwdIn(FIN), { action: 'tx', output: a1.fwdOut(FIN), counters: ['snat_hit'] });
  // flows that stay established across the change
  const e1 = mk(46002, 1);
  run('table: an established flow on real 1 (SYN)', e1.fwdIn(), { action: 'tx', output: e1.fwdOut(), counters: ['snat_new'] });
  run('table: an established flow on real 1 (ACK)', e1.fwdIn(ACK), { action: 'tx', output: e1.fwdOut(ACK), counters: ['snat_hit'] });
  const eu = mk(46003, 1, 'udp');
  run('table: a UDP flow on real 1', eu.fwdIn(), { action: 'tx', output: eu.fwdOut(), counters: ['snat_new'] });
  // a table change that keeps e1's real for e1 (every other entry now real 2): its retransmitted SYN is not moved
  const keep = Array.from({ length: 7 }, (_, i) => (i === ring1Slot(46002, IPPROTO.TCP, 80) ? 1 : 2));
  scriptApply('service 1 ring: real 2 except the entry of the established flow (real 1 stays)', withRing1(keep));
  run('table kept: a SYN of the flow whose entry still names real 1 keeps its translation', e1.fwdIn(),
    { action: 'tx', output: e1.fwdOut(), counters: ['snat_hit'], noCounters: ['snat_new', 'snat_repicked'] });
  // real 1 leaves the table (drained or marked down: still a real of the node)
  scriptApply('service 1 ring: real 2 only (real 1 out of the table, still a real of the node)', withRing1(ring(2)));
  run('table moved: the established flow\'s ACK keeps real 1 and its SNAT port', e1.fwdIn(ACK),
    { action: 'tx', output: e1.fwdOut(ACK), counters: ['snat_hit'], noCounters: ['snat_new', 'snat_repicked'] });
  run('table moved: real 1\'s answer on the established flow reaches the client', e1.replyIn(ACK), { action: 'tx', output: e1.replyOut(ACK), counters: ['snat_reply'] });
  run('table moved: the UDP flow (not expired) keeps real 1', eu.fwdIn(), { action: 'tx', output: eu.fwdOut(), counters: ['snat_hit'] });
  const a2 = mk(46001, 2);
  run('table moved: a new SYN from the reused source port goes to real 2 (old translation not reused)', a2.fwdIn(),
    { action: 'tx', output: a2.fwdOut(), counters: ['snat_repicked', 'snat_new'] });
  run('table moved: the new connection\'s ACK stays on real 2', a2.fwdIn(ACK), { action: 'tx', output: a2.fwdOut(ACK), counters: ['snat_hit'] });
  run('table moved: a late answer from real 1 to the old SNAT port is no longer translated', a1.replyIn(ACK),
    { action: 'pass', counters: ['snat_pass_local'] });
  held.get(endpoint(REALS[1]!, 8080, IPPROTO.TCP))!.delete(a1.port);
  run('table moved: real 2\'s answer reaches the client from the VIP', a2.replyIn(), { action: 'tx', output: a2.replyOut(), counters: ['snat_reply'] });
  age(eu.key, 130_000);
  held.get(endpoint(REALS[1]!, 53, IPPROTO.UDP))!.delete(eu.port);
  const eu2 = mk(46003, 2, 'udp');
  run('table moved: after the UDP translation expired, the next datagram goes to real 2', eu2.fwdIn(), { action: 'tx', output: eu2.fwdOut(), counters: ['snat_new'] });
  list('table moved: real 1 keeps only the established TCP flow; the reused 5-tuples are real 2\'s', (r) => {
    const got = r.nat.filter((t: any) => t.rev.vip === VIP4 && [46001, 46002, 46003].includes(t.rev.clientPort))
      .map((t: any) => `${t.rev.clientPort}=${t.key.real}@${t.key.snatPort}`).sort();
    const want = [`46001=${REALS[2]}@${a2.port}`, `46002=${REALS[1]}@${e1.port}`, `46003=${REALS[2]}@${eu2.port}`].sort();
    return JSON.stringify(got) === JSON.stringify(want) ? null : `got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`;
  });
}

// ---- port exhaustion: two ports towards one real endpoint
apply('tight');
shortTimeouts();
{
  const mk = (cport: number) => snatFlow({ client: CLIENT4, cport, vip: VIPX, vport: 9000, real: REALS[2]!, rport: 9000, proto: 'tcp', snat: SNAT4, range: TIGHT });
  const a = mk(42001);
  const b = mk(42002);
  run('exhaustion: flow A gets one of the 2 ports', a.fwdIn(), { action: 'tx', output: a.fwdOut(), counters: ['snat_new'] });
  run('exhaustion: flow B gets the other', b.fwdIn(), { action: 'tx', output: b.fwdOut(), counters: ['snat_new'] });
  const c = frame(ETH_CLIENT, tcp(CLIENT4, VIPX, 42003, 9000, TCP_FLAGS.SYN));
  run('exhaustion: flow C finds no free port: dropped and counted, never a shared port', c, { action: 'drop', counters: ['snat_drop_ports_exhausted'] });
  run('exhaustion: flow A still translates', a.fwdIn(ACK), { action: 'tx', output: a.fwdOut(ACK), counters: ['snat_hit'] });
  run('exhaustion: B\'s reply still reaches B', b.replyIn(ACK), { action: 'tx', output: b.replyOut(ACK), counters: ['snat_reply'] });
  // A expires; C reclaims A's port; A's next packet finds its translation gone and no port left
  age(a.key, 120_000);
  const cOut = frame(ethToReal(REALS[2]!), tcp(SNAT4, REALS[2]!, a.port, 9000, TCP_FLAGS.SYN));
  run('exhaustion: after A expired, C reclaims A\'s port', c, { action: 'tx', output: cOut, counters: ['snat_reclaimed', 'snat_new'] });
  run('exhaustion: A\'s late packet gets no translation (port now C\'s): dropped', a.fwdIn(ACK), { action: 'drop', counters: ['snat_drop_ports_exhausted'] });
  const cReply = frame(ETH_TO_CLIENT, tcp(VIPX, CLIENT4, 9000, 42003, TCP_FLAGS.SYN | ACK, 5000));
  run('exhaustion: the reply on that port now reaches C, whose translation it is', a.replyIn(), { action: 'tx', output: cReply, counters: ['snat_reply'] });
}

// ---- no SNAT address on the node: the kernel gets the packet, as before XDP SNAT
apply('none');
run('no snatAddress of the family: snat listener passed to the kernel', frame(ETH_CLIENT, tcp(CLIENT4, VIP4, 43000, 80, TCP_FLAGS.SYN)), { action: 'pass', counters: ['pass_snat'] });

// ---- IPv6
apply('v6');
{
  const t = snatFlow({ client: CLIENT6, cport: 44001, vip: VIP6, vport: 80, real: REALS[3]!, rport: 8080, proto: 'tcp', snat: SNAT6 });
  run('v6 TCP SYN translated (L4 checksum over the new pseudo-header)', t.fwdIn(), { action: 'tx', output: t.fwdOut(), counters: ['snat_new'] });
  run('v6 TCP ACK keeps the translation', t.fwdIn(ACK), { action: 'tx', output: t.fwdOut(ACK), counters: ['snat_hit'] });
  run('v6 TCP reply translated back', t.replyIn(), { action: 'tx', output: t.replyOut(), counters: ['snat_reply'] });
  const u = snatFlow({ client: CLIENT6, cport: 44002, vip: VIP6, vport: 53, real: REALS[3]!, rport: 53, proto: 'udp', snat: SNAT6 });
  run('v6 UDP translated', u.fwdIn(), { action: 'tx', output: u.fwdOut(), counters: ['snat_new'] });
  run('v6 UDP reply translated back', u.replyIn(), { action: 'tx', output: u.replyOut(), counters: ['snat_reply'] });
  const err = icmpv6(REALS[3]!, SNAT6, 1, 4, Buffer.alloc(4), u.sentToReal());
  const input = frame(ethFromReal(REALS[3]!), Buffer.concat([ipv6Header({ src: REALS[3]!, dst: SNAT6, nextHeader: IPPROTO.ICMPV6 }, err.length), err]));
  const back = icmpv6(VIP6, CLIENT6, 1, 4, Buffer.alloc(4), u.sentByClient());
  const output = frame(ETH_TO_CLIENT, Buffer.concat([ipv6Header({ src: VIP6, dst: CLIENT6, nextHeader: IPPROTO.ICMPV6 }, back.length), back]));
  run('v6 ICMPv6 port unreachable from the real translated back (outer and inner, checksum incl. pseudo-header)', input, { action: 'tx', output, counters: ['snat_icmp'] });
  const mtu = Buffer.from([0, 0, 0x05, 0x00]);
  const err2 = icmpv6(GW6, SNAT6, 2, 0, mtu, t.sentToReal());
  const input2 = frame({ dst: LAB.lbA.mac, src: LAB.gwMac }, Buffer.concat([ipv6Header({ src: GW6, dst: SNAT6, nextHeader: IPPROTO.ICMPV6 }, err2.length), err2]));
  const back2 = icmpv6(GW6, CLIENT6, 2, 0, mtu, t.sentByClient());
  const output2 = frame(ETH_TO_CLIENT, Buffer.concat([ipv6Header({ src: GW6, dst: CLIENT6, nextHeader: IPPROTO.ICMPV6 }, back2.length), back2]));
  run('v6 ICMPv6 packet-too-big from a router translated back (TCP checksum in the quote too)', input2, { action: 'tx', output: output2, counters: ['snat_icmp'] });
  const stray = frame(ethFromReal(REALS[3]!), udp(REALS[3]!, SNAT6, 53, 39999));
  run('v6 packet to the SNAT address without translation passes', stray, { action: 'pass', counters: ['snat_pass_local'] });
  const v4now = frame(ethFromReal(REALS[1]!), tcp(REALS[1]!, SNAT4, 8080, t2.port, ACK));
  run('v4 reply while the node has only an IPv6 snatAddress: not ours, passed', v4now, { action: 'pass', counters: ['pass_not_vip'] });
  // the clients' router (GW6) under the live flow t, and two clients of one cache slot, as for IPv4 above
  clientNextHopSteps('v6', t, GW6, CLIENTS6_SHARING_A_SLOT,
    (client, n) => snatFlow({ client, cport: 44010 + n, vip: VIP6, vport: 80, real: REALS[3]!, rport: 8080, proto: 'tcp', snat: SNAT6 }));
}

// ---- NAT table full (a data plane with 4-entry NAT maps, own pin root) and the sweep
const fullScript: Step[] = [];
{
  const saved = script.length;
  apply('small');
  shortTimeouts();
  held.clear();
  const flows = [45001, 45002, 45003, 45004].map((cport) =>
    snatFlow({ client: CLIENT4, cport, vip: VIP4, vport: 80, real: REALS[1]!, rport: 8080, proto: 'tcp', snat: SNAT4 }));
  flows.forEach((f, i) => run(`table full: translation ${i + 1} of 4 fits`, f.fwdIn(), { action: 'tx', output: f.fwdOut(), counters: ['snat_new'] }));
  const fifth = frame(ETH_CLIENT, tcp(CLIENT4, VIP4, 45005, 80, TCP_FLAGS.SYN));
  run('table full: a 5th translation is dropped and counted', fifth, { action: 'drop', counters: ['snat_drop_table_full'] });
  run('table full: existing translations keep working', flows[0]!.fwdIn(ACK), { action: 'tx', output: flows[0]!.fwdOut(ACK), counters: ['snat_hit'] });
  age(flows[1]!.key, 120_000);
  script.push({ name: 'sweep deletes the expired translation (reverse and forward entry)', step: { op: 'sweep' },
    expect: { action: 'pass', check: (r) => (r.deleted === 2 ? null : `deleted ${r.deleted}, want 2`) } });
  held.get(endpoint(REALS[1]!, 8080, IPPROTO.TCP))!.delete(flows[1]!.port);
  const f5 = snatFlow({ client: CLIENT4, cport: 45005, vip: VIP4, vport: 80, real: REALS[1]!, rport: 8080, proto: 'tcp', snat: SNAT4 });
  run('table full: after the sweep the 5th translation fits', f5.fwdIn(), { action: 'tx', output: f5.fwdOut(), counters: ['snat_new'] });
  // the sweep races live flows: a translation it judged expired, refreshed by a packet between its scan and its delete,
  // stays (the flow's next packets keep their translation); one nobody refreshed is still deleted
  const [, , stale, racing] = flows as [unknown, unknown, typeof f5, typeof f5];
  age(stale.key, 70_000); // past the 60 s established timeout
  age(racing.key, 30_000); // live: expired only on the sweep's clock, 40 s ahead
  script.push({ name: 'sweep: a translation refreshed by its reply between the scan and the delete is kept, the stale one deleted',
    step: { op: 'sweepAcross', aheadMs: 40_000, data: racing.replyIn(ACK).toString('hex'), ifname: 'lbA' },
    expect: { action: 'pass', check: (r) => (r.during?.retval !== ACTION.tx ? `the racing reply: action ${r.during?.retval}, want tx`
      : r.deleted !== 2 ? `deleted ${r.deleted}, want 2 (the stale translation's reverse and forward entries)` : null) } });
  held.get(endpoint(REALS[1]!, 8080, IPPROTO.TCP))!.delete(stale.port);
  run('sweep: the refreshed flow\'s next reply still reaches its client', racing.replyIn(ACK),
    { action: 'tx', output: racing.replyOut(ACK), counters: ['snat_reply'] });
  run('sweep: the refreshed flow\'s next client packet keeps its translation', racing.fwdIn(ACK),
    { action: 'tx', output: racing.fwdOut(ACK), counters: ['snat_hit'], noCounters: ['snat_new'] });
  list('sweep: the stale translation is gone from both maps, the refreshed one is there', (r) => {
    const ports = r.nat.map((t: any) => t.key.snatPort).sort();
    const want = [flows[0]!.port, racing.port, f5.port].sort();
    return JSON.stringify(ports) === JSON.stringify(want) && r.fwd === 3 ? null : `ports ${ports} fwd ${r.fwd}, want ${want} and 3`;
  });
  fullScript.push(...script.splice(saved));
}

let results: Promise<{ main: any[]; full: any[] }>;
test.before(() => {
  const { ns, pinRoot } = setupLab(TAG);
  // routes back to the clients (via the lab's gateway MAC)
  const ip = (...a: string[]) => execFileSync('ip', ['-n', ns, ...a], { stdio: ['ignore', 'ignore', 'pipe'] });
  ip('route', 'add', '192.0.2.0/25', 'via', ROUTER4, 'dev', 'lbA');
  ip('-6', 'neigh', 'replace', GW6, 'lladdr', LAB.gwMac, 'dev', 'lbA', 'nud', 'permanent');
  ip('-6', 'route', 'add', '2001:db8:c::/64', 'via', GW6, 'dev', 'lbA');
  ip('neigh', 'replace', CLIENTS_SHARING_A_SLOT[0], 'lladdr', ON_LINK_CLIENT_MAC, 'dev', 'lbA', 'nud', 'permanent');
  ip('-6', 'neigh', 'replace', CLIENTS6_SHARING_A_SLOT[0], 'lladdr', ON_LINK_CLIENT_MAC, 'dev', 'lbA', 'nud', 'permanent');
  results = (async () => ({
    // on one CPU: the client next-hop cache is per CPU, and its steps above rely on one cache
    main: await runSnatHarness(ns, { pinRoot, steps: script.map((s) => s.step) }, 90_000, { cpu: 0 }),
    full: await runSnatHarness(ns, { pinRoot: `${pinRoot}-small`, steps: fullScript.map((s) => s.step) }),
  }))();
  results.catch(() => undefined);
});

test.after.always(() => {
  const { pinRoot } = labNames(TAG);
  teardownLab(TAG);
  execFileSync('rm', ['-rf', `${pinRoot}-small`]);
});

// Setup steps (apply, age, timeouts, sweep without an expectation) are not tests of their own: each is checked for
// errors by the test of the next step that has an expectation, so the count of tests is the count of checks.
const seen = new Set<string>();
for (const [which, steps] of [['main', script], ['full', fullScript]] as const) {
  let setup: number[] = [];
  steps.forEach((s, i) => {
    const e = s.expect;
    if (!e) { setup.push(i); return; }
    const before = setup;
    setup = [];
    let name = s.name;
    for (let n = 2; seen.has(name); n++) name = `${s.name} (${n})`;
    seen.add(name);
    test(`snat: ${name}`, async (t) => {
      const all = (await results)[which];
      for (const j of before) t.falsy(all[j].error, `${steps[j]!.name}: ${all[j].error}`);
      const r = all[i];
      t.falsy(r.error, r.error);
      if (e.check) {
        t.is(e.check(r), null);
        return;
      }
      t.is(r.retval, ACTION[e.action], `action ${r.retval}, expected ${e.action} (counters ${JSON.stringify(r.counters)})`);
      // The oracle itself: an expected frame built by packets.ts carries valid checksums.
      if (e.output) t.deepEqual(checksumProblems(e.output.subarray(e.output.readUInt16BE(12) === 0x8100 ? 18 : 14)), [], 'expected frame checksums');
      const expected = e.output ?? (e.action === 'pass' ? Buffer.from((s.step as { data: string }).data, 'hex') : undefined);
      if (expected) t.is(hex(Buffer.from(r.data, 'hex')), hex(expected));
      for (const c of e.counters ?? []) t.true((r.counters[c] ?? 0) >= 1, `counter ${c} did not move: ${JSON.stringify(r.counters)}`);
      for (const c of e.noCounters ?? []) t.falsy(r.counters[c], `counter ${c} moved: ${JSON.stringify(r.counters)}`);
    });
  });
  if (setup.length) throw new Error(`${which}: setup steps after the last checked step: ${setup.map((j) => steps[j]!.name).join(', ')}`);
}
