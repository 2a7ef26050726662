// Hostile packets against the LB's XDP program (xdp_lb) through BPF_PROG_TEST_RUN in a lab namespace: first the
// named defects (each test failed before its fix), then the suite (test/lib/hostile-xdp-harness.ts): every
// truncation, named header mutations and 10,000 seeded bit flips over every frame kind of baseKinds(), each
// output checked and every packet accounted for by one counter; the suite again through gitlb capture's build
// (xdp_lb_capture.o), every frame captured and its record checked against the run. docs/datapath.md, "Hostile packets".
import test from 'ava';
import {
  IPPROTO, TCP_FLAGS, encapsulate, frame, hex, icmpv4, icmpv6, ipPacket, ipv4Header, ipv6FragmentHeader, ipv6Header, tcpSegment, type EthSpec,
} from '../lib/packets.js';
import { LAB, runHarness, runHarnessScript, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { ETH_IN, ETH_REAL, XDP, XDP_STATE } from '../lib/hostile-setups.js';
import { stateToJson } from '../lib/xdp-harness.js';
import type { BatchSummary, HostileInput } from '../lib/hostile-xdp-harness.js';
import { QUIC_V1, cidWithServerId, quicLong, quicShort } from '../lib/quic.js';

const TAG = 'hxdp';
const { client4: CLIENT4, client6: CLIENT6, real4: REAL4, vips: V } = XDP;
const STATE = XDP_STATE;
const tcp = (src: string, dst: string, sport: number, dport: number, flags: number = TCP_FLAGS.SYN, payload = Buffer.alloc(0)) =>
  ipPacket({ src, dst, l4: { tcp: { sport, dport, flags, seq: 1000, ack: flags & TCP_FLAGS.ACK ? 2000 : 0, payload } } });
const udp = (src: string, dst: string, sport: number, dport: number, payload = Buffer.from('query')) =>
  ipPacket({ src, dst, l4: { udp: { sport, dport, payload } } });
const inFrame = (ip: Buffer, eth: EthSpec = ETH_IN) => frame(eth, ip);
const ACTION: Record<number, string> = { 1: 'drop', 2: 'pass', 3: 'tx', 4: 'redirect' };

// ---------------------------------------------------------------- the named defects
interface Case { name: string; input: Buffer; action: string; counter: string; output?: Buffer; noCounter?: string }
const cases: Case[] = [];
for (const src of ['0.0.0.0', '0.1.2.3', '127.0.0.1', '224.0.0.1', '240.0.0.1', '255.255.255.255'])
  cases.push({ name: `martian source ${src} to an l2 VIP`, input: inFrame(tcp(src, V.l2, 40000, 80)), action: 'drop', counter: 'drop_martian' });
for (const src of ['::', '::1', 'ff02::1', 'fe80::1'])
  cases.push({ name: `martian source ${src} to an ipip VIP`, input: inFrame(tcp(src, V.ipipv6, 40000, 80)), action: 'drop', counter: 'drop_martian' });
cases.push({ name: 'martian source to a snat VIP is not translated', input: inFrame(tcp('127.0.0.1', V.snat, 40000, 80)), action: 'drop', counter: 'drop_martian' });
// sourceRanges (XDP_STATE): a source outside them is dropped before the connection table, the SNAT table or the
// MTU check could act on it; a martian source is refused as martian first
cases.push({ name: 'source outside the ranges to an ipip VIP', input: inFrame(tcp('198.51.100.77', V.ipip, 40000, 80, TCP_FLAGS.ACK)), action: 'drop', counter: 'drop_source_range' });
cases.push({ name: 'source outside the ranges to an ipip v6 VIP', input: inFrame(udp('2001:db8:d::1', V.ipipv6, 40000, 53)), action: 'drop', counter: 'drop_source_range' });
cases.push({ name: 'source outside the ranges to a snat VIP is not translated', input: inFrame(udp('198.51.100.77', V.snat, 40000, 53)), action: 'drop', counter: 'drop_source_range', noCounter: 'snat_new' });
cases.push({ name: 'an oversized packet from outside the ranges gets no ICMP answer', input: inFrame(tcp('198.51.100.77', V.ipip, 40000, 80, TCP_FLAGS.ACK, Buffer.alloc(1460, 0x61))), action: 'drop', counter: 'drop_source_range', noCounter: 'icmp_sent' });
cases.push({ name: 'a martian source to a VIP with ranges counts as martian', input: inFrame(tcp('127.0.0.1', V.ipip, 40000, 80)), action: 'drop', counter: 'drop_martian', noCounter: 'drop_source_range' });
for (const [what, dst] of [['broadcast', 'ff:ff:ff:ff:ff:ff'], ['IPv4 multicast', '01:00:5e:00:00:01'], ['IPv6 multicast', '33:33:00:00:00:01']] as const)
  cases.push({ name: `frame to the ${what} MAC is not load-balanced`, input: inFrame(tcp(CLIENT4, V.l2, 40001, 80), { dst, src: LAB.clientMac }), action: 'drop', counter: 'drop_l2_not_unicast' });
{
  const zero = inFrame(ipPacket({ src: CLIENT6, dst: V.l2v6, l4: { udp: { sport: 40007, dport: 53, payload: Buffer.from('query'), checksum: 0 } } }));
  cases.push({ name: 'IPv6 UDP with checksum 0 (invalid, RFC 8200 8.1) to a VIP is dropped, not forwarded', input: zero, action: 'drop', counter: 'drop_malformed_l4', noCounter: 'tx' });
}
cases.push({ name: 'frame from a group source MAC is not load-balanced', input: inFrame(tcp(CLIENT4, V.l2, 40002, 80), { dst: LAB.lbA.mac, src: '03:00:00:00:00:01' }), action: 'drop', counter: 'drop_l2_not_unicast' });
{
  const tooBig = tcp(CLIENT4, V.ipip, 40003, 80, TCP_FLAGS.ACK, Buffer.alloc(1500 - 40, 0x61));
  cases.push({ name: 'an oversized packet received as link-layer broadcast gets no ICMP answer', input: inFrame(tooBig, { dst: 'ff:ff:ff:ff:ff:ff', src: LAB.clientMac }),
    action: 'drop', counter: 'drop_l2_not_unicast', noCounter: 'icmp_sent' });
  cases.push({ name: 'an oversized packet from a multicast source gets no ICMP answer', input: inFrame(tcp('224.0.0.5', V.ipip, 40003, 80, TCP_FLAGS.ACK, Buffer.alloc(1460, 0x61))),
    action: 'drop', counter: 'drop_martian', noCounter: 'icmp_sent' });
}
{
  const bad = inFrame(tcp(CLIENT4, V.ipopt, 40004, 80));
  bad.writeUInt16BE(bad.readUInt16BE(14 + 10) ^ 0x0800, 14 + 10);
  cases.push({ name: 'ipopt SYN with a wrong IPv4 header checksum is dropped, not re-checksummed', input: bad, action: 'drop', counter: 'drop_bad_ip_csum' });
}
{
  // exactly MTU-20 of IP packet plus an 18-byte trailer: the tunnel must carry the IP packet only
  const p = tcp(CLIENT4, V.ipip, 40005, 80, TCP_FLAGS.ACK, Buffer.alloc(1480 - 40, 0x62));
  const outer = encapsulate({ src: LAB.lbA.v4, dst: REAL4, v4: { df: true, ttl: 64, id: 0 } }, p);
  cases.push({ name: 'ipip: bytes after the IP packet are cut, the tunnel packet is exactly MTU', input: Buffer.concat([inFrame(p), Buffer.alloc(18, 0xee)]),
    action: 'tx', counter: 'tx', output: frame({ dst: LAB.neighbours[REAL4]!, src: LAB.lbA.mac }, outer) });
}
{
  // found by scapy's over-MTU segment (test/netns/hostile-foreign.test.ts): what the program does not grow is not held to
  // the MTU; it leaves as it came, unanswered (docs/datapath.md, "Output lengths")
  const big = tcp(CLIENT4, V.l2, 40006, 80, TCP_FLAGS.ACK | TCP_FLAGS.PSH, Buffer.alloc(1900, 0x62));
  cases.push({ name: 'dsr-l2: a packet that arrived larger than the MTU is forwarded unchanged, no ICMP answer', input: inFrame(big),
    action: 'tx', counter: 'tx', noCounter: 'icmp_sent', output: frame({ dst: LAB.neighbours[REAL4]!, src: LAB.lbA.mac }, big) });
}

{
  // option headers of every length. IPv6: a destination-options header (hdr ext len 0..31) before TCP to the ipopt
  // v6 VIP is not a packet the LB balances (TCP/UDP must follow the fixed header): passed untouched, never given a
  // second header. IPv4: options of every length (IHL 6..15) before the ipopt insert; the option fits up to IHL 13.
  for (let hdrlen = 0; hdrlen < 32; hdrlen++) {
    const seg = tcpSegment(CLIENT6, V.ipoptv6, { sport: 40100 + hdrlen, dport: 80 });
    const ext = Buffer.alloc((hdrlen + 1) * 8, 0);
    ext[0] = IPPROTO.TCP;
    ext[1] = hdrlen;
    ext[2] = 1; // PadN over the rest
    ext[3] = ext.length - 4;
    const ip = Buffer.concat([ipv6Header({ src: CLIENT6, dst: V.ipoptv6, nextHeader: 60 }, ext.length + seg.length), ext, seg]);
    cases.push({ name: `IPv6 destination options of ${ext.length} bytes before TCP to an ipopt v6 VIP pass untouched`, input: inFrame(ip), action: 'pass', counter: 'pass_not_vip', noCounter: 'tx' });
  }
  for (let words = 1; words <= 10; words++) {
    const input = inFrame(ipPacket({ src: CLIENT4, dst: V.ipopt, v4: { options: Buffer.alloc(words * 4, 1) }, l4: { tcp: { sport: 40200 + words, dport: 80 } } }));
    if (words <= 8) cases.push({ name: `ipopt v4 SYN with ${words * 4} bytes of options gets the DSR option`, input, action: 'tx', counter: 'tx' });
    else cases.push({ name: `ipopt v4 SYN with ${words * 4} bytes of options has no room`, input, action: 'drop', counter: 'drop_ipopt_no_room', noCounter: 'tx' });
  }
}

// SNAT defects need the SNAT port of a flow: the SYN runs first, its output names the port
// the SNAT client is on the lab's second link (a known neighbour), so a translated reply has a next hop
const SNAT_CLIENT = XDP.snatClient;
const SNAT_SYN = inFrame(udp(SNAT_CLIENT, V.snat, 41000, 53));
function snatCases(port: number): Case[] {
  // an ICMP port unreachable from the real whose IP packet ends 4 bytes into the quoted UDP header; an Ethernet
  // trailer after it holds the other 4 bytes (before the fix the frame's end bounded the quote)
  const quoted = udp(LAB.lbA.v4, REAL4, port, 53).subarray(0, 20 + 4);
  const icmp = icmpv4(3, 3, Buffer.alloc(4), quoted);
  const short = frame(ETH_REAL, Buffer.concat([ipv4Header({ src: REAL4, dst: LAB.lbA.v4, proto: IPPROTO.ICMP }, icmp.length), icmp]));
  const withTrailer = Buffer.concat([short, udp(LAB.lbA.v4, REAL4, port, 53).subarray(24, 28), Buffer.alloc(8)]);
  // a fragmented reply to the SNAT address
  const frag = frame(ETH_REAL, ipPacket({ src: REAL4, dst: LAB.lbA.v4, v4: { mf: true, id: 9 }, l4: { udp: { sport: 53, dport: port, payload: Buffer.alloc(64, 1) } } }));
  const reply = frame(ETH_REAL, udp(REAL4, LAB.lbA.v4, 53, port, Buffer.from('answer')));
  return [
    { name: 'control: a whole reply to the SNAT address is translated', input: reply, action: 'redirect', counter: 'snat_reply' },
    { name: 'SNAT ICMP error whose quote is short inside the IP packet is not translated, trailer or not', input: withTrailer, action: 'pass', counter: 'snat_pass_local', noCounter: 'snat_icmp' },
    { name: 'a fragmented reply to the SNAT address is passed untranslated and counted', input: frag, action: 'pass', counter: 'snat_pass_fragment', noCounter: 'snat_reply' },
  ];
}

interface Result { retval: number; data: string; counters: Record<string, number>; error?: string }
let results: Promise<Map<string, { c: Case; r: Result }>>;
let suite: Promise<BatchSummary[]>;
let captureSuite: Promise<BatchSummary[]>;

function baseKinds(): Record<string, string> {
  const k: Record<string, Buffer> = {
    'l2 v4 SYN': inFrame(tcp(CLIENT4, V.l2, 42000, 80)),
    'l2 v4 ACK vlan': inFrame(tcp(CLIENT4, V.l2, 42001, 80, TCP_FLAGS.ACK, Buffer.from('data')), { ...ETH_IN, vlan: 5 }),
    'l2 v4 SYN ip options': inFrame(ipPacket({ src: CLIENT4, dst: V.l2, v4: { options: Buffer.from([0x94, 4, 0, 0]) }, l4: { tcp: { sport: 42002, dport: 80 } } })),
    'l2 v6 UDP': inFrame(udp(CLIENT6, V.l2v6, 42003, 53)),
    'ipip v4 SYN': inFrame(tcp(CLIENT4, V.ipip, 42004, 80)),
    'ipip v4 UDP': inFrame(udp(CLIENT4, V.ipip, 42005, 53)),
    'ipip v4 too big': inFrame(tcp(CLIENT4, V.ipip, 42006, 80, TCP_FLAGS.ACK, Buffer.alloc(1460, 0x61))),
    'ipip v6 SYN': inFrame(tcp(CLIENT6, V.ipipv6, 42007, 80)),
    'ipip v6 too big': inFrame(tcp(CLIENT6, V.ipipv6, 42008, 80, TCP_FLAGS.ACK, Buffer.alloc(1440, 0x61))),
    'ipopt v4 SYN': inFrame(tcp(CLIENT4, V.ipopt, 42009, 80)),
    'ipopt v4 UDP': inFrame(udp(CLIENT4, V.ipopt, 42010, 53)),
    'ipopt v4 UDP no checksum': inFrame(ipPacket({ src: CLIENT4, dst: V.ipopt, l4: { udp: { sport: 42011, dport: 53, payload: Buffer.from('q'), checksum: 0 } } })),
    'ipopt v6 SYN': inFrame(tcp(CLIENT6, V.ipoptv6, 42018, 80)),
    'ipopt v6 UDP': inFrame(udp(CLIENT6, V.ipoptv6, 42019, 53)),
    'ipopt v6 UDP too big': inFrame(udp(CLIENT6, V.ipoptv6, 42020, 53, Buffer.alloc(1430, 0x61))),
    'gue v4 SYN': inFrame(tcp(CLIENT4, V.gue, 42021, 80)),
    'gue v4 UDP too big': inFrame(udp(CLIENT4, V.gue, 42022, 53, Buffer.alloc(1450, 0x61))),
    'gue v6 UDP': inFrame(udp(CLIENT6, V.guev6, 42023, 53)),
    'gue v6 ACK': inFrame(tcp(CLIENT6, V.guev6, 42024, 80, TCP_FLAGS.ACK, Buffer.from('data'))),
    'snat v4 SYN': inFrame(tcp(CLIENT4, V.snat, 42012, 80)),
    'ICMP echo to a VIP': inFrame(ipPacket({ src: CLIENT4, dst: V.l2, v4: { proto: IPPROTO.ICMP }, l4: { raw: icmpv4(8, 0, Buffer.from([0, 1, 0, 1]), Buffer.from('ping')) } })),
    'ICMPv6 echo to a VIP': inFrame((() => {
      const m = icmpv6(CLIENT6, V.l2v6, 128, 0, Buffer.from([0, 1, 0, 1]), Buffer.from('ping'));
      return Buffer.concat([ipv6Header({ src: CLIENT6, dst: V.l2v6, nextHeader: IPPROTO.ICMPV6 }, m.length), m]);
    })()),
    'non-VIP v4 TCP': inFrame(tcp(CLIENT4, '203.0.113.99', 42013, 80)),
    'ipip v4 SYN vlan': inFrame(tcp(CLIENT4, V.ipip, 42014, 80), { ...ETH_IN, vlan: 7 }),
    'ipopt v4 SYN ip options': inFrame(ipPacket({ src: CLIENT4, dst: V.ipopt, v4: { options: Buffer.from([1, 1, 1, 0]) }, l4: { tcp: { sport: 42015, dport: 80 } } })),
    'IPv4 first fragment to a VIP': inFrame(ipPacket({ src: CLIENT4, dst: V.l2, v4: { mf: true, id: 3 }, l4: { tcp: { sport: 42016, dport: 80 } } })),
    'IPv6 fragment to a VIP': inFrame(Buffer.concat([ipv6Header({ src: CLIENT6, dst: V.l2v6, nextHeader: IPPROTO.FRAGMENT }, 8 + 20),
      ipv6FragmentHeader(IPPROTO.TCP, 0, true, 1), tcpSegment(CLIENT6, V.l2v6, { sport: 42017, dport: 80 })])),
    // QUIC with a server id the service routes by: every truncation and bit flip of the header goes through the parser
    'l2 v4 QUIC short header': inFrame(udp(CLIENT4, V.l2, 42021, 53, quicShort(cidWithServerId(1, XDP.quicId4)))),
    'ipip v6 QUIC Handshake': inFrame(udp(CLIENT6, V.ipipv6, 42022, 53, quicLong({ type: 0x20, version: QUIC_V1, dcid: cidWithServerId(1, XDP.quicId6) }))),
    'ARP': Buffer.concat([Buffer.alloc(6, 0xff), Buffer.from(LAB.clientMac.replace(/:/g, ''), 'hex'), Buffer.from([0x08, 0x06]), Buffer.alloc(28, 1)]),
  };
  const out = Object.fromEntries(Object.entries(k).map(([n, f]) => [n, f.toString('hex')]));
  return out;
}

test.before(() => {
  const { ns, pinRoot } = setupLab(TAG);
  const steps: unknown[] = [{ op: 'apply', state: stateToJson(STATE) }, { op: 'run', data: SNAT_SYN.toString('hex'), ifname: 'lbA' }];
  for (const c of cases) steps.push({ op: 'run', data: c.input.toString('hex'), ifname: 'lbA' });
  results = runHarness(ns, { pinRoot, steps }).then(async (out) => {
    const m = new Map<string, { c: Case; r: Result }>();
    if (out[0].error) throw new Error(out[0].error);
    cases.forEach((c, i) => m.set(c.name, { c, r: out[i + 2] }));
    const syn = Buffer.from(out[1].data, 'hex');
    const port = syn.readUInt16BE(14 + 20);
    const more = snatCases(port);
    const out2 = await runHarness(ns, { pinRoot, steps: more.map((c) => ({ op: 'run', data: c.input.toString('hex'), ifname: 'lbA' })) });
    more.forEach((c, i) => m.set(c.name, { c, r: out2[i] }));
    return m;
  });
  results.catch(() => undefined);
  suite = results.then(() => runHarnessScript(new URL('../lib/hostile-xdp-harness.ts', import.meta.url).pathname, ns, {
    pinRoot, state: stateToJson(STATE), ifname: 'lbA', mtu: 1500, kinds: baseKinds(), snatSyn: inFrame(udp(SNAT_CLIENT, V.snat, 43000, 53)).toString('hex'),
    snat: { address: LAB.lbA.v4, mac: LAB.lbA.mac, real: REAL4, realMac: LAB.neighbours[REAL4]! },
    flips: 10_000, seed: 0x3000,
  } satisfies HostileInput, 300_000)) as Promise<BatchSummary[]>;
  suite.catch(() => undefined);
  // the same frames (same seed) through gitlb capture's build, capturing every one
  captureSuite = suite.then(() => runHarnessScript(new URL('../lib/hostile-xdp-harness.ts', import.meta.url).pathname, ns, {
    pinRoot, state: stateToJson(STATE), ifname: 'lbA', mtu: 1500, kinds: baseKinds(), snatSyn: inFrame(udp(SNAT_CLIENT, V.snat, 43000, 53)).toString('hex'),
    snat: { address: LAB.lbA.v4, mac: LAB.lbA.mac, real: REAL4, realMac: LAB.neighbours[REAL4]! },
    flips: 10_000, seed: 0x3000, capture: true,
  } satisfies HostileInput, 300_000)) as Promise<BatchSummary[]>;
  captureSuite.catch(() => undefined);
});
test.after.always(() => teardownLab(TAG));

for (const c of [...cases, ...snatCases(40000)]) {
  test(`defect: ${c.name}`, async (t) => {
    const { c: sent, r } = (await results).get(c.name)!;
    t.falsy(r.error, r.error);
    t.is(ACTION[r.retval], c.action);
    t.true((r.counters[c.counter] ?? 0) >= 1, `${c.counter} did not move: ${JSON.stringify(r.counters)}`);
    if (c.noCounter) t.falsy(r.counters[c.noCounter], `${c.noCounter} moved`);
    if (c.output) t.is(hex(Buffer.from(r.data, 'hex')), hex(c.output));
    // passed untouched: byte for byte as received, trailer bytes included (docs/datapath.md, "Hostile packets")
    if (c.action === 'pass') t.is(r.data, sent.input.toString('hex'), 'passed untouched');
  });
}

test('hostile suite: xdp_lb keeps every invariant over truncations, mutations and 10,000 bit flips', async (t) => {
  const batches = await suite;
  for (const b of batches) {
    console.log(`xdp_lb ${b.batch}: ${b.runs} runs ${JSON.stringify(b.actions)} counters ${JSON.stringify(b.counters)}`);
    t.deepEqual(b.problems, [], b.batch);
  }
  t.true(batches.some((b) => b.batch.includes('bit flips') && b.runs >= 10_000));
});

test('hostile suite through xdp_lb_capture.o (gitlb capture, every frame captured): the same invariants, never XDP_ABORTED, each record the run', async (t) => {
  const batches = await captureSuite;
  for (const b of batches) {
    console.log(`xdp_lb_capture ${b.batch}: ${b.runs} runs ${JSON.stringify(b.actions)}`);
    t.deepEqual(b.problems, [], b.batch);
    t.deepEqual(Object.keys(b.actions).filter((a) => !['drop', 'pass', 'tx', 'redirect'].includes(a)), [], `${b.batch}: only valid verdicts`);
  }
  t.true(batches.some((b) => b.batch.includes('bit flips') && b.runs >= 10_000));
});
