// Hostile packets against tc_vip_probe (build/bpf/tc_vip_probe.o: vip_probe_egress and vip_probe_ingress, which see
// every IPv4 TCP packet of an lb node's interface once a `via: vip` check runs) through BPF_PROG_TEST_RUN: first
// the named defects (each failed before its fix), then the suite of the other programs (test/lib/hostile.ts): every
// truncation, named header mutations and 10,000 seeded bit flips per program of the packet kinds it handles, each
// output checked against the model of docs/health.md (test/lib/hostile-vip-probe.ts), counts printed; IPv6 frames
// (l2, ipip, ipopt, gue routes in the programs' IPv6 maps) against their own rule (v6Problems).
import test from 'ava';
import { BpfObject, TcAction, type BpfProgram } from '../../src/bpf/libbpf.js';
import { VIP_PROBE_OBJECT, encodeIn, encodeIn6, encodeOut, encodeOut6, type VipProbeRoute } from '../../src/bpf/vip-probe.js';
import { TCP_FLAGS, frame, ipBytes, ipPacket } from '../lib/packets.js';
import { bitFlips, fixIpv4Checksum, ipView, mutations, truncations } from '../lib/hostile.js';
import { expected, fuzz, problemsOf, type ProbeRoute } from '../lib/hostile-vip-probe.js';

const FLIPS_PER_PROGRAM = 10_000;
const NODE = '203.0.113.1'; // the lb node's address: the probes' source
const ETH = { dst: '02:00:00:00:00:02', src: '02:00:00:00:00:01' };
const ROUTES: ProbeRoute[] = [
  { vip: '192.0.2.10', port: 80, sourcePort: 61000, real: '198.51.100.11', encap: 'l2' },
  { vip: '192.0.2.11', port: 80, sourcePort: 61001, real: '198.51.100.12', encap: 'ipip', outerSource: '203.0.113.5' },
  { vip: '192.0.2.11', port: 443, sourcePort: 61002, real: '198.51.100.13', encap: 'ipip' },
  // an entry vip-probe.ts never writes: the program must drop the probe rather than let it reach the real's address
  { vip: '192.0.2.12', port: 80, sourcePort: 61003, real: '198.51.100.14', encap: 'unknown' },
  { vip: '192.0.2.13', port: 8080, vipPort: 80, sourcePort: 61004, real: '198.51.100.15', encap: 'ipopt' },
  { vip: '192.0.2.14', port: 80, guePort: 6080, sourcePort: 61005, real: '198.51.100.16', encap: 'gue' },
  // a gue entry without its port (vip-probe.ts refuses to write one): dropped, never sent to UDP port 0
  { vip: '192.0.2.14', port: 81, guePort: 0, sourcePort: 61006, real: '198.51.100.16', encap: 'gue' },
];

let obj: BpfObject;
let egress: BpfProgram;
let ingress: BpfProgram;

test.before(async () => {
  obj = await BpfObject.load(VIP_PROBE_OBJECT);
  egress = obj.program('vip_probe_egress');
  ingress = obj.program('vip_probe_ingress');
  for (const r of ROUTES) {
    const real = { ...r, encap: r.encap === 'unknown' ? 'l2' as const : r.encap, ...(r.encap === 'gue' && { guePort: r.guePort || 1 }) };
    const [ik, iv] = encodeIn(real);
    const [ok, ov] = encodeOut(real);
    if (r.encap === 'unknown') ov.writeUInt32LE(0xff, 8);
    if (r.encap === 'gue' && !r.guePort) ov.writeUInt16BE(0, 14);
    obj.map('probe_in').update(ik, iv);
    obj.map('probe_out').update(ok, ov);
  }
  for (const r of ROUTES6) {
    obj.map('probe6_in').update(...encodeIn6(r));
    obj.map('probe6_out').update(...encodeOut6(r));
  }
});

// IPv6 routes (l2, ipip), in the programs' IPv6 maps
const NODE6 = '2001:db8:1::1';
const ROUTES6: VipProbeRoute[] = [
  { vip: '2001:db8:f::10', port: 80, sourcePort: 61010, real: '2001:db8:1::11', encap: 'l2' },
  { vip: '2001:db8:f::11', port: 80, sourcePort: 61011, real: '2001:db8:1::12', encap: 'ipip', outerSource: '2001:db8:1::5' },
  { vip: '2001:db8:f::12', port: 8080, vipPort: 80, sourcePort: 61012, real: '2001:db8:1::13', encap: 'ipopt' },
  { vip: '2001:db8:f::13', port: 80, guePort: 6080, sourcePort: 61013, real: '2001:db8:1::14', encap: 'gue' },
];
test.after.always(() => obj?.close());

const tcp = (src: string, dst: string, sport: number, dport: number, flags: number, payload = '', v4 = {}) =>
  frame(ETH, ipPacket({ src, dst, v4: { df: true, id: 7, ...v4 }, l4: { tcp: { sport, dport, flags, seq: 100, ack: flags & TCP_FLAGS.ACK ? 200 : 0, payload: Buffer.from(payload) } } }));
const [L2, IPIP, IPIP_NO_SRC, UNKNOWN, OPT, GUE, GUE_NO_PORT] = ROUTES as [ProbeRoute, ProbeRoute, ProbeRoute, ProbeRoute, ProbeRoute, ProbeRoute, ProbeRoute];
const probe = (r: ProbeRoute, flags: number = TCP_FLAGS.SYN, payload = '', v4 = {}) => tcp(NODE, r.real, r.sourcePort, r.port, flags, payload, v4);
const answer = (r: ProbeRoute, flags: number = TCP_FLAGS.SYN | TCP_FLAGS.ACK, payload = '') => tcp(r.vip, NODE, r.vipPort ?? r.port, r.sourcePort, flags, payload);
/** ipopt: an answer straight from the real's address and targetPort (the backend did not rewrite it) */
const unrewritten = (r: ProbeRoute) => tcp(r.real, NODE, r.port, r.sourcePort, TCP_FLAGS.SYN | TCP_FLAGS.ACK);

function check(t: import('ava').ExecutionContext, prog: BpfProgram, which: 'egress' | 'ingress', f: Buffer) {
  const r = prog.testRun({ data: f, dataOutSize: f.length + 256 });
  const want = expected(which, f, ROUTES);
  t.deepEqual(problemsOf(f, r.retval, r.data, want), [], `${want.kind}: ${want.why}`);
  return { want, action: r.retval, out: r.data };
}

// ---------------------------------------------------------------- the model's paths, byte for byte

test('the model and the program agree on every path: l2 rewrite, IPIP with and without an outer source, answers, no route, unknown encap', (t) => {
  t.is(check(t, egress, 'egress', probe(L2)).want.kind, 'rewrite');
  t.is(check(t, egress, 'egress', probe(IPIP)).want.kind, 'encap');
  t.is(check(t, egress, 'egress', probe(IPIP_NO_SRC, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n')).want.kind, 'encap');
  t.is(check(t, egress, 'egress', probe(UNKNOWN)).action, TcAction.shot);
  t.is(check(t, egress, 'egress', tcp(NODE, L2.real, 40000, L2.port, TCP_FLAGS.SYN)).want.kind, 'pass');
  t.is(check(t, ingress, 'ingress', answer(L2)).want.kind, 'rewrite');
  t.is(check(t, ingress, 'ingress', answer(IPIP, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'HTTP/1.0 200 OK\r\n\r\n')).want.kind, 'rewrite');
  t.is(check(t, ingress, 'ingress', tcp(L2.vip, NODE, L2.port, 40000, TCP_FLAGS.SYN | TCP_FLAGS.ACK)).want.kind, 'pass');
});

test('ipopt: the SYN gets the option (VIP:port) and nothing else changes, later segments pass; answers from VIP:port get the real and targetPort back, answers from the real itself are dropped', (t) => {
  const syn = check(t, egress, 'egress', probe(OPT));
  t.is(syn.want.kind, 'option');
  t.is(syn.out.length, probe(OPT).length + 8);
  t.is(syn.out.subarray(14 + 20, 14 + 28).toString('hex'), '9a080050c000020d', 'type 0x9a, length 8, port 80, VIP 192.0.2.13');
  t.is(check(t, egress, 'egress', probe(OPT, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n')).want.kind, 'pass');
  const bad = probe(OPT);
  bad.writeUInt16BE(bad.readUInt16BE(14 + 10) ^ 0x0100, 14 + 10);
  t.is(check(t, egress, 'egress', bad).action, TcAction.shot, 'a SYN whose header checksum is wrong is not re-checksummed');
  const a = check(t, ingress, 'ingress', answer(OPT));
  t.is(a.want.kind, 'rewrite');
  t.is(a.out.readUInt16BE(14 + 20), OPT.port, 'source port back to the targetPort');
  t.is(check(t, ingress, 'ingress', unrewritten(OPT)).action, TcAction.shot);
  // the same answer to another source port is not the probe's
  t.is(check(t, ingress, 'ingress', tcp(OPT.real, NODE, OPT.port, 40000, TCP_FLAGS.SYN | TCP_FLAGS.ACK)).want.kind, 'pass');
});

test('gue: the probe goes to the VIP inside outer IPv4 + UDP to the GUE port (source port from the probe\'s), answers get the real back; a route without its port is dropped', (t) => {
  const syn = check(t, egress, 'egress', probe(GUE));
  t.is(syn.want.kind, 'encap');
  t.is(syn.out.length, probe(GUE).length + 28);
  t.is(syn.out[14 + 9], 17, 'outer protocol UDP');
  t.is(syn.out.readUInt16BE(14 + 20 + 0), 0xc000 | (GUE.sourcePort & 0x3fff));
  t.is(syn.out.readUInt16BE(14 + 20 + 2), 6080, 'to the GUE port');
  t.is(syn.out.readUInt16BE(14 + 20 + 4), probe(GUE).length - 14 + 8, 'UDP length: the probe + 8');
  t.is(syn.out[14 + 28] >> 4, 4, 'GUE variant 1: the UDP payload is the IPv4 probe itself');
  t.is(check(t, egress, 'egress', probe(GUE, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n')).want.kind, 'encap');
  t.is(check(t, ingress, 'ingress', answer(GUE)).want.kind, 'rewrite');
  t.is(check(t, egress, 'egress', probe(GUE_NO_PORT)).action, TcAction.shot);
});

// ---------------------------------------------------------------- the named defects

const damaged: Array<[string, () => Buffer]> = [
  ['IPv4 version 6 in an IPv4 frame', () => { const f = probe(IPIP); f[14] = 0x65; return fixIpv4Checksum(f); }],
  ['a first fragment (MF)', () => probe(IPIP, TCP_FLAGS.SYN, '', { df: false, mf: true })],
  ['a later fragment whose payload looks like the probe\'s ports', () => probe(L2, TCP_FLAGS.SYN, '', { df: false, fragOffset: 3 })],
  ['total length beyond the frame', () => { const f = probe(IPIP); f.writeUInt16BE(f.length - 14 + 4, 16); return fixIpv4Checksum(f); }],
  ['total length shorter than IPv4 + TCP headers', () => { const f = probe(IPIP); f.writeUInt16BE(20, 16); return fixIpv4Checksum(f); }],
];
for (const [name, build] of damaged) {
  test(`defect: a probe-shaped packet that is not a whole IPv4 TCP packet passes untouched: ${name}`, (t) => {
    const f = build();
    const want = expected('egress', f, ROUTES);
    t.is(want.kind, 'pass');
    const r = egress.testRun({ data: f, dataOutSize: f.length + 256 });
    t.is(r.retval, TcAction.ok);
    t.deepEqual(r.data, f);
    // the same damage on an answer
    const a = answer(L2);
    a.set(f.subarray(14, 22), 14); // version/IHL, TOS, length, id, flags of the damaged header
    const fixed = fixIpv4Checksum(a);
    const ri = ingress.testRun({ data: fixed, dataOutSize: fixed.length + 256 });
    t.deepEqual(ri.data, fixed, 'ingress');
  });
}

// ---------------------------------------------------------------- the suite

const EGRESS_KINDS: Record<string, Buffer> = {
  'probe SYN l2': probe(L2),
  'probe SYN ipip': probe(IPIP),
  'probe request ipip, own source': probe(IPIP_NO_SRC, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n'),
  'probe RST l2': probe(L2, TCP_FLAGS.RST | TCP_FLAGS.ACK),
  'probe SYN unknown encap': probe(UNKNOWN),
  'probe SYN ipopt': probe(OPT),
  'probe SYN gue': probe(GUE),
  'probe request gue': probe(GUE, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n'),
  'probe SYN gue without port': probe(GUE_NO_PORT),
  'probe request ipopt': probe(OPT, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n'),
  'other TCP': tcp(NODE, L2.real, 40000, L2.port, TCP_FLAGS.SYN),
};
const INGRESS_KINDS: Record<string, Buffer> = {
  'answer SYN-ACK l2': answer(L2),
  'answer data ipip': answer(IPIP, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'HTTP/1.0 200 OK\r\n\r\n'),
  'answer RST ipip': answer(IPIP_NO_SRC, TCP_FLAGS.RST),
  'answer SYN-ACK ipopt': answer(OPT),
  'answer SYN-ACK gue': answer(GUE),
  'answer from the real ipopt': unrewritten(OPT),
  'other TCP from a VIP': tcp(L2.vip, NODE, L2.port, 40000, TCP_FLAGS.SYN | TCP_FLAGS.ACK),
};

for (const [which, kinds, seed] of [['egress', EGRESS_KINDS, 0x3000], ['ingress', INGRESS_KINDS, 0x4000]] as const) {
  test(`hostile suite: vip_probe_${which}: truncations, mutations and ${FLIPS_PER_PROGRAM} bit flips keep to docs/health.md`, (t) => {
    const prog = which === 'egress' ? egress : ingress;
    const named = Object.entries(kinds).flatMap(([k, f]) =>
      [{ name: 'as built', frame: f }, ...truncations(f), ...mutations(f)].map((x) => ({ name: `${k}: ${x.name}`, frame: x.frame })));
    const per = Math.ceil(FLIPS_PER_PROGRAM / Object.keys(kinds).length);
    const flips = Object.entries(kinds).flatMap(([k, f], i) => bitFlips(f, seed + i, per).map((x) => ({ name: `${k}: ${x.name}`, frame: x.frame })));
    t.true(flips.length >= FLIPS_PER_PROGRAM);
    const a = fuzz(prog, which, ROUTES, named);
    const b = fuzz(prog, which, ROUTES, flips);
    console.log(`vip_probe_${which}: ${a.runs} truncations/mutations ${JSON.stringify(a.actions)} ${JSON.stringify(a.outcomes)}; ` +
      `${b.runs} bit flips ${JSON.stringify(b.actions)} ${JSON.stringify(b.outcomes)}`);
    t.deepEqual([...a.problems, ...b.problems].slice(0, 20), []);
    // every path of the program was reached by the mutated and flipped frames too (the suite is not all passes)
    const reached = Object.keys({ ...a.outcomes, ...b.outcomes }).map((k) => k.split(':')[0]);
    for (const kind of which === 'egress' ? ['pass', 'rewrite', 'encap', 'option', 'shot'] : ['pass', 'rewrite', 'shot'])
      t.true(reached.includes(kind), `${kind} reached`);
  });
}

// ---------------------------------------------------------------- IPv6 (l2, ipip)

/** What may come out of a v6 frame: the frame itself, or (on a route) the frame with one address rewritten and the
 * TCP checksum exactly as valid as it came, ipip behind a whole outer IPv6 header to the real whose payload length is
 * the probe's IP length (bytes after it, a trailer, stay after it, as for IPv4). */
function v6Problems(which: 'egress' | 'ingress', f: Buffer, action: number, out: Buffer): string[] {
  const i = ipView(f, 14);
  const sport = f.length >= 58 ? f.readUInt16BE(54) : -1;
  const dport = f.length >= 58 ? f.readUInt16BE(56) : -1;
  // ipopt: an answer from the real's own address and targetPort (no backend rewrite) is dropped, nothing else is
  const raw = which === 'ingress' && i && i.family === 6 && i.proto === 6 &&
    ROUTES6.find((x) => x.encap === 'ipopt' && i.src.equals(ipBytes(x.real)) && sport === x.port && dport === x.sourcePort);
  if (action === TcAction.shot && raw) return [];
  if (action !== TcAction.ok) return [`action ${action}`];
  if (out.equals(f)) return [];
  if (!i || i.family !== 6) return ['changed a frame that is no IPv6 packet'];
  const r = which === 'egress'
    ? ROUTES6.find((x) => i.dst.equals(ipBytes(x.real)) && dport === x.port && sport === x.sourcePort)
    : ROUTES6.find((x) => i.src.equals(ipBytes(x.vip)) && sport === (x.vipPort ?? x.port) && dport === x.sourcePort);
  if (!r) return ['changed a frame of no route'];
  if (r.encap === 'ipopt' && which === 'egress') {
    // the SYN with the 24-byte header (next header 6, length 2, type 0x1b, 20, VIP, port, 0) after the fixed header
    if ((f[14 + 40 + 13]! & 0x12) !== 0x02) return ['ipopt: a segment after the SYN changed'];
    const ext = Buffer.from([6, 2, 0x1b, 20, ...ipBytes(r.vip), r.vipPort! >> 8, r.vipPort! & 0xff, 0, 0]);
    const hdr = Buffer.from(f.subarray(14, 54));
    hdr[6] = 60;
    hdr.writeUInt16BE(hdr.readUInt16BE(4) + 24, 4);
    const want = Buffer.concat([f.subarray(0, 14), hdr, ext, f.subarray(54)]);
    return out.equals(want) ? [] : ['ipopt: not the SYN with the option header'];
  }
  let packet = out;
  if (which === 'egress' && r.encap === 'ipip') {
    const o = ipView(out, 14);
    if (!o || o.family !== 6 || o.proto !== 41 || o.ipLen !== i.ipLen + 40 || o.ipLen > out.length - 14 || !o.dst.equals(ipBytes(r.real)) || !o.src.equals(ipBytes(r.outerSource!)))
      return ['outer IPv6 header'];
    packet = Buffer.concat([out.subarray(0, 14), out.subarray(54)]);
  }
  if (which === 'egress' && r.encap === 'gue') {
    // outer IPv6 + UDP (the probe's source port's low 14 bits over 0xc000, to the GUE port, length = the outer payload),
    // the UDP checksum as valid as the probe's TCP checksum came (lb_gue6_csum does not sum the probe itself)
    const o = ipView(out, 14);
    if (!o || o.family !== 6 || o.proto !== 17 || o.ipLen !== i.ipLen + 48 || o.ipLen > out.length - 14 || !o.dst.equals(ipBytes(r.real)) || !o.src.equals(i.src))
      return ['outer IPv6 header'];
    if (out.readUInt16BE(54) !== (0xc000 | (sport & 0x3fff)) || out.readUInt16BE(56) !== r.guePort || out.readUInt16BE(58) !== o.ipLen - 40)
      return ['outer UDP header'];
    packet = Buffer.concat([out.subarray(0, 14), out.subarray(62)]);
    const p = ipView(packet, 14);
    if (i.l4Ok !== null && p && p.l4Ok !== null && o.l4Ok !== p.l4Ok) return [`outer UDP checksum ${p.l4Ok ? 'wrong' : 'laundered'}`];
  }
  const want = Buffer.from(f);
  ipBytes(which === 'egress' ? r.vip : r.real).copy(want, which === 'egress' ? 14 + 24 : 14 + 8);
  if (which === 'ingress' && r.encap === 'ipopt') want.writeUInt16BE(r.port, 54);
  for (let k = 0; k < want.length; k++) if (k !== 14 + 40 + 16 && k !== 14 + 40 + 17 && want[k] !== packet[k]) return [`byte ${k} changed`];
  if (packet.length !== want.length) return ['length changed'];
  const p = ipView(packet, 14)!;
  if (i.l4Ok !== null && p.l4Ok !== i.l4Ok) return [`TCP checksum ${i.l4Ok ? 'broken' : 'laundered'}`];
  return [];
}

test('hostile suite IPv6: truncations, mutations and bit flips of v6 probes and answers: only the route\'s address changes, checksums as valid as they came', (t) => {
  const [L26, IPIP6, OPT6, GUE6] = ROUTES6 as [VipProbeRoute, VipProbeRoute, VipProbeRoute, VipProbeRoute];
  const p6 = (r: VipProbeRoute, flags: number = TCP_FLAGS.SYN, payload = '') => tcp(NODE6, r.real, r.sourcePort, r.port, flags, payload);
  const a6 = (r: VipProbeRoute, flags: number = TCP_FLAGS.SYN | TCP_FLAGS.ACK, payload = '') => tcp(r.vip, NODE6, r.vipPort ?? r.port, r.sourcePort, flags, payload);
  for (const [which, prog, kinds] of [
    ['egress', egress, { 'v6 SYN l2': p6(L26), 'v6 request ipip': p6(IPIP6, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n'),
      'v6 SYN ipopt': p6(OPT6), 'v6 SYN gue': p6(GUE6), 'v6 request gue': p6(GUE6, TCP_FLAGS.ACK | TCP_FLAGS.PSH, 'GET / HTTP/1.0\r\n\r\n') }],
    ['ingress', ingress, { 'v6 SYN-ACK l2': a6(L26), 'v6 data ipip': a6(IPIP6, TCP_FLAGS.ACK, 'HTTP/1.0 200 OK\r\n\r\n'),
      'v6 SYN-ACK ipopt': a6(OPT6), 'v6 SYN-ACK gue': a6(GUE6), 'v6 SYN-ACK ipopt from the real': tcp(OPT6.real, NODE6, OPT6.port, OPT6.sourcePort, TCP_FLAGS.SYN | TCP_FLAGS.ACK) }],
  ] as const) {
    const frames = Object.entries(kinds).flatMap(([k, f], n) => [{ name: `${k}: as built`, frame: f }, ...truncations(f), ...mutations(f),
      ...bitFlips(f, 0x5000 + n, 2000)].map((x) => ({ name: `${k}: ${x.name}`, frame: x.frame })));
    const problems: string[] = [];
    const counts: Record<string, number> = {};
    for (const { name, frame: f } of frames) {
      let r;
      try {
        r = prog.testRun({ data: f, dataOutSize: f.length + 256 });
      } catch (e) {
        if ((e as { code?: string }).code !== 'EINVAL' || f.length >= 14 + 40) throw e;
        continue;
      }
      const kind = r.data.equals(f) ? 'unchanged' : 'changed';
      counts[kind] = (counts[kind] ?? 0) + 1;
      for (const p of v6Problems(which, f, r.retval, r.data)) if (problems.length < 20) problems.push(`${name}: ${p}`);
    }
    console.log(`vip_probe_${which} IPv6: ${JSON.stringify(counts)}`);
    t.deepEqual(problems, [], which);
    t.true((counts.changed ?? 0) > 0 && (counts.unchanged ?? 0) > 0, JSON.stringify(counts));
  }
  // and byte for byte on the frames as built
  const e = egress.testRun({ data: p6(L26), dataOutSize: 512 });
  t.is(e.data.subarray(14 + 24, 14 + 40).toString('hex'), ipBytes(L26.vip).toString('hex'), 'l2: destination the VIP');
  const tunnel = egress.testRun({ data: p6(IPIP6), dataOutSize: 512 });
  t.is(tunnel.data.length, p6(IPIP6).length + 40, 'ipip: 40 bytes of outer header');
  t.is(tunnel.data.readUInt16BE(12), 0x86dd);
  const opt = egress.testRun({ data: p6(OPT6), dataOutSize: 512 });
  t.is(opt.data.length, p6(OPT6).length + 24, 'ipopt: 24 bytes of destination options');
  t.is(opt.data[14 + 6], 60);
  const gue = egress.testRun({ data: p6(GUE6), dataOutSize: 512 });
  t.is(gue.data.length, p6(GUE6).length + 48, 'gue: 40 bytes of outer header and 8 of UDP');
  t.is(gue.data[14 + 6], 17);
  t.is(gue.data.readUInt16BE(14 + 40 + 2), 6080);
  t.true(ipView(gue.data, 14)!.l4Ok, 'gue: the outer UDP checksum is right (the probe\'s TCP checksum was)');
  t.is(ingress.testRun({ data: tcp(OPT6.real, NODE6, OPT6.port, OPT6.sourcePort, TCP_FLAGS.SYN | TCP_FLAGS.ACK) }).retval, TcAction.shot,
    'ipopt: an answer straight from the real is dropped');
});
