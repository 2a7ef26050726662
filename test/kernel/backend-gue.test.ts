// GUE (IP in UDP, the dsr-gue encap) on the backend's TC ingress program (build/bpf/tc_backend.o) through
// BPF_PROG_TEST_RUN: a table of frames with the action and the output expected byte for byte (the inner packet, or
// the frame untouched), the counter that must move, and the drops equal to the drop counters. docs/backend.md "GUE".
import test from 'ava';
import { TcAction, type BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { STAT_NAMES, VIP_FLAG_IPIP, encodeVipKey, encodeVipValue } from '../../src/bpf/backend/codec.js';
import { eth, gueFrame, ipPacket, encapFrame, type L4Spec } from '../lib/packets-backend.js';
import { ipv4Header, IPPROTO } from '../lib/packets.js';
import { addTunnelVips, backendStats, loadBackendProgs } from '../lib/backend-prog.js';
import { BACKEND } from '../lib/hostile-setups.js';

const { v4: V4, v6: V6, vipPort: VIP_PORT, targetPort: TARGET_PORT } = BACKEND;
const GUE_PORT = 6080;
const OTHER_GUE_PORT = 9999; // the port of a VIP whose address entry names another one
const OTHER_VIP4 = '192.0.2.30';
const DROP_STATS = ['adjust_fail', 'rewrite_fail', 'bad_ip_csum', 'decap_bad_outer', 'decap_not_allowed'] as const;

let obj: BpfObject;
let ingress: BpfProgram;

test.before(async () => {
  ({ obj, ingress } = await loadBackendProgs(V4, V6));
  addTunnelVips(obj, { v4: V4, v6: V6 }, VIP_PORT, TARGET_PORT, GUE_PORT);
  obj.map('be_vips').update(encodeVipKey({ address: OTHER_VIP4, family: 4, port: 0, protocol: null }), encodeVipValue({ flags: VIP_FLAG_IPIP, targetPort: OTHER_GUE_PORT }));
});
test.after.always(() => obj?.close());

const tcp = (sport: number, dport: number, payload = 'hello'): L4Spec => ({ proto: 'TCP', sport, dport, payload: Buffer.from(payload) });
const udp = (sport: number, dport: number, payload = 'ping'): L4Spec => ({ proto: 'UDP', sport, dport, payload: Buffer.from(payload) });

interface Case { name: string; input: Buffer; action: 'ok' | 'shot'; output?: Buffer; counter?: string }
const cases: Case[] = [];
const decap = (name: string, input: Buffer, inner: Buffer, counter: string) =>
  cases.push({ name, input, action: 'ok', output: Buffer.concat([input.subarray(0, 12), Buffer.from([inner[0]! >> 4 === 6 ? 0x86 : 0x08, inner[0]! >> 4 === 6 ? 0xdd : 0x00]), inner]), counter });
const untouched = (name: string, input: Buffer) => cases.push({ name, input, action: 'ok', output: input });
const refused = (name: string, input: Buffer, counter: string) => cases.push({ name, input, action: 'shot', counter });

// ---- decapsulated: the output is the inner packet, byte for byte
const in4tcp = ipPacket(V4.client, V4.ipipVip, tcp(40000, VIP_PORT));
const in4udp = ipPacket(V4.client, V4.ipipVip, udp(40001, 53));
const in6tcp = ipPacket(V6.client, V6.ipipVip, tcp(40002, VIP_PORT));
const in6udp = ipPacket(V6.client, V6.ipipVip, udp(40003, 53));
decap('GUE over IPv4, TCP inside', gueFrame(V4.lb, V4.real, in4tcp), in4tcp, 'decap_gue4');
decap('GUE over IPv4, UDP inside', gueFrame(V4.lb, V4.real, in4udp), in4udp, 'decap_gue4');
decap('GUE over IPv6, TCP inside', gueFrame(V6.lb, V6.real, in6tcp), in6tcp, 'decap_gue6');
decap('GUE over IPv6, UDP inside', gueFrame(V6.lb, V6.real, in6udp), in6udp, 'decap_gue6');
decap('GUE: IPv6 inside IPv4 (the Ethernet type follows the inner packet)', gueFrame(V4.lb, V4.real, in6tcp), in6tcp, 'decap_gue4');
decap('GUE: IPv4 inside IPv6', gueFrame(V6.lb, V6.real, in4tcp), in4tcp, 'decap_gue6');
for (const sport of [49152, 51234, 65535])
  decap(`GUE from outer source port ${sport} (the flow hash's)`, gueFrame(V4.lb, V4.real, in4tcp, GUE_PORT, sport), in4tcp, 'decap_gue4');
decap('GUE to a VIP whose entry names another GUE port, at that port', gueFrame(V4.lb, V4.real, ipPacket(V4.client, OTHER_VIP4, tcp(40004, 80)), OTHER_GUE_PORT),
  ipPacket(V4.client, OTHER_VIP4, tcp(40004, 80)), 'decap_gue4');
{
  // an Ethernet trailer after the outer packet stays (the stack trims it by the inner length, as for ipip)
  const f = Buffer.concat([gueFrame(V4.lb, V4.real, in4tcp), Buffer.alloc(6, 0xee)]);
  cases.push({ name: 'GUE with trailer bytes: decapsulated, trailer kept', input: f, action: 'ok',
    output: Buffer.concat([f.subarray(0, 14), in4tcp, Buffer.alloc(6, 0xee)]), counter: 'decap_gue4' });
}

// ---- not ours: untouched (ordinary UDP to the node, or GUE we do not serve)
untouched('UDP at the GUE port to a VIP not served here', gueFrame(V4.lb, V4.real, ipPacket(V4.client, '192.0.2.99', tcp(40005, 80))));
untouched('GUE at another port than the entry names', gueFrame(V4.lb, V4.real, in4tcp, 6081));
untouched('GUE at the default port to a VIP whose entry names another', gueFrame(V4.lb, V4.real, ipPacket(V4.client, OTHER_VIP4, tcp(40004, 80)), GUE_PORT));
untouched('GUE to an ipopt-only VIP (no address entry)', gueFrame(V4.lb, V4.real, ipPacket(V4.client, V4.optVip, tcp(40006, VIP_PORT))));
untouched('plain UDP at the GUE port whose payload is no IP packet', eth(Buffer.concat([ipv4Header({ src: V4.lb, dst: V4.real, proto: IPPROTO.UDP }, 12),
  Buffer.from([0xc8, 0x00, 0x17, 0xc0, 0x00, 0x0c, 0x00, 0x00, 0x12, 0x34, 0x56, 0x78])])));
untouched('plain UDP to the node (DNS)', eth(ipPacket(V4.client, V4.real, udp(40007, 53))));
untouched('IPv6 plain UDP to the node', eth(ipPacket(V6.client, V6.real, udp(40008, 53))));

// ---- ours but refused: dropped and counted, so no other decapsulator takes it
refused('GUE from an address that is no lb node', gueFrame(V4.client, V4.real, in4tcp), 'decap_not_allowed');
refused('GUE to an address that is not this node', gueFrame(V4.lb, '203.0.113.99', in4tcp), 'decap_not_allowed');
refused('IPv6 GUE from an address that is no lb node', gueFrame(V6.client, V6.real, in6tcp), 'decap_not_allowed');
{
  const f = gueFrame(V4.lb, V4.real, in4tcp);
  f.writeUInt16BE(f.readUInt16BE(14 + 10) ^ 0x0100, 14 + 10);
  refused('GUE whose outer IPv4 header checksum is wrong', f, 'decap_bad_outer');
}
for (const delta of [-1, 1, 8]) {
  const f = gueFrame(V4.lb, V4.real, in4tcp);
  f.writeUInt16BE(f.readUInt16BE(14 + 20 + 4) + delta, 14 + 20 + 4);
  refused(`GUE whose UDP length is off by ${delta}`, f, 'decap_bad_outer');
  const g = gueFrame(V6.lb, V6.real, in6tcp);
  g.writeUInt16BE(g.readUInt16BE(14 + 40 + 4) + delta, 14 + 40 + 4);
  refused(`IPv6 GUE whose UDP length is off by ${delta}`, g, 'decap_bad_outer');
}
{
  // the outer lengths say less than the inner header needs (the inner header is whole in the frame)
  const f = gueFrame(V4.lb, V4.real, in4tcp);
  const fixed = Buffer.concat([f.subarray(0, 14), ipv4Header({ src: V4.lb, dst: V4.real, proto: IPPROTO.UDP, df: true, totalLength: 20 + 8 + 19 }, 0), f.subarray(34)]);
  fixed.writeUInt16BE(8 + 19, 14 + 20 + 4);
  refused('GUE whose outer length leaves less than an inner header', fixed, 'decap_bad_outer');
}

// ---- truncated GUE headers: every cut of a GUE frame is left alone or refused, never decapsulated wrongly
const TRUNCATED: Buffer[] = [];
for (const whole of [gueFrame(V4.lb, V4.real, in4tcp), gueFrame(V6.lb, V6.real, in6udp)])
  for (let cut = 14 + (whole.readUInt16BE(12) === 0x86dd ? 40 : 20); cut < whole.length; cut++) TRUNCATED.push(whole.subarray(0, cut));

const stats = () => backendStats(obj);
const delta = (a: Record<string, number>, b: Record<string, number>) =>
  Object.fromEntries(STAT_NAMES.map((n) => [n, b[n]! - a[n]!]).filter(([, d]) => d !== 0));

for (const c of cases) {
  test.serial(`backend GUE: ${c.name}`, (t) => {
    const before = stats();
    const r = ingress.testRun({ data: c.input, dataOutSize: c.input.length + 256 });
    const moved = delta(before, stats());
    t.is(r.retval, c.action === 'ok' ? TcAction.ok : TcAction.shot);
    if (c.output) t.is(r.data.toString('hex'), c.output.toString('hex'));
    if (c.counter) t.is(moved[c.counter], 1, JSON.stringify(moved));
    const drops = DROP_STATS.reduce((n, s) => n + (moved[s] ?? 0), 0);
    t.is(drops, c.action === 'shot' ? 1 : 0, `drops counted: ${JSON.stringify(moved)}`);
    if (c.action === 'ok' && c.output?.equals(c.input)) t.falsy(moved.decap_gue4 ?? moved.decap_gue6, 'not counted as GUE');
  });
}

test.serial('backend GUE: every truncation of a GUE frame is refused (counted) or left untouched, never decapsulated', (t) => {
  let shot = 0;
  let ok = 0;
  const before = stats();
  for (const f of TRUNCATED) {
    const r = ingress.testRun({ data: f, dataOutSize: f.length + 256 });
    if (r.retval === TcAction.shot) shot++;
    else {
      t.is(r.retval, TcAction.ok);
      t.is(r.data.toString('hex'), f.toString('hex'), `cut at ${f.length}: untouched`);
      ok++;
    }
  }
  const moved = delta(before, stats());
  t.is(DROP_STATS.reduce((n, s) => n + (moved[s] ?? 0), 0), shot, `drops = drop counters ${JSON.stringify(moved)}`);
  t.falsy(moved.decap_gue4 ?? moved.decap_gue6);
  t.true(shot > 0 && ok > 0, `${shot} refused, ${ok} untouched`);
  t.log(`${TRUNCATED.length} truncations: ${shot} refused (decap_bad_outer), ${ok} untouched`);
});

test.serial('backend GUE: ipip to the same VIP still decapsulates (the entry serves both)', (t) => {
  const r = ingress.testRun({ data: encapFrame(V4.lb, V4.real, in4tcp) });
  t.is(r.retval, TcAction.ok);
  t.is(r.data.subarray(14).toString('hex'), in4tcp.toString('hex'));
});
