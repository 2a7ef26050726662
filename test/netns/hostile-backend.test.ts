// Hostile packets against the backend TC programs (build/bpf/tc_backend.o) through BPF_PROG_TEST_RUN: first the
// named defects (each test failed before its fix), then the suite: every truncation, named header mutations and
// seeded bit flips of every frame kind the backend tests know (test/lib/packets-backend.ts), each output checked
// (test/lib/hostile.ts) and every drop accounted for by exactly one counter. docs/backend.md, "Hostile packets".
import test from 'ava';
import { BpfObject, TcAction, type BpfProgram } from '../../src/bpf/libbpf.js';
import { STAT_NAMES, VIP_FLAG_IPOPT, desiredTunnelAddrs, encodeConnKey, encodeVipKey, encodeVipValue, monotonicNs, type StatName } from '../../src/bpf/backend/codec.js';
import { encapFrame, eth, frame, gueFrame, icmpErrorFrame, ipPacket, ipoptFrame, parse, addrText, type L4Spec } from '../lib/packets-backend.js';
import { ipv6FragmentHeader, ipv6Header, onesSum, pseudoHeader, tcpSegment, IPPROTO, TCP_FLAGS } from '../lib/packets.js';
import { addTunnelVips, backendStats, loadBackendProgs } from '../lib/backend-prog.js';
import { bitFlips, mutations, truncations } from '../lib/hostile.js';
import { fuzz } from '../lib/hostile-backend.js';
import { BACKEND } from '../lib/hostile-setups.js';
import { BACKEND_CAPTURE_OBJECT, CaptureProgram } from '../../src/bpf/capture/index.js';
import { NO_FILTER, encodeCaptureConfig } from '../../src/bpf/capture/filter.js';
import { BACKEND_COUNTER_BITS, CAPTURE_SNAPLEN, TC_VERDICTS, actionName } from '../../src/bpf/capture/record.js';

const { v4: V4, v6: V6, vipPort: VIP_PORT, targetPort: TARGET_PORT } = BACKEND;
const FLIPS_PER_PROGRAM = 10_000;
// A listener moved from targetPort PREV_PORT to NEW_PORT (docs/backend.md, "targetPort changes"): options at its
// previous port take the renewal path, which writes the entry from the packet path.
const RETARGETED = 443;
const NEW_PORT = 9443;
const PREV_PORT = 8443;
const GUE_PORT = 6080;

let obj: BpfObject;
let ingress: BpfProgram;
let egress: BpfProgram;

test.before(async () => {
  ({ obj, ingress, egress } = await loadBackendProgs(V4, V6));
  addTunnelVips(obj, { v4: V4, v6: V6 }, VIP_PORT, TARGET_PORT, GUE_PORT);
  for (const [vip, family] of [[V4.optVip, 4], [V6.optVip, 6]] as const)
    for (const protocol of ['TCP', 'UDP'] as const)
      obj.map('be_vips').update(encodeVipKey({ address: vip, family, port: RETARGETED, protocol }),
        encodeVipValue({ flags: VIP_FLAG_IPOPT, targetPort: NEW_PORT, previousTargetPort: PREV_PORT, previousSeenNs: monotonicNs() }));
});
test.after.always(() => obj?.close());

const stats = () => backendStats(obj);
function run(prog: BpfProgram, data: Buffer) {
  const before = stats();
  const r = prog.testRun({ data, dataOutSize: data.length + 256 });
  const after = stats();
  const delta = Object.fromEntries(STAT_NAMES.map((n) => [n, after[n] - before[n]]).filter(([, d]) => d !== 0));
  return { action: r.retval, out: r.data, delta };
}
const tcp = (sport: number, dport: number, payload = 'hello'): L4Spec => ({ proto: 'TCP', sport, dport, payload: Buffer.from(payload) });
const udp = (sport: number, dport: number, payload = 'ping'): L4Spec => ({ proto: 'UDP', sport, dport, payload: Buffer.from(payload) });
const tunnel4 = (outerSrc = V4.lb, outerDst = V4.real) => encapFrame(outerSrc, outerDst, ipPacket(V4.client, V4.ipipVip, tcp(40000, VIP_PORT)));
const tunnel6 = (outerSrc = V6.lb, outerDst = V6.real) => encapFrame(outerSrc, outerDst, ipPacket(V6.client, V6.ipipVip, tcp(40000, VIP_PORT)));

// ---------------------------------------------------------------- the named defects

test.serial('defect: an IPv6 UDP reply whose rewritten checksum is 0 leaves with 0xffff', (t) => {
  const cport = 47100;
  run(ingress, ipoptFrame(V6.client, V6.real, udp(cport, TARGET_PORT), V6.optVip, VIP_PORT));
  // choose two payload bytes so the reply as the client will see it (VIP:80 -> client) sums to exactly 0xffff
  const payload = Buffer.alloc(4);
  const seg = Buffer.alloc(8 + payload.length);
  seg.writeUInt16BE(VIP_PORT, 0);
  seg.writeUInt16BE(cport, 2);
  seg.writeUInt16BE(seg.length, 4);
  const s = onesSum(pseudoHeader(V6.optVip, V6.client, IPPROTO.UDP, seg.length), seg);
  payload.writeUInt16BE(0xffff - s, 0);
  const reply = frame(V6.real, V6.client, { proto: 'UDP', sport: TARGET_PORT, dport: cport, payload });
  const r = run(egress, reply);
  const p = parse(r.out);
  t.is(p.src, addrText(V6.optVip));
  t.is(p.udpChecksum, 0xffff, 'a computed 0 is sent as 0xffff over IPv6');
  t.true(p.l4ChecksumOk);
});

test.serial('defect: an IPv6 UDP reply with checksum 0 (invalid) leaves as it is, not rewritten with its 0 kept', (t) => {
  const cport = 47110;
  run(ingress, ipoptFrame(V6.client, V6.real, udp(cport, TARGET_PORT), V6.optVip, VIP_PORT));
  const reply = frame(V6.real, V6.client, { ...udp(TARGET_PORT, cport), udpNoChecksum: true });
  const r = run(egress, reply);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, reply);
  t.is(r.delta.reply6_rewrite, undefined);
  // control: the same reply with its checksum is rewritten
  const ok = run(egress, frame(V6.real, V6.client, udp(TARGET_PORT, cport)));
  t.is(parse(ok.out).src, addrText(V6.optVip));
  t.is(ok.delta.reply6_rewrite, 1);
});

test.serial('defect: an ipopt IPv6 UDP request with checksum 0 is neither recorded nor stripped', (t) => {
  const input = ipoptFrame(V6.client, V6.real, { ...udp(47120, TARGET_PORT), udpNoChecksum: true }, V6.optVip, VIP_PORT);
  const r = run(ingress, input);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, input);
  t.is(r.delta.ipopt6, undefined);
  const key = encodeConnKey({ family: 6, protocol: 'UDP', client: V6.client, clientPort: 47120, local: V6.real, localPort: TARGET_PORT });
  t.is(obj.map('be_conns').lookup(key), null);
});

test.serial('defect: ipopt with a wrong IPv4 header checksum is dropped, not re-checksummed by the strip', (t) => {
  const input = ipoptFrame(V4.client, V4.real, tcp(47200, TARGET_PORT), V4.optVip, VIP_PORT);
  input.writeUInt16BE(input.readUInt16BE(14 + 10) ^ 0x0400, 14 + 10);
  const r = run(ingress, input);
  t.is(r.action, TcAction.shot);
  t.is(r.delta.bad_ip_csum, 1);
  const key = encodeConnKey({ family: 4, protocol: 'TCP', client: V4.client, clientPort: 47200, local: V4.real, localPort: TARGET_PORT });
  t.is(obj.map('be_conns').lookup(key), null, 'nothing recorded from a corrupted header');
});

test.serial('an untrusted ipopt option (VIP:port not served) with a wrong IPv4 header checksum is left untouched, not dropped', (t) => {
  // docs/backend.md: an untrusted option leaves the packet untouched; the checksum is judged only for an option we act on.
  const input = ipoptFrame(V4.client, V4.real, tcp(47210, TARGET_PORT), V4.optVip, VIP_PORT + 1);
  input.writeUInt16BE(input.readUInt16BE(14 + 10) ^ 0x0400, 14 + 10);
  const r = run(ingress, input);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, input);
  t.is(r.delta.bad_ip_csum, undefined);
  t.is(r.delta.ipopt_not_vip, 1);
});

test.serial('defect: IPv6 fragments pass untouched and are counted as fragments', (t) => {
  const seg = Buffer.from(tcp(1, 2).payload!);
  const input = eth(Buffer.concat([ipv6Header({ src: V6.client, dst: V6.real, nextHeader: IPPROTO.FRAGMENT }, 8 + seg.length),
    ipv6FragmentHeader(IPPROTO.TCP, 0, true, 7), seg]));
  const r = run(ingress, input);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, input);
  t.is(r.delta.fragment, 1);
});

// IPv6 fragments behind extension headers (docs/backend.md, "Known limits"): the fragment guard walks up to 4
// hop-by-hop (0) / destination-options (60) / routing (43) headers before it looks for the fragment header (44)
const HOP = 0, DST = 60, RT = 43;
/** An extension header of the generic shape naming `next`, `units` x 8 bytes long, filled with a PadN option. */
const extHeader = (next: number, units = 1) => { const h = Buffer.alloc(8 * units); h[0] = next; h[1] = units - 1; h[2] = 1; h[3] = 8 * units - 4; return h; };
/** client -> real over IPv6 with `chain` (extension header types, each 8 bytes unless [type, units]) before `last` and its bytes. */
function v6Chain(chain: Array<number | [number, number]>, last: number, tail: Buffer, dst: string = V6.real): Buffer {
  const kinds = chain.map((c) => (typeof c === 'number' ? [c, 1] : c));
  const hdrs = kinds.map(([, units], i) => extHeader(i + 1 < kinds.length ? kinds[i + 1]![0] : last, units));
  const payload = Buffer.concat([...hdrs, tail]);
  return eth(Buffer.concat([ipv6Header({ src: V6.client, dst, nextHeader: kinds.length ? kinds[0]![0] : last }, payload.length), payload]));
}
const fragTail = () => Buffer.concat([ipv6FragmentHeader(IPPROTO.TCP, 0, true, 9), Buffer.from(tcp(1, 2).payload!)]);
const tcp6Tail = () => tcpSegment(V6.client, V6.real, { sport: 40100, dport: 22, flags: TCP_FLAGS.SYN });

for (const [name, chain] of [
  ['hop-by-hop', [HOP]], ['destination options', [DST]], ['hop-by-hop and destination options', [HOP, DST]],
  ['hop-by-hop, a 16-byte destination options and routing', [HOP, [DST, 2], RT]],
  ['four headers (the most walked)', [HOP, DST, RT, DST]],
] as Array<[string, Array<number | [number, number]>]>) {
  test.serial(`defect: an IPv6 fragment after ${name} passes untouched and is counted as a fragment`, (t) => {
    const input = v6Chain(chain, IPPROTO.FRAGMENT, fragTail());
    const r = run(ingress, input);
    t.is(r.action, TcAction.ok);
    t.deepEqual(r.out, input);
    t.deepEqual(r.delta, { rx_packets: 1, fragment: 1 });
  });
}

test.serial('an IPv6 fragment behind more than four extension headers is not called a fragment (the walk is bounded)', (t) => {
  const input = v6Chain([HOP, DST, RT, DST, DST], IPPROTO.FRAGMENT, fragTail());
  const r = run(ingress, input);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, input);
  t.deepEqual(r.delta, { rx_packets: 1 });
});

test.serial('defect: a fragmented ipopt6 request (DSR option header, then a fragment header) is counted, not recorded or stripped', (t) => {
  const whole = ipoptFrame(V6.client, V6.real, tcp(47130, TARGET_PORT), V6.optVip, VIP_PORT);
  // the DSR destination-options header (24 bytes after the fixed header) now names a fragment header
  const l4 = whole.subarray(14 + 40 + 24);
  const ext = Buffer.from(whole.subarray(14 + 40, 14 + 40 + 24));
  ext[0] = IPPROTO.FRAGMENT;
  const payload = Buffer.concat([ext, ipv6FragmentHeader(IPPROTO.TCP, 0, true, 11), l4]);
  const input = eth(Buffer.concat([ipv6Header({ src: V6.client, dst: V6.real, nextHeader: DST }, payload.length), payload]));
  const r = run(ingress, input);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, input);
  t.deepEqual(r.delta, { rx_packets: 1, fragment: 1 });
  const key = encodeConnKey({ family: 6, protocol: 'TCP', client: V6.client, clientPort: 47130, local: V6.real, localPort: TARGET_PORT });
  t.is(obj.map('be_conns').lookup(key), null);
});

test.serial('what the fragment guard lets through: extension headers before TCP, and the ipopt6 option header', (t) => {
  for (const chain of [[HOP], [DST], [HOP, DST], [HOP, [DST, 2], RT]] as Array<Array<number | [number, number]>>) {
    const input = v6Chain(chain, IPPROTO.TCP, tcp6Tail());
    const r = run(ingress, input);
    t.is(r.action, TcAction.ok);
    t.deepEqual(r.out, input, `chain ${JSON.stringify(chain)} untouched`);
    t.deepEqual(r.delta, { rx_packets: 1 }, `chain ${JSON.stringify(chain)} not a fragment`);
  }
  const opt = run(ingress, ipoptFrame(V6.client, V6.real, tcp(47140, TARGET_PORT), V6.optVip, VIP_PORT));
  t.deepEqual(opt.delta, { rx_packets: 1, ipopt6: 1 }, 'recorded, not a fragment');
  t.is(parse(opt.out).proto, IPPROTO.TCP, 'option stripped');
  // a tunnel behind hop-by-hop is not a fragment either (and passes as before: only a tunnel right after the fixed header is undone)
  const inner = ipPacket(V6.client, V6.ipipVip, tcp(40000, VIP_PORT));
  const tun = eth(Buffer.concat([ipv6Header({ src: V6.lb, dst: V6.real, nextHeader: HOP }, 8 + inner.length), extHeader(IPPROTO.IPV6), inner]));
  const r = run(ingress, tun);
  t.deepEqual(r.out, tun);
  t.deepEqual(r.delta, { rx_packets: 1 });
});

const refusals: Array<[string, () => Buffer, StatName]> = [
  ['IPv4 outer header checksum wrong', () => { const f = tunnel4(); f.writeUInt16BE(f.readUInt16BE(24) ^ 1, 24); return f; }, 'decap_bad_outer'],
  ['IPv4 outer version 6 in an IPv4 frame', () => { const f = tunnel4(); f[14] = 0x65; return f; }, 'decap_bad_outer'],
  ['IPv4 outer total length beyond the frame', () => { const f = tunnel4(); f.writeUInt16BE(f.length - 14 + 4, 16); f.writeUInt16BE(0, 24); f.writeUInt16BE(~onesSum(f.subarray(14, 34)) & 0xffff, 24); return f; }, 'decap_bad_outer'],
  ['IPv4 inner header of the wrong version', () => { const f = tunnel4(); f[34] = 0x65; return f; }, 'decap_bad_outer'],
  ['IPv4 outer destination not this node', () => tunnel4(V4.lb, V4.stranger), 'decap_not_allowed'],
  ['IPv4 outer source not an lb node', () => tunnel4(V4.stranger), 'decap_not_allowed'],
  ['IPv6 outer payload length beyond the frame', () => { const f = tunnel6(); f.writeUInt16BE(f.length - 14 - 40 + 1, 18); return f; }, 'decap_bad_outer'],
  ['IPv6 outer version 4 in an IPv6 frame', () => { const f = tunnel6(); f[14] = 0x40 | (f[14]! & 0xf); return f; }, 'decap_bad_outer'],
  ['IPv6 outer destination not this node', () => tunnel6(V6.lb, V6.stranger), 'decap_not_allowed'],
  ['IPv6 outer source not an lb node', () => tunnel6(V6.stranger), 'decap_not_allowed'],
];
for (const [name, build, reason] of refusals) {
  test.serial(`defect: a tunnel to a served VIP is refused: ${name}`, (t) => {
    const r = run(ingress, build());
    t.is(r.action, TcAction.shot);
    t.is(r.delta[reason], 1, JSON.stringify(r.delta));
  });
}

test.serial('the allow-list admits the lb node and this node: the same tunnels decapsulate', (t) => {
  for (const f of [tunnel4(), tunnel6()]) {
    const r = run(ingress, f);
    t.is(r.action, TcAction.ok);
    t.is(parse(r.out).proto, IPPROTO.TCP);
  }
});

test('desiredTunnelAddrs: own addresses are destinations, lb addresses sources, one entry per address', (t) => {
  t.deepEqual(desiredTunnelAddrs({ addresses: ['203.0.113.2', '2001:db8:1::2'], lbAddresses: ['203.0.113.1', '203.0.113.2'] }), [
    { address: '203.0.113.1', family: 4, flags: 1 },
    { address: '203.0.113.2', family: 4, flags: 3 },
    { address: '2001:db8:1::2', family: 6, flags: 2 },
  ]);
  t.deepEqual(desiredTunnelAddrs({}), []);
});

// ---------------------------------------------------------------- the suite

const INGRESS_KINDS: Record<string, Buffer> = {
  '4in4': tunnel4(),
  '6in6': tunnel6(),
  '4in6': encapFrame(V6.lb, V6.real, ipPacket(V4.client, V4.ipipVip, udp(40001, VIP_PORT))),
  '6in4': encapFrame(V4.lb, V4.real, ipPacket(V6.client, V6.ipipVip, udp(40001, VIP_PORT))),
  'gue4 TCP': gueFrame(V4.lb, V4.real, ipPacket(V4.client, V4.ipipVip, tcp(40006, VIP_PORT)), GUE_PORT),
  'gue6 UDP': gueFrame(V6.lb, V6.real, ipPacket(V6.client, V6.ipipVip, udp(40006, VIP_PORT)), GUE_PORT),
  'gue 6-in-4': gueFrame(V4.lb, V4.real, ipPacket(V6.client, V6.ipipVip, tcp(40007, VIP_PORT)), GUE_PORT),
  'ipopt4 TCP': ipoptFrame(V4.client, V4.real, tcp(40002, TARGET_PORT), V4.optVip, VIP_PORT),
  'ipopt4 UDP': ipoptFrame(V4.client, V4.real, udp(40003, TARGET_PORT), V4.optVip, VIP_PORT),
  'ipopt6 TCP': ipoptFrame(V6.client, V6.real, tcp(40002, TARGET_PORT), V6.optVip, VIP_PORT),
  'ipopt6 UDP': ipoptFrame(V6.client, V6.real, udp(40003, TARGET_PORT), V6.optVip, VIP_PORT),
  'ipopt4 TCP at a previous targetPort': ipoptFrame(V4.client, V4.real, tcp(40005, PREV_PORT), V4.optVip, RETARGETED),
  'ipopt6 UDP at a previous targetPort': ipoptFrame(V6.client, V6.real, udp(40005, PREV_PORT), V6.optVip, RETARGETED),
  'plain v4 TCP': frame(V4.client, V4.real, tcp(40004, 22)),
  'plain v6 UDP': frame(V6.client, V6.real, udp(40004, 53)),
  'v6 fragment after hop-by-hop, dest-opts': v6Chain([HOP, DST], IPPROTO.FRAGMENT, fragTail()),
  'v6 TCP after hop-by-hop': v6Chain([HOP], IPPROTO.TCP, tcp6Tail()),
};
const EGRESS_KINDS: Record<string, Buffer> = {
  'reply4 TCP': frame(V4.real, V4.client, tcp(TARGET_PORT, 40002)),
  'reply4 UDP': frame(V4.real, V4.client, udp(TARGET_PORT, 40003)),
  'reply4 UDP no checksum': frame(V4.real, V4.client, { ...udp(TARGET_PORT, 40003), udpNoChecksum: true }),
  'reply6 TCP': frame(V6.real, V6.client, tcp(TARGET_PORT, 40002)),
  'reply6 UDP': frame(V6.real, V6.client, udp(TARGET_PORT, 40003)),
  'reply4 TCP from a previous targetPort': frame(V4.real, V4.client, tcp(PREV_PORT, 40005)),
  'icmp4 error': icmpErrorFrame(V4.real, V4.client, ipPacket(V4.client, V4.real, udp(40003, TARGET_PORT))),
  'icmp6 error': icmpErrorFrame(V6.real, V6.client, ipPacket(V6.client, V6.real, udp(40003, TARGET_PORT))),
};

function corpus(kinds: Record<string, Buffer>, seed: number): { named: Array<{ name: string; frame: Buffer }>; flips: Array<{ name: string; frame: Buffer }> } {
  const named = Object.entries(kinds).flatMap(([k, f]) => [...truncations(f), ...mutations(f)].map((x) => ({ name: `${k}: ${x.name}`, frame: x.frame })));
  const per = Math.ceil(FLIPS_PER_PROGRAM / Object.keys(kinds).length);
  const flips = Object.entries(kinds).flatMap(([k, f], i) => bitFlips(f, seed + i, per).map((x) => ({ name: `${k}: ${x.name}`, frame: x.frame })));
  return { named, flips };
}

for (const [progName, kinds, seed] of [['backend_ingress', INGRESS_KINDS, 0x1000], ['backend_egress', EGRESS_KINDS, 0x2000]] as const) {
  test.serial(`hostile suite: ${progName}: truncations, mutations and ${FLIPS_PER_PROGRAM} bit flips keep every invariant`, (t) => {
    const prog = progName === 'backend_ingress' ? ingress : egress;
    // the flows the egress frames belong to are known (recorded by their ipopt requests)
    for (const k of ['ipopt4 TCP', 'ipopt4 UDP', 'ipopt6 TCP', 'ipopt6 UDP', 'ipopt4 TCP at a previous targetPort', 'ipopt6 UDP at a previous targetPort'])
      t.is(ingress.testRun({ data: INGRESS_KINDS[k]! }).data.length, INGRESS_KINDS[k]!.length - (k.startsWith('ipopt4') ? 8 : 24), `${k}: trusted and stripped`);
    const { named, flips } = corpus(kinds, seed);
    t.true(flips.length >= FLIPS_PER_PROGRAM);
    const prevBefore = stats().ipopt_prev_target;
    const a = fuzz(obj, prog, named);
    const b = fuzz(obj, prog, flips);
    if (prog === ingress) t.true(stats().ipopt_prev_target > prevBefore, 'the previous-targetPort path was exercised');
    console.log(`${progName}: ${a.runs} truncations/mutations ${JSON.stringify(a.actions)} drops ${JSON.stringify(a.drops)}; ` +
      `${b.runs} bit flips ${JSON.stringify(b.actions)} drops ${JSON.stringify(b.drops)}`);
    t.deepEqual([...a.problems, ...b.problems].slice(0, 20), []);
  });
}

// the same suites through gitlb capture's build of the backend programs (tc_backend_capture.o over the same maps,
// capturing every frame): the same invariants, and each run's record holds its verdict and the frame as it came and
// as the program handed it on
for (const [progName, kinds, seed] of [['backend_ingress', INGRESS_KINDS, 0x1000], ['backend_egress', EGRESS_KINDS, 0x2000]] as const) {
  test.serial(`hostile suite through tc_backend_capture.o: ${progName}: the same invariants, each record the run`, async (t) => {
    const capture = await CaptureProgram.load(BACKEND_CAPTURE_OBJECT, [ingress.fd, egress.fd],
      encodeCaptureConfig({ ...NO_FILTER, rate: 0 }, BACKEND_COUNTER_BITS, TC_VERDICTS));
    try {
      const prog = capture.programNamed(progName);
      const hook = progName === 'backend_ingress' ? 'tc-ingress' : 'tc-egress';
      const check = (input: Buffer, retval: number, output: Buffer): string[] => {
        const { records, lost } = capture.read(0);
        if (records.length !== 1 || lost) return [`capture: ${records.length} records, ${lost} lost for one run`];
        const c = records[0]!;
        const problems: string[] = [];
        if (c.hook !== hook || c.action !== actionName(retval, hook)) problems.push(`capture: ${c.hook} ${c.action}, the run returned ${retval}`);
        if (!c.entry?.equals(input.subarray(0, CAPTURE_SNAPLEN)) || c.entryLength !== input.length) problems.push('capture: the frame as received differs from the input');
        if (!c.exit.equals(output.subarray(0, CAPTURE_SNAPLEN)) || c.exitLength !== output.length) problems.push('capture: the frame handed on differs from the output');
        return problems;
      };
      const { named, flips } = corpus(kinds, seed);
      const a = fuzz(obj, prog, named, check);
      const b = fuzz(obj, prog, flips, check);
      console.log(`${progName} (capture build): ${a.runs} truncations/mutations ${JSON.stringify(a.actions)}; ${b.runs} bit flips ${JSON.stringify(b.actions)}`);
      t.deepEqual([...a.problems, ...b.problems].slice(0, 20), []);
      t.true(a.runs + b.runs > FLIPS_PER_PROGRAM);
    } finally {
      capture.close();
    }
  });
}

test('render: a backend node gets every lb node address as the tunnel allow-list; an lb node gets none', async (t) => {
  const { cluster, model, node, real, service } = await import('../helpers/model-builder.js');
  const { renderDesiredState } = await import('../../src/render/desired.js');
  const m = model({
    cluster: cluster({ tableSize: 251, seed: 'Z2l0bGItc2VlZC0x' }),
    nodes: [
      node('lb-1', { role: 'lb', allowedVips: ['192.0.2.0/24'], addresses: ['203.0.113.1', '2001:db8:1::1'] }),
      node('lb-2', { role: 'lb', allowedVips: ['192.0.2.0/24'], addresses: ['203.0.113.3'] }),
      node('be-1', { role: 'backend', addresses: ['203.0.113.2'] }),
    ],
    services: [service('web', { vip: '192.0.2.10', ports: [{ port: 80, protocol: 'TCP' }], dispatch: { mode: 'dsr', encap: 'ipip' }, reals: [real('203.0.113.2', 1)] })],
  });
  const be = renderDesiredState(m, 'be-1');
  t.deepEqual(be.lbAddresses, ['203.0.113.1', '203.0.113.3', '2001:db8:1::1']);
  t.deepEqual(desiredTunnelAddrs(be).map((e) => [e.address, e.flags]),
    [['203.0.113.1', 1], ['203.0.113.2', 2], ['203.0.113.3', 1], ['2001:db8:1::1', 1]]);
  t.is(renderDesiredState(m, 'lb-1').lbAddresses, undefined);
});
