// QUIC connection-ID routing in xdp_lb through BPF_PROG_TEST_RUN (docs/datapath.md "QUIC connection IDs"), output
// frames byte for byte. Every service's ring names one real only, so a packet that went by the table is told from
// one routed by its connection ID by the real it reaches:
//   - short headers with a server id in CID versions 1, 2 and 3, and v1/v2 Handshake packets, reach the id's real
//     (IPv4 and IPv6), also when the connection table names another real for the 5-tuple;
//   - Initial and 0-RTT (the client's CID), Retry and version negotiation (server-only), unknown versions, CID
//     version 0 or server id 0, an id the service does not have (another service's too) go by the table;
//   - hostile variants: DCID lengths 0, 7, 21 and 255, a DCID running past the datagram, short and long headers cut
//     at every byte before the server id, an empty datagram: all forwarded by the table, each counted once, no drop,
//     no XDP_ABORTED;
//   - a table change (the ring moves to another real) and a server id taken out (its real unhealthy) behave as the
//     docs say; a UDP listener of a service without the routing never reads the CID.
// The program runs in a namespace of its own (test/lib/xdp-lab.ts) so bpf_fib_lookup has known neighbours.
import test from 'ava';
import { frame, hex, ipPacket, mac, type EthSpec } from '../lib/packets.js';
import { LAB, runStateCases, teardownLab, type CaseResult } from '../lib/xdp-lab.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { LONG_TYPE, QUIC_V1, QUIC_V2, cidWithServerId, quicLong, quicShort, quicVersionNegotiation } from '../lib/quic.js';
import type { DesiredState } from '../../src/render/state.js';

const TAG = 'xquic';
const REALS: Record<number, string> = { 1: '198.51.100.11', 2: '198.51.100.12', 3: '198.51.100.13', 4: '2001:db8:2::11', 5: '2001:db8:2::12' };
const ring7 = (id: number) => Array.from({ length: 7 }, () => id);
const V4 = '203.0.113.20'; // service 1: UDP 443 with routing (and UDP 444 of service 3 without)
const V6 = '2001:db8:f::20'; // service 2
const CLIENT = '192.0.2.50';
const CLIENT6 = '2001:db8:c::50';
const ID16 = 1000; // CID v1 -> real 2
const ID24 = 0x123456; // CID v2 -> real 3
const ID32 = 0xdeadbeef; // CID v3 -> real 2
const ID6 = 7; // service 2: CID v1 -> real 5

const services = (opts: { ring1?: number; ids1?: Record<number, number> } = {}): SvcSpec[] => [
  { id: 1, vip: V4, forwarding: 'dsr-l2', ports: [{ port: 443, protocol: 'UDP' }], ring: ring7(opts.ring1 ?? 1),
    quic: opts.ids1 ?? { [ID16]: 2, [ID24]: 3, [ID32]: 2 } },
  { id: 2, vip: V6, forwarding: 'dsr-l2', ports: [{ port: 443, protocol: 'UDP' }], ring: ring7(4), quic: { [ID6]: 5 } },
  { id: 3, vip: V4, forwarding: 'dsr-l2', ports: [{ port: 444, protocol: 'UDP' }], ring: ring7(1) },
];
const state = (opts: Parameters<typeof services>[0] = {}): DesiredState =>
  makeState({ reals: REALS, services: services(opts), addresses: ['198.51.100.1', '2001:db8:2::1'] });
const STATES = {
  base: state(),
  // the table moves every new flow of service 1 to real 3
  moved: state({ ring1: 3 }),
  // real 2 unhealthy: render leaves its server ids out
  down: state({ ring1: 3, ids1: { [ID24]: 3 } }),
};

type Counter = 'quic_routed' | 'quic_initial' | 'quic_no_id' | 'quic_unknown_id' | 'quic_malformed' | 'none';
/** sent: the frame as the real gets it before its MACs are rewritten (default: the input) */
interface Case { name: string; state: keyof typeof STATES; keepCt?: boolean; input: Buffer; sent?: Buffer; real: number; quic: Counter }

const ETH_IN: EthSpec = { dst: LAB.lbA.mac, src: LAB.clientMac };
let port = 50000;
const udp = (payload: Buffer, opts: { dst?: string; dport?: number; sport?: number } = {}) => {
  const dst = opts.dst ?? V4;
  const src = dst.includes(':') ? CLIENT6 : CLIENT;
  return frame(ETH_IN, ipPacket({ src, dst, l4: { udp: { sport: opts.sport ?? port++, dport: opts.dport ?? 443, payload } } }));
};
/** dsr-l2 output: MACs rewritten, the rest byte-identical */
const l2Out = (input: Buffer, real: number) => Buffer.concat([mac(LAB.neighbours[REALS[real]!]!), mac(LAB.lbA.mac), input.subarray(12)]);

const cid1 = cidWithServerId(1, ID16);
const hs = (version: number, dcid: Buffer, extra: Partial<Parameters<typeof quicLong>[0]> = {}) =>
  quicLong({ type: version === QUIC_V2 ? LONG_TYPE.v2.handshake : LONG_TYPE.v1.handshake, version, dcid, ...extra });
const short = quicShort(cid1);
const handshake = hs(QUIC_V1, cid1);

const cases: Case[] = [
  // routed by the server id
  { name: 'short header, CID v1 (16-bit id)', state: 'base', input: udp(short), real: 2, quic: 'quic_routed' },
  { name: 'short header, CID v2 (24-bit id)', state: 'base', input: udp(quicShort(cidWithServerId(2, ID24))), real: 3, quic: 'quic_routed' },
  { name: 'short header, CID v3 (32-bit id)', state: 'base', input: udp(quicShort(cidWithServerId(3, ID32, 18))), real: 2, quic: 'quic_routed' },
  { name: 'short header of exactly 1 + 8 bytes', state: 'base', input: udp(quicShort(cid1, Buffer.alloc(0))), real: 2, quic: 'quic_routed' },
  { name: 'QUIC v1 Handshake', state: 'base', input: udp(handshake), real: 2, quic: 'quic_routed' },
  { name: 'QUIC v2 Handshake (type 3)', state: 'base', input: udp(hs(QUIC_V2, cidWithServerId(2, ID24))), real: 3, quic: 'quic_routed' },
  { name: 'Handshake with a 20-byte DCID', state: 'base', input: udp(hs(QUIC_V1, cidWithServerId(1, ID16, 20))), real: 2, quic: 'quic_routed' },
  { name: 'Handshake whose DCID ends the datagram', state: 'base', input: udp(quicLong({ type: 0x20, version: QUIC_V1, dcid: cidWithServerId(1, ID16, 12), scid: Buffer.alloc(0), rest: Buffer.alloc(0) }).subarray(0, 18)), real: 2, quic: 'quic_routed' },
  { name: 'IPv6: short header', state: 'base', input: udp(quicShort(cidWithServerId(1, ID6)), { dst: V6 }), real: 5, quic: 'quic_routed' },
  // the client's CID, server-only packets, unknown versions: the table
  { name: 'v1 Initial (client-chosen DCID that happens to carry an id)', state: 'base', input: udp(quicLong({ type: LONG_TYPE.v1.initial, version: QUIC_V1, dcid: cid1 })), real: 1, quic: 'quic_initial' },
  { name: 'v1 0-RTT', state: 'base', input: udp(quicLong({ type: LONG_TYPE.v1.zeroRtt, version: QUIC_V1, dcid: cid1 })), real: 1, quic: 'quic_initial' },
  { name: 'v2 Initial (type 1)', state: 'base', input: udp(quicLong({ type: LONG_TYPE.v2.initial, version: QUIC_V2, dcid: cid1 })), real: 1, quic: 'quic_initial' },
  { name: 'v2 0-RTT (type 2, the v1 Handshake type)', state: 'base', input: udp(quicLong({ type: LONG_TYPE.v2.zeroRtt, version: QUIC_V2, dcid: cid1 })), real: 1, quic: 'quic_initial' },
  { name: 'v1 Retry (server-only)', state: 'base', input: udp(quicLong({ type: LONG_TYPE.v1.retry, version: QUIC_V1, dcid: cid1 })), real: 1, quic: 'quic_no_id' },
  { name: 'v2 Retry (type 0, server-only)', state: 'base', input: udp(quicLong({ type: LONG_TYPE.v2.retry, version: QUIC_V2, dcid: cid1 })), real: 1, quic: 'quic_no_id' },
  { name: 'version negotiation (version 0)', state: 'base', input: udp(quicVersionNegotiation(cid1, Buffer.alloc(8, 1))), real: 1, quic: 'quic_no_id' },
  { name: 'Handshake of an unknown version (draft-29)', state: 'base', input: udp(hs(0xff00001d, cid1)), real: 1, quic: 'quic_no_id' },
  { name: 'short header, CID version 0', state: 'base', input: udp(quicShort(cidWithServerId(0, 0))), real: 1, quic: 'quic_no_id' },
  { name: 'short header, CID v1 with server id 0', state: 'base', input: udp(quicShort(cidWithServerId(1, 0))), real: 1, quic: 'quic_no_id' },
  { name: 'short header with an id the service does not have', state: 'base', input: udp(quicShort(cidWithServerId(1, 4242))), real: 1, quic: 'quic_unknown_id' },
  { name: "short header with another service's id", state: 'base', input: udp(quicShort(cidWithServerId(1, ID6))), real: 1, quic: 'quic_unknown_id' },
  { name: 'IPv6: an unknown id goes by the table', state: 'base', input: udp(quicShort(cidWithServerId(1, ID16)), { dst: V6 }), real: 4, quic: 'quic_unknown_id' },
  // hostile: bad CID lengths, truncations
  { name: 'Handshake with DCID length 0', state: 'base', input: udp(hs(QUIC_V1, cid1, { dcidLength: 0 })), real: 1, quic: 'quic_malformed' },
  { name: 'Handshake with DCID length 7 (below 8)', state: 'base', input: udp(hs(QUIC_V1, cidWithServerId(1, ID16, 7))), real: 1, quic: 'quic_malformed' },
  { name: 'Handshake with DCID length 21 (over 20)', state: 'base', input: udp(hs(QUIC_V1, cidWithServerId(1, ID16, 21))), real: 1, quic: 'quic_malformed' },
  { name: 'Handshake with DCID length 255', state: 'base', input: udp(hs(QUIC_V1, cid1, { dcidLength: 255 })), real: 1, quic: 'quic_malformed' },
  { name: 'Handshake whose DCID runs past the datagram', state: 'base', input: udp(Buffer.from(handshake.subarray(0, 6 + 8 + 3)).fill(12, 5, 6)), real: 1, quic: 'quic_malformed' },
  ...Array.from({ length: 9 }, (_, n): Case => ({ name: `short header cut to ${n} bytes`, state: 'base', input: udp(short.subarray(0, n)), real: 1, quic: 'quic_malformed' })),
  // the bytes after the IP packet are cut before the parser looks: a server id there is never read
  { name: 'short header cut before its server id, the rest in Ethernet trailer bytes', state: 'base',
    input: Buffer.concat([udp(short.subarray(0, 3), { sport: 40005 }), short.subarray(3)]), sent: udp(short.subarray(0, 3), { sport: 40005 }), real: 1, quic: 'quic_malformed' },
  ...[1, 5, 6, 9, 13].map((n): Case => ({ name: `Handshake cut to ${n} bytes`, state: 'base', input: udp(handshake.subarray(0, n)), real: 1, quic: 'quic_malformed' })),
  // a listener without routing never reads the CID
  { name: 'a UDP listener of a service without routing: the table, no QUIC counter', state: 'base', input: udp(short, { dport: 444 }), real: 1, quic: 'none' },
  // the connection ID wins over the connection table: a flow the table sent to real 1, then its server's CID
  { name: 'a 5-tuple first seen with an Initial goes by the table', state: 'base', input: udp(quicLong({ type: 0, version: QUIC_V1, dcid: cid1 }), { sport: 40001 }), real: 1, quic: 'quic_initial' },
  { name: '... its next packet (short header) follows the CID, not the connection table', state: 'base', keepCt: true, input: udp(short, { sport: 40001 }), real: 2, quic: 'quic_routed' },
  // a table change: the CID still names real 2; a packet without one follows the new ring
  { name: 'table moved: short header keeps its real', state: 'moved', input: udp(short, { sport: 40002 }), real: 2, quic: 'quic_routed' },
  { name: 'table moved: the same client from another port (migration) keeps its real', state: 'moved', input: udp(short, { sport: 40003 }), real: 2, quic: 'quic_routed' },
  { name: 'table moved: an Initial follows the new ring', state: 'moved', input: udp(quicLong({ type: 0, version: QUIC_V1, dcid: cid1 })), real: 3, quic: 'quic_initial' },
  // real 2 unhealthy: its ids are gone, its connections go by the table
  { name: 'server id of an unhealthy real: the table', state: 'down', input: udp(short, { sport: 40004 }), real: 3, quic: 'quic_unknown_id' },
  { name: 'the ids of the healthy reals still route', state: 'down', input: udp(quicShort(cidWithServerId(2, ID24))), real: 3, quic: 'quic_routed' },
];

let results: Promise<{ byCase: Map<Case, CaseResult>; applies: any[]; lives: Record<string, any> }>;

test.before(() => {
  results = runStateCases(TAG, cases, (state) => stateToJson(STATES[state]));
  results.catch(() => undefined);
});

test.after.always(() => teardownLab(TAG));

test('every apply converged; readLive gives back the server ids and listener flags', async (t) => {
  const { applies, lives } = await results;
  t.is(applies.length, Object.keys(STATES).length);
  for (const a of applies) t.falsy(a.error, a.error);
  for (const [name, want] of Object.entries(STATES)) {
    const l = lives[name];
    t.falsy(l.error, l.error);
    t.deepEqual(l.live.quicServers, want.services.flatMap((s) => (s.quic?.servers ?? []).map((q) => ({ serviceId: s.id, ...q }))), name);
    t.deepEqual(l.live.vips, want.vips, name);
  }
  t.deepEqual(lives.base.live.vips.map((v: any) => [v.port, v.quic ?? false]), [[443, true], [444, false], [443, true]]);
});

const QUIC_COUNTERS = ['quic_routed', 'quic_initial', 'quic_no_id', 'quic_unknown_id', 'quic_malformed'];

for (const c of cases) {
  test(`quic: ${c.name}`, async (t) => {
    const r = (await results).byCase.get(c)!;
    t.falsy(r.error, r.error);
    t.is(r.retval, 3, `action ${r.retval}, expected XDP_TX`);
    t.is(hex(Buffer.from(r.data, 'hex')), hex(l2Out(c.sent ?? c.input, c.real)), `to real ${c.real}`);
    t.is(r.counters.tx, 1);
    for (const name of QUIC_COUNTERS) t.is(r.counters[name] ?? 0, name === c.quic ? 1 : 0, `${name}: ${JSON.stringify(r.counters)}`);
    // a packet routed by its CID is neither a connection-table hit nor a miss; one that went by the table is one of them
    const table = (r.counters.ct_hit ?? 0) + (r.counters.ct_miss ?? 0);
    t.is(table, c.quic === 'quic_routed' ? 0 : 1, JSON.stringify(r.counters));
    t.false(Object.keys(r.counters).some((k) => k.startsWith('drop_')), JSON.stringify(r.counters));
  });
}
