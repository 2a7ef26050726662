// Connection-state sync between two lb nodes (issue 24; src/reconciler/flows/flow-sync.ts, docs/datapath.md
// "Connection-state sync"): two data planes (own pin roots, the real xdp_lb through BPF_PROG_TEST_RUN) and two real
// authenticated peer channels on 127.0.0.1 inside a test namespace (test/lib/flow-sync-harness.ts). The scenario:
// - established flows on lb-a (a DSR flow and a SNAT translation) are synced to lb-b; the table then moves every new
//   flow to real 2 (real 1 drained) and ECMP moves the flows to lb-b: lb-b sends them on to real 1 (the SNAT one
//   from the same SNAT address and port), and translates real 1's reply; a flow lb-b never heard of goes to real 2;
// - the stale entry of the issue: lb-b recorded real 2 for a 5-tuple while real 1 was out; real 1 comes back, the
//   client reconnects through lb-a (real 1), and lb-b's next segment of that connection goes to real 1 too; lb-b's
//   stale entry is not sent back to lb-a;
// - hostile peers: entries for a VIP or real this node does not have, translations of another SNAT address or of
//   this node's own port range, a port held by another client, malformed and oversize bodies, a forged sender, a
//   message without authentication headers, a recorded message replayed, and a flood over the entry budget are refused and counted (the budget runs on a clock
//   only the steps move, so the counts are exact on a loaded machine too); a replayed batch changes nothing;
// - a drained real's entry is inserted where lb-b holds nothing of the flow (established flows on a drained real
//   continue), never over lb-b's own entry, and never naming a real the VIP does not list;
// - an end of a translation over lb-b's budget waits there and is applied once the budget refills (bounded: the rest
//   is refused and counted);
// - an end queued when a send failed is sent with the resync that follows;
// - a restarted lb-a sends lb-b its whole table.
import test from 'ava';
import { LAB, labNames } from '../lib/xdp-lab.js';
import { flowSyncLab } from '../lib/flow-sync-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import { LB_C_SNAT } from '../lib/flow-sync-harness.js';
import type { DesiredState } from '../../src/render/state.js';
import { ringSlot } from '../../src/bpf/dataplane/flow-hash.js';
import { MAX_AGE_MS, RECENCY_MARGIN_MS } from '../../src/bpf/dataplane/flow-state.js';

const TAG = 'fsync';
const SECRET = 'Zk3q9V0xW1rT8mN2bC4yH6jL5pD7sG0aE3uI9oK1fQ2='; // a test secret (44 base64 chars, 264 bits)
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12' };
const MAC1 = LAB.neighbours[REALS[1]]!;
const MAC2 = LAB.neighbours[REALS[2]]!;
const VIP_DSR = '203.0.113.10';
const VIP_SNAT = '203.0.113.20';
const CLIENT = '192.0.2.1';
const SNAT = LAB.lbA.v4; // one SNAT address shared by both lb nodes, disjoint port ranges
const PORTS = { a: { min: 40000, max: 40999 }, b: { min: 41000, max: 41999 } };
const TX = 3;
const CT_MAX = 4096;
const REAL_SNAT_ONLY = 3; // lb-b's connection table (conntrackMaxEntries of every state)
const FLOOD_MESSAGES = 10;

function state(node: 'a' | 'b', real: 1 | 2 | 'both'): unknown {
  const ring = real === 'both' ? [1, 2, 1, 2, 1, 2, 1] : Array(7).fill(real);
  const s = makeState({ reals: { ...REALS, [REAL_SNAT_ONLY]: '198.51.100.13' }, hashSeed: 7, conntrackMaxEntries: CT_MAX, addresses: [LAB.lbA.v4], services: [
    { id: 1, vip: VIP_DSR, forwarding: 'dsr-l2', ring },
    { id: 2, vip: VIP_SNAT, forwarding: 'snat', ring, ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] },
  ] });
  // both reals stay listed (the other one drained): established flows may still use it
  for (const svc of s.services) {
    const other = real === 1 ? 2 : 1;
    if (real !== 'both' && !svc.reals.some((r) => r.realId === other)) {
      svc.reals.push({ realId: other, address: REALS[other], weight: 1, state: 'drain', healthy: true, entries: 0 });
      svc.reals.sort((x, y) => x.realId - y.realId);
    }
  }
  // a real of the SNAT service only (drained there): a DSR entry naming it names a real its VIP does not have
  s.services.find((x) => x.id === 2)!.reals.push({ realId: REAL_SNAT_ONLY, address: '198.51.100.13', weight: 1, state: 'drain', healthy: true, entries: 0 });
  const d: DesiredState = { ...s, node: `lb-${node}`, snatAddress: SNAT, snatPorts: PORTS[node] };
  return stateToJson(d);
}
const SNAT_B = '198.51.100.3'; // lb-b's own SNAT address in the 'own' states
const STATES = { real1: { a: state('a', 1), b: state('b', 1) }, real2: { a: state('a', 2), b: state('b', 2) },
  both: { a: state('a', 'both'), b: state('b', 'both') },
  // each lb node its own SNAT address, the default port range on both
  own: { a: { ...(state('a', 1) as object), snatPorts: undefined }, b: { ...(state('b', 1) as object), snatAddress: SNAT_B, snatPorts: undefined } } };

const tcp = (vip: string, sport: number, flags: number, dport = 80) => frame({ dst: LAB.lbA.mac, src: LAB.clientMac },
  ipPacket({ src: CLIENT, dst: vip, l4: { tcp: { sport, dport, flags, ack: flags & TCP_FLAGS.ACK ? 1 : 0 } } })).toString('hex');
const SYN = TCP_FLAGS.SYN;
const ACK = TCP_FLAGS.ACK;

const lab = flowSyncLab(TAG);
const { steps, at, add, r } = lab;
const ct = (src: string, dst: string, sport: number, dport: number, realId: number) => [src, dst, sport, dport, 6, realId];
const snatE = (cport: number, snatAddress: string, snatPort: number, realId = 1) => [CLIENT, VIP_SNAT, cport, 80, 6, realId, 8080, snatAddress, snatPort, false];
const ID1 = 1;
/** Longer than lb-b's recency margin (RECENCY_MARGIN_MS, the default): what separates an older choice from a newer one. */
const RECENCY_WAIT_MS = RECENCY_MARGIN_MS + 200;
/** The refresh and deletion scenario's established TCP idle timeout (s), its rounds and their spacing: refreshes come
 * every SHORT_S / 2 s at most, so the rounds leave SHORT_S / 2 - ROUND_MS of slack for a slow machine, and last
 * longer than SHORT_S (an unrefreshed copy expires meanwhile). */
const SHORT_S = 4;
const ROUND_MS = 500;
const REFRESH_ROUNDS = 10;
/** A client port (from `from` on) whose ring slot in the 'both' table ([1, 2, 1, 2, 1, 2, 1], seed 7) holds real 1. */
const pick1Port = (from: number) => {
  for (let p = from; p < from + 100; p++) if ([1, 2, 1, 2, 1, 2, 1][ringSlot({ src: CLIENT, dst: VIP_DSR, sport: p, dport: 80, proto: 6 }, true, 7, 7)] === 1) return p;
  throw new Error('no port for real 1');
};
const PICK1_PORT = pick1Port(9000);
const PICK1_PORT_B = pick1Port(9200);

// ---- established flows survive a move to the other lb node after the table changed
add('apply real1', { op: 'apply', state: 'real1' });
add('b tick 0', { op: 'tick', node: 'b' }); // first contact: lb-b's (empty) table, so lb-a is in sync with it
add('a dsr syn', { op: 'run', node: 'a', data: tcp(VIP_DSR, 5000, SYN) });
add('a dsr ack', { op: 'run', node: 'a', data: tcp(VIP_DSR, 5000, ACK) });
add('a snat syn', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5001, SYN) });
add('a snat ack', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5001, ACK) });
add('a tick 1', { op: 'tick', node: 'a' });
add('b count after sync', { op: 'count', node: 'b' });
add('a dsr syn unsynced', { op: 'run', node: 'a', data: tcp(VIP_DSR, 5002, SYN) });
add('apply real2', { op: 'apply', state: 'real2' });
add('b dsr ack synced', { op: 'run', node: 'b', data: tcp(VIP_DSR, 5000, ACK) });
add('b dsr ack unsynced', { op: 'run', node: 'b', data: tcp(VIP_DSR, 5002, ACK) });
add('b snat ack synced', { op: 'run', node: 'b', data: tcp(VIP_SNAT, 5001, ACK) });
add('b snat reply from real 1', { op: 'snatReply', node: 'b', ofStep: at['a snat syn']!, real: REALS[1], realMac: MAC1, snat: SNAT, realPort: 8080 });
add('b tick 1', { op: 'tick', node: 'b' });

// ---- the stale entry: lb-b picked real 2 while real 1 was out; the reconnect through lb-a picks real 1
add('b dsr syn while real 1 out', { op: 'run', node: 'b', data: tcp(VIP_DSR, 6000, SYN) });
add('apply real1 again', { op: 'apply', state: 'real1' });
add('time passes (real 1 back)', { op: 'wait', ms: RECENCY_WAIT_MS });
add('a dsr reconnect syn', { op: 'run', node: 'a', data: tcp(VIP_DSR, 6000, SYN) });
add('a tick 2', { op: 'tick', node: 'a' });
add('b dsr ack after reconnect', { op: 'run', node: 'b', data: tcp(VIP_DSR, 6000, ACK) });
add('b tick 2', { op: 'tick', node: 'b' });
add('a dsr ack after b tick', { op: 'run', node: 'a', data: tcp(VIP_DSR, 6000, ACK) });

// ---- hostile peers (lb-b's view)
add('replay of a synced entry', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 6000, 80, ID1)], snat: [] } });
add('unknown VIP', { op: 'send', body: { v: 1, ct: [ct(CLIENT, '203.0.113.99', 7000, 80, ID1)], snat: [] } });
add('unknown port of a VIP', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7000, 81, ID1)], snat: [] } });
add('unknown real', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7000, 80, 12345)], snat: [] } });
add('ct entry for a snat listener', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_SNAT, 7000, 80, ID1)], snat: [] } });
add('other SNAT address', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7001, '198.51.100.99', 40500)] } });
add('port of b\'s own range', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7002, SNAT, 41500)] } });
add('valid translation', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7003, SNAT, 40600)] } });
add('port held by another client', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7004, SNAT, 40600)] } });
add('malformed: version', { op: 'send', body: { v: 2, ct: [], snat: [] } });
add('malformed: arity', { op: 'send', body: { v: 1, ct: [[CLIENT, VIP_DSR, 1, 80, 6]], snat: [] } });
add('malformed: address not canonical', { op: 'send', body: { v: 1, ct: [ct('192.0.2.01', VIP_DSR, 1, 80, ID1)], snat: [] } });
add('malformed: port 0', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 0, 80, ID1)], snat: [] } });
add('too many entries', { op: 'send', body: { v: 1, ct: Array.from({ length: 513 }, (_, i) => ct(CLIENT, VIP_DSR, 10000 + i, 80, ID1)), snat: [] } });
add('oversize body', { op: 'sendRaw', times: 1, body: { v: 1, ct: [], snat: [], pad: 'x'.repeat(600 * 1024) } });
// a recorded genuine message sent again byte for byte: the channel refuses the copy before the sync sees it
add('unauthenticated (no MAC, no sender)', { op: 'sendRaw', times: 1, unsealed: true, body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7007, 80, ID1)], snat: [] } });
add('recorded message replayed', { op: 'sendRaw', times: 2, body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7006, 80, ID1)], snat: [] } });
add('forged sender', { op: 'sendForged', secret: 'Qw8e7R6t5Y4u3I2o1P0aSdFgHjKlZxCvBnM9q8W7e6R=', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7005, 80, ID1)], snat: [] } });
// ---- a peer steering flows (F4): lb-b's own entries stay (a listed but drained real, not in the ring, never replaces
// one); a flow lb-b holds nothing of is inserted with any real its service still lists (drained: established flows
// finish on every node), never with a real of another service
add('b own flow to real 1', { op: 'run', node: 'b', data: tcp(VIP_DSR, 7100, SYN) });
add('overwrite with a drained real', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7100, 80, 2)], snat: [] } });
add('pre-seed a drained real', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7101, 80, 2)], snat: [] } });
add('translation to a drained real', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7102, SNAT, 40700, 2)] } });
add('b ack of the pre-seeded flow', { op: 'run', node: 'b', data: tcp(VIP_DSR, 7101, ACK) });
add('the drained real\'s entry again (replay)', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7101, 80, 2)], snat: [] } });
add('entry naming a real of another service', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7104, 80, REAL_SNAT_ONLY)], snat: [] } });
add('b ack of the flow named with another service\'s real', { op: 'run', node: 'b', data: tcp(VIP_DSR, 7104, ACK) });
add('apply both', { op: 'apply', state: 'both' });
add('overwrite with a ring real', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7100, 80, 2)], snat: [] } });
add('b ack of its own flow', { op: 'run', node: 'b', data: tcp(VIP_DSR, 7100, ACK) });
add('new flow to a ring real', { op: 'send', body: { v: 1, ct: [ct(CLIENT, VIP_DSR, 7103, 80, 2)], snat: [] } });
add('b ack of the synced flow', { op: 'run', node: 'b', data: tcp(VIP_DSR, 7103, ACK) });
// ---- the stale entry as the issue met it: the stale real is still in the ring (for other flows). lb-b recorded real 2
// for a 5-tuple while real 1 was out; real 1 is back (both in the ring); the client reconnects through lb-a, whose SYN
// gets the ring's real for it (1). Both entries name a real of the ring: the recency mark decides, lb-a's SYN being
// the newer choice (by more than the margin), so ECMP moving the connection to lb-b finds real 1 there.
add('apply real2 (real 1 out)', { op: 'apply', state: 'real2' });
add('b syn while real 1 out (stale real in ring)', { op: 'run', node: 'b', data: tcp(VIP_DSR, PICK1_PORT, SYN) });
add('apply both again', { op: 'apply', state: 'both' });
add('time passes (real 1 back, both in the ring)', { op: 'wait', ms: RECENCY_WAIT_MS });
add('a reconnect syn (ring pick 1)', { op: 'run', node: 'a', data: tcp(VIP_DSR, PICK1_PORT, SYN) });
add('a tick 2b', { op: 'tick', node: 'a' });
add('b ack after the reconnect (stale real in ring)', { op: 'run', node: 'b', data: tcp(VIP_DSR, PICK1_PORT, ACK) });
add('b tick 2b', { op: 'tick', node: 'b' });
add('a ack after b tick (stale real in ring)', { op: 'run', node: 'a', data: tcp(VIP_DSR, PICK1_PORT, ACK) });
// ---- ages (lb-b's view): a peer's choice replaces lb-b's own only when newer by more than the margin, and only
// with an age that makes sense
add('b own flow (recency)', { op: 'run', node: 'b', data: tcp(VIP_DSR, PICK1_PORT_B, SYN) });
add('older choice from a peer', { op: 'sendAged', ct: ct(CLIENT, VIP_DSR, PICK1_PORT_B, 80, 2), offsetMs: -60_000 });
add('choice at the same moment from a peer', { op: 'sendAged', ct: ct(CLIENT, VIP_DSR, PICK1_PORT_B, 80, 2), offsetMs: 0 });
add('negative age', { op: 'send', body: { v: 1, ct: [[...ct(CLIENT, VIP_DSR, PICK1_PORT_B, 80, 2), -1]], snat: [] } });
add('fractional age', { op: 'send', body: { v: 1, ct: [[...ct(CLIENT, VIP_DSR, PICK1_PORT_B, 80, 2), 0.5]], snat: [] } });
add('age over 7 days', { op: 'send', body: { v: 1, ct: [[...ct(CLIENT, VIP_DSR, PICK1_PORT_B, 80, 2), MAX_AGE_MS + 1]], snat: [] } });
add('age over 7 days, new flow', { op: 'send', body: { v: 1, ct: [[...ct(CLIENT, VIP_DSR, PICK1_PORT_B + 1, 80, 2), MAX_AGE_MS + 1]], snat: [] } });
add('b ack of its own flow (recency)', { op: 'run', node: 'b', data: tcp(VIP_DSR, PICK1_PORT_B, ACK) });
add('time passes (b\'s choice gets old)', { op: 'wait', ms: RECENCY_WAIT_MS });
add('newer choice from a peer', { op: 'sendAged', ct: ct(CLIENT, VIP_DSR, PICK1_PORT_B, 80, 2), offsetMs: RECENCY_WAIT_MS - 50 });
add('the newer choice again (replay)', { op: 'sendAged', ct: ct(CLIENT, VIP_DSR, PICK1_PORT_B, 80, 2), offsetMs: RECENCY_WAIT_MS - 50 });
add('b ack after the newer choice', { op: 'run', node: 'b', data: tcp(VIP_DSR, PICK1_PORT_B, ACK) });
// ---- each lb node its own SNAT address: a moved SNAT flow keeps its owner's address and port; replies go to the owner
add('apply own addresses', { op: 'apply', state: 'own' });
add('a snat syn (own address)', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5101, SYN) });
add('a tick 3', { op: 'tick', node: 'a' });
add('b snat ack of a\'s translation', { op: 'run', node: 'b', data: tcp(VIP_SNAT, 5101, ACK) });
add('b reply to a\'s address', { op: 'snatReply', node: 'b', ofStep: at['a snat syn (own address)']!, real: REALS[1], realMac: MAC1, snat: SNAT, realPort: 8080 });
add('b reply to its own address on a\'s port', { op: 'snatReply', node: 'b', ofStep: at['a snat syn (own address)']!, real: REALS[1], realMac: MAC1, snat: SNAT_B, realPort: 8080 });
add('a reply to its address', { op: 'snatReply', node: 'a', ofStep: at['a snat syn (own address)']!, real: REALS[1], realMac: MAC1, snat: SNAT, realPort: 8080 });
// ---- lb-a lost: lb-b takes its SNAT address over and translates the replies with lb-a's translations only
add('b own snat syn', { op: 'run', node: 'b', data: tcp(VIP_SNAT, 5102, SYN) });
add('b serves a\'s address', { op: 'serve', node: 'b', address: SNAT });
add('b reply to a\'s address (served)', { op: 'snatReply', node: 'b', ofStep: at['a snat syn (own address)']!, real: REALS[1], realMac: MAC1, snat: SNAT, realPort: 8080 });
add('b reply to a\'s address on b\'s own port', { op: 'snatReply', node: 'b', ofStep: at['b own snat syn']!, real: REALS[1], realMac: MAC1, snat: SNAT, realPort: 8080 });
add('b reply to its own address (serving)', { op: 'snatReply', node: 'b', ofStep: at['b own snat syn']!, real: REALS[1], realMac: MAC1, snat: SNAT_B, realPort: 8080 });
add('b reply to an address it does not serve', { op: 'snatReply', node: 'b', ofStep: at['a snat syn (own address)']!, real: REALS[1], realMac: MAC1, snat: LB_C_SNAT, realPort: 8080 });
add('b unserves a\'s address', { op: 'unserve', node: 'b', address: SNAT });
add('a snat fin', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5101, TCP_FLAGS.FIN | ACK) });
add('a tick after fin', { op: 'tick', node: 'a' });
add('a snat syn reopens', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5101, SYN) });
add('a tick after reopen', { op: 'tick', node: 'a' });
add('b reply to a\'s address (no longer served)', { op: 'snatReply', node: 'b', ofStep: at['a snat syn (own address)']!, real: REALS[1], realMac: MAC1, snat: SNAT, realPort: 8080 });
// ---- a peer speaking for another node (F3): only the sender's own SNAT address is accepted
add('translation of a third node\'s address', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7200, LB_C_SNAT, 33000)] } });
add('translation of the receiver\'s own address', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7201, SNAT_B, 30000)] } });
add('translation of the sender\'s address', { op: 'send', body: { v: 1, ct: [], snat: [snatE(7202, SNAT, 33001)] } });

// ---- a flood bigger than lb-b's whole connection table (10 x 512 entries > CT_MAX), all at one moment of lb-b's sync
// clock: only the budget's burst is inserted, so at most that many of lb-b's entries could be evicted; one second of
// the clock later the budget grants exactly one second's worth (the benign rate still goes through)
add('b count before flood', { op: 'count', node: 'b' });
add('idle: budget refilled to its burst', { op: 'advance', ms: 10_000 });
for (let i = 0; i < FLOOD_MESSAGES; i++)
  add(`flood ${i}`, { op: 'send', body: { v: 1, ct: Array.from({ length: 512 }, (_, j) => ct(CLIENT, VIP_DSR, 20000 + i * 512 + j, 80, ID1)), snat: [] } });
add('b count after flood', { op: 'count', node: 'b' });
add('one second later', { op: 'advance', ms: 1000 });
add('flood a second later', { op: 'send', body: { v: 1, ct: Array.from({ length: 512 }, (_, j) => ct(CLIENT, VIP_DSR, 26000 + j, 80, ID1)), snat: [] } });
add('b count after second flood', { op: 'count', node: 'b' });
add('b report', { op: 'report', node: 'b' });

// ---- refresh (each node its own SNAT address, established TCP idle timeout SHORT_S on both): a translation lb-a's
// client keeps using is sent again before lb-b's copy would expire; one nobody uses is not, and expires on lb-b
add('idle again: budget refilled after the floods', { op: 'advance', ms: 10_000 });
add('a short timeout', { op: 'snatTimeout', node: 'a', tcpEstablishedS: SHORT_S });
add('b short timeout', { op: 'snatTimeout', node: 'b', tcpEstablishedS: SHORT_S });
add('a snat syn kept', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5301, SYN) });
add('a snat syn idle', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5302, SYN) });
add('a tick r0', { op: 'tick', node: 'a' });
for (let i = 1; i <= REFRESH_ROUNDS; i++) {
  add(`wait r${i}`, { op: 'wait', ms: ROUND_MS });
  add(`a ack kept ${i}`, { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5301, ACK) });
  add(`a tick r${i}`, { op: 'tick', node: 'a' });
}
add('b sweep r', { op: 'snatSweep', node: 'b' });
add('b has kept', { op: 'snatHas', node: 'b', clientPort: 5301 });
add('b has idle', { op: 'snatHas', node: 'b', clientPort: 5302 });
// ---- deletions (lb-b back to the long timeout: its copies end only when lb-a says so): lb-a's translations expire
// and are swept there; lb-b deletes its copies, except one whose flow moved to lb-b after lb-a's last packet
add('b long timeout', { op: 'snatTimeout', node: 'b', tcpEstablishedS: 7440 });
add('a snat syn ended', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5303, SYN) });
add('a snat syn moved', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5304, SYN) });
add('a tick d0', { op: 'tick', node: 'a' });
add('b has ended (synced)', { op: 'snatHas', node: 'b', clientPort: 5303 });
add('wait d1', { op: 'wait', ms: RECENCY_WAIT_MS });
add('b ack of the moved flow', { op: 'run', node: 'b', data: tcp(VIP_SNAT, 5304, ACK) });
add('wait d2', { op: 'wait', ms: SHORT_S * 1000 });
add('a sweep d', { op: 'snatSweep', node: 'a' });
add('a tick d1', { op: 'tick', node: 'a' });
add('b has ended', { op: 'snatHas', node: 'b', clientPort: 5303 });
add('b has moved', { op: 'snatHas', node: 'b', clientPort: 5304 });
add('b report d', { op: 'report', node: 'b' });
// ---- hostile ends (lb-b's view)
add('b own snat syn 2', { op: 'run', node: 'b', data: tcp(VIP_SNAT, 5305, SYN) });
add('forged end of b\'s own translation', { op: 'sendGone', ofStep: at['b own snat syn 2']!, entry: [...snatE(5305, SNAT, 0), 0, 0] });
add('forged end naming b\'s address', { op: 'sendGone', ofStep: at['b own snat syn 2']!, entry: [...snatE(5305, SNAT_B, 0), 0, 0] });
add('end of a translation of another client', { op: 'sendGone', ofStep: at['a snat syn moved']!, entry: [...snatE(5399, SNAT, 0), 0, 0] });
add('end with a negative idle age', { op: 'sendGone', ofStep: at['a snat syn moved']!, entry: [...snatE(5304, SNAT, 0), 0, -1] });
add('end without an idle age', { op: 'sendGone', ofStep: at['a snat syn moved']!, entry: [...snatE(5304, SNAT, 0), 0] });
add('b has own after forged ends', { op: 'snatHas', node: 'b', clientPort: 5305 });
add('end replayed', { op: 'sendGone', ofStep: at['a snat syn ended']!, entry: [...snatE(5303, SNAT, 0), 0, 0] });
add('a snat syn 6', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5306, SYN) });
add('a tick e', { op: 'tick', node: 'a' });
add('end of the sender\'s translation', { op: 'sendGone', ofStep: at['a snat syn 6']!, entry: [...snatE(5306, SNAT, 0), 0, 0] });
add('the same end again', { op: 'sendGone', ofStep: at['a snat syn 6']!, entry: [...snatE(5306, SNAT, 0), 0, 0] });
add('b has 6', { op: 'snatHas', node: 'b', clientPort: 5306 });
// ---- an end over lb-b's budget for lb-a waits there and is applied when the budget refills (lb-a does not send it
// again); beyond the bound (MAX_DEFERRED_GONE) ends are refused and counted
add('a snat syn 7', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5307, SYN) });
add('a tick g', { op: 'tick', node: 'a' });
add('b has 7 (synced)', { op: 'snatHas', node: 'b', clientPort: 5307 });
for (let i = 0; i < 2; i++) // lb-b's budget for lb-a spent (its clock stands still)
  add(`spend the budget ${i}`, { op: 'send', body: { v: 1, ct: Array.from({ length: 512 }, (_, j) => ct(CLIENT, VIP_DSR, 27000 + i * 512 + j, 80, ID1)), snat: [] } });
add('end over the budget', { op: 'sendGone', ofStep: at['a snat syn 7']!, entry: [...snatE(5307, SNAT, 0), 0, 0] });
add('b tick g, the budget still spent', { op: 'tick', node: 'b' });
add('b has 7 while its end waits', { op: 'snatHas', node: 'b', clientPort: 5307 });
add('one second later (g)', { op: 'advance', ms: 1000 });
add('b tick g2', { op: 'tick', node: 'b' });
add('b has 7 after the budget refilled', { op: 'snatHas', node: 'b', clientPort: 5307 });
add('spend the budget again', { op: 'send', body: { v: 1, ct: Array.from({ length: 512 }, (_, j) => ct(CLIENT, VIP_DSR, 28100 + j, 80, ID1)), snat: [] } });
add('ends over the budget and the bound', { op: 'send', body: { v: 1, ct: [], snat: [],
  gone: [5391, 5392, 5393].map((p, i) => [...snatE(p, SNAT, 40990 + i), 0, 0]) } });
add('one second later (g3)', { op: 'advance', ms: 1000 });
add('b tick g3', { op: 'tick', node: 'b' });
add('idle: budget refilled after the ends', { op: 'advance', ms: 10_000 });
/** lb-a's ring of published entries: one page, about 34 records of 120 bytes; RING_FLOOD new flows overflow it. */
const RING_BYTES_A = 4096;
const RING_FLOOD = 60;
// ---- lb-a's ring (one page, RING_BYTES_A) overflows: what it had no room for is counted, and the round's scan sends it
for (let i = 0; i < RING_FLOOD; i++) add(`a new flow ${i} past the ring`, { op: 'run', node: 'a', data: tcp(VIP_DSR, 30000 + i, SYN) });
add('a tick after the ring overflowed', { op: 'tick', node: 'a' });
// ---- an end lb-a had queued when a send to lb-b failed: the resync that follows sends the table (which holds no
// ends) after it, so lb-b's copy is deleted (lb-a's established TCP timeout is SHORT_S since the refresh section)
add('a snat syn 8', { op: 'run', node: 'a', data: tcp(VIP_SNAT, 5308, SYN) });
add('a tick h', { op: 'tick', node: 'a' });
add('b has 8 (synced)', { op: 'snatHas', node: 'b', clientPort: 5308 });
add('b refuses the sync', { op: 'refuseSync', on: true });
add('wait h (8 expires at a)', { op: 'wait', ms: SHORT_S * 1000 + 500 });
add('a sweep h', { op: 'snatSweep', node: 'a' });
add('a tick h1 (its send fails)', { op: 'tick', node: 'a' });
add('b has 8 while refusing', { op: 'snatHas', node: 'b', clientPort: 5308 });
add('b takes the sync again', { op: 'refuseSync', on: false });
add('a tick h2 (resync)', { op: 'tick', node: 'a' });
add('b has 8 after the resync', { op: 'snatHas', node: 'b', clientPort: 5308 });

// ---- lb-a restarts: a new sync sends lb-b the whole table
add('restart a', { op: 'restartA' });
add('a count', { op: 'count', node: 'a' });
add('a tick after restart', { op: 'tick', node: 'a' });
add('b rejections', { op: 'rejections' });

const IMPORT_PER_SECOND = 200; // the flood test's budget: at most 2 x 200 at once
const MAX_DEFERRED_GONE = 2; // lb-b keeps at most 2 of lb-a's ends over its budget

lab.run({ secret: SECRET, states: STATES, importPerSecond: IMPORT_PER_SECOND, syncRingBytesA: RING_BYTES_A, maxDeferredGone: MAX_DEFERRED_GONE });

const dstMac = (hex: string) => hex.slice(0, 12).match(/../g)!.join(':');
const srcPort = (hex: string) => parseInt(hex.slice(68, 72), 16); // Ethernet 14 + IPv4 20: TCP source port

test('established flows on lb-a reach the other node\'s maps in one sync round', async (t) => {
  for (const n of ['a dsr syn', 'a dsr ack', 'a snat syn', 'a snat ack']) t.is((await r(n)).retval, TX, n);
  t.is(dstMac((await r('a dsr ack')).data), MAC1);
  const tick = await r('a tick 1');
  t.falsy(tick.error, tick.error);
  t.is(tick.report['lb-b'].sent, 2, 'one connection-table entry and one translation');
  t.true(tick.report['lb-b'].inSync);
  const c = await r('b count after sync');
  t.deepEqual([c.ct, c.snat], [1, 1]);
});

test('after the table moved to real 2 and ECMP moved the flows to lb-b, the synced DSR flow still reaches real 1', async (t) => {
  const synced = await r('b dsr ack synced');
  t.is(synced.retval, TX);
  t.is(dstMac(synced.data), MAC1);
  const unsynced = await r('b dsr ack unsynced');
  t.is(dstMac(unsynced.data), MAC2, 'a flow lb-b never heard of goes where the new table sends it');
});

test('the synced SNAT translation leaves lb-b from the same SNAT port to real 1', async (t) => {
  const a = await r('a snat syn');
  const b = await r('b snat ack synced');
  t.is(b.retval, TX);
  t.is(dstMac(b.data), MAC1);
  t.is(srcPort(b.data), srcPort(a.data));
  t.true(srcPort(a.data) >= PORTS.a.min && srcPort(a.data) <= PORTS.a.max);
  t.is(b.counters.snat_hit, 1);
  const back = await r('b snat reply from real 1');
  t.is(back.retval, TX, 'lb-b holds the reverse entry too: real 1\'s reply goes back to the client');
  t.is(back.counters.snat_reply, 1);
});

test('lb-b does not send lb-a\'s entries back', async (t) => {
  const first = await r('b tick 0');
  t.is(first.report['lb-a'].sent, 0);
  t.true(first.report['lb-a'].inSync);
  const tick = await r('b tick 1');
  t.falsy(tick.error, tick.error);
  // lb-b's own new entries only: the unsynced flow's ACK made one (real 2)
  t.is(tick.report['lb-a'].sent, 1);
});

test('the stale entry of the issue: lb-b\'s next segment of the reconnected connection goes to real 1, like lb-a\'s', async (t) => {
  t.is(dstMac((await r('b dsr syn while real 1 out')).data), MAC2);
  t.is(dstMac((await r('a dsr reconnect syn')).data), MAC1);
  t.falsy((await r('a tick 2')).error);
  const b = await r('b dsr ack after reconnect');
  t.is(b.retval, TX);
  t.is(dstMac(b.data), MAC1, 'without the sync lb-b would send it to real 2, which resets it');
  t.falsy((await r('b tick 2')).error);
  t.is(dstMac((await r('a dsr ack after b tick')).data), MAC1, 'lb-a keeps real 1: lb-b\'s overwritten entry did not come back');
});

const srcAddr = (hex: string) => [0, 1, 2, 3].map((i) => parseInt(hex.slice(52 + 2 * i, 54 + 2 * i), 16)).join('.');

test('own SNAT addresses: lb-b sends lb-a\'s moved SNAT flow from lb-a\'s address and port; the real\'s reply is translated by lb-a only', async (t) => {
  const a = await r('a snat syn (own address)');
  t.is(a.retval, TX);
  t.is(srcAddr(a.data), SNAT);
  t.is((await r('a tick 3')).report['lb-b'].sent - (await r('a tick 2b')).report['lb-b'].sent, 1, 'the new translation only');
  const b = await r('b snat ack of a\'s translation');
  t.is(b.retval, TX);
  t.is(dstMac(b.data), MAC1);
  t.is(srcAddr(b.data), SNAT, 'the owner\'s address, not lb-b\'s');
  t.is(srcPort(b.data), srcPort(a.data));
  t.is(b.counters.snat_hit, 1);
  const toA = await r('b reply to a\'s address');
  t.is(toA.retval, 2, 'not lb-b\'s address: passed (the network delivers it to lb-a)');
  const wrong = await r('b reply to its own address on a\'s port');
  t.is(wrong.retval, 2, 'lb-a\'s translation is never answered at lb-b\'s address');
  t.is(wrong.counters.snat_pass_local, 1);
  const atA = await r('a reply to its address');
  t.is(atA.retval, TX);
  t.is(atA.counters.snat_reply, 1);
});

const dstAddr = (hex: string) => [0, 1, 2, 3].map((i) => parseInt(hex.slice(60 + 2 * i, 62 + 2 * i), 16)).join('.');
const dstPort = (hex: string) => parseInt(hex.slice(72, 76), 16);

test('lb-a lost: lb-b serving lb-a\'s SNAT address translates the real\'s replies to it with lb-a\'s translations, and only while it serves it', async (t) => {
  const serve = await r('b serves a\'s address');
  t.deepEqual({ ok: serve.ok, served: serve.served, gate: serve.gate }, { ok: true, served: [SNAT], gate: 1 });
  const served = await r('b reply to a\'s address (served)');
  t.is(served.retval, TX, 'translated back to the client');
  t.is(served.counters.snat_reply, 1);
  t.is(dstAddr(served.data), CLIENT);
  t.is(srcAddr(served.data), VIP_SNAT);
  t.is(dstPort(served.data), 5101, 'the client\'s port of lb-a\'s translation');
  // attacker's view: lb-b's own translation is never answered at lb-a's address, another address is not served
  const ownPort = await r('b reply to a\'s address on b\'s own port');
  t.is(ownPort.retval, 2);
  t.is(ownPort.counters.snat_pass_local, 1);
  t.is((await r('b reply to an address it does not serve')).retval, 2);
  t.is((await r('b reply to an address it does not serve')).counters.snat_reply ?? 0, 0);
  // benign: serving another node's address changes nothing for lb-b's own translations
  const own = await r('b reply to its own address (serving)');
  t.is(own.retval, TX);
  t.is(dstPort(own.data), 5102);
  const unserve = await r('b unserves a\'s address');
  t.deepEqual({ served: unserve.served, gate: unserve.gate }, { served: [], gate: 0 });
  const after = await r('b reply to a\'s address (no longer served)');
  t.is(after.retval, 2, 'passed again: the owner answers its address');
  t.is(after.counters.snat_reply ?? 0, 0);
});

test('new entries go to the peer from the ring xdp_lb publishes them into, not from a scan of the tables', async (t) => {
  const first = await r('a tick 1');
  t.is(first.local.scans, 1, 'the first round scans (lb-b joins)');
  t.true(first.local.publishing, 'lb-a has a peer: xdp_lb publishes');
  const second = await r('a tick 2');
  t.is(second.local.scans, 1, 'no scan since: the new flows came from the ring');
  t.is(second.local.published - first.local.published, 2, 'the unsynced SYN and the reconnect SYN, one record each');
  t.is(second.report['lb-b'].sent - first.report['lb-b'].sent, 2);
  t.is(second.local.lost, 0);
});

test('a full ring: the records it had no room for are counted, the next round scans, and every new flow is sent', async (t) => {
  const before = await r('a tick g'); // lb-a's last round before the flood
  const after = await r('a tick after the ring overflowed');
  for (let i = 0; i < RING_FLOOD; i++) t.is((await r(`a new flow ${i} past the ring`)).retval, TX, `forwarded: new flow ${i}`);
  t.true(after.local.lost > 0 && after.local.lost < RING_FLOOD, `some records lost (${after.local.lost} of ${RING_FLOOD})`);
  t.is(after.local.scans, before.local.scans + 1, 'the loss made the round scan');
  t.is(after.local.published - before.local.published, RING_FLOOD - after.local.lost, 'what the ring held was read from it');
  // every new flow sent (the scan may add a translation's refresh or end that fell due meanwhile)
  t.true(after.report['lb-b'].sent - before.report['lb-b'].sent >= RING_FLOOD, 'the ring\'s and the scan\'s entries sent');
  t.is(after.report['lb-b'].queued, 0);
});

test('a translation that closes (FIN) and is reopened by a SYN of the same 5-tuple is sent each time: the peer\'s copy follows its state', async (t) => {
  const sent = async (step: string) => (await r(step)).report['lb-b'].sent as number;
  t.is(await sent('a tick after fin') - await sent('a tick 3'), 1, 'closing: sent');
  t.is((await r('a snat syn reopens')).retval, TX);
  t.is(await sent('a tick after reopen') - await sent('a tick after fin'), 1, 'reopened: sent again (the peer\'s closing copy would expire in 60 s)');
});

test('issue 24, third case as met: the stale real still in the ring; lb-a\'s newer SYN wins on lb-b, so the reconnected connection does not reset there', async (t) => {
  t.is(dstMac((await r('b syn while real 1 out (stale real in ring)')).data), MAC2, 'lb-b recorded real 2');
  t.is(dstMac((await r('a reconnect syn (ring pick 1)')).data), MAC1, 'the reconnect through lb-a gets real 1');
  const tick = await r('a tick 2b');
  t.falsy(tick.error, tick.error);
  const b = await r('b ack after the reconnect (stale real in ring)');
  t.is(b.retval, TX);
  t.is(b.counters.ct_hit, 1);
  t.is(dstMac(b.data), MAC1, 'lb-b\'s entry (real 2, an older choice) gave way to lb-a\'s newer one');
  t.falsy((await r('b tick 2b')).error);
  t.is(dstMac((await r('a ack after b tick (stale real in ring)')).data), MAC1, 'nothing came back to lb-a');
});

test('recency: a peer\'s older choice, or one at the same moment, leaves lb-b\'s own entry; bad ages are refused and counted; a newer choice replaces it, once', async (t) => {
  t.is(dstMac((await r('b own flow (recency)')).data), MAC1);
  t.deepEqual((await r('older choice from a peer')).answer, { applied: 0, unchanged: 0, refused: { exists: 1 } });
  t.deepEqual((await r('choice at the same moment from a peer')).answer, { applied: 0, unchanged: 0, refused: { exists: 1 } },
    'within the margin: a SYN both nodes saw keeps each node\'s own');
  for (const n of ['negative age', 'fractional age', 'age over 7 days', 'age over 7 days, new flow'])
    t.deepEqual((await r(n)).answer, { applied: 0, unchanged: 0, refused: { 'bad-age': 1 } }, n);
  t.is(dstMac((await r('b ack of its own flow (recency)')).data), MAC1, 'lb-b\'s connection stays on its real');
  // benign: the peer chose later (a reconnect through it), for a real of the ring
  t.deepEqual((await r('newer choice from a peer')).answer, { applied: 1, unchanged: 0, refused: {} });
  t.deepEqual((await r('the newer choice again (replay)')).answer, { applied: 0, unchanged: 1, refused: {} });
  t.is(dstMac((await r('b ack after the newer choice')).data), MAC2);
});

test('F4: a peer cannot overwrite lb-b\'s entries with a real the current ring does not name (drained), nor name a real its VIP does not have; a flow lb-b holds nothing of keeps its drained real; a stale entry is still replaced', async (t) => {
  t.is(dstMac((await r('b own flow to real 1')).data), MAC1);
  t.deepEqual((await r('overwrite with a drained real')).answer.refused, { 'no-real': 1 });
  // benign (a rejoined node with empty maps): the drained real's established flow is inserted and keeps its real
  t.deepEqual((await r('pre-seed a drained real')).answer, { applied: 1, unchanged: 0, refused: {} });
  t.deepEqual((await r('translation to a drained real')).answer, { applied: 1, unchanged: 0, refused: {} });
  t.is(dstMac((await r('b ack of the pre-seeded flow')).data), MAC2, 'the drained real the peer carried it to');
  t.deepEqual((await r('the drained real\'s entry again (replay)')).answer, { applied: 0, unchanged: 1, refused: {} });
  // attacker: a real lb-b has, but not for this VIP
  t.deepEqual((await r('entry naming a real of another service')).answer, { applied: 0, unchanged: 0, refused: { 'no-real': 1 } });
  t.is(dstMac((await r('b ack of the flow named with another service\'s real')).data), MAC1, 'the ring\'s real');
  t.deepEqual((await r('overwrite with a ring real')).answer, { applied: 0, unchanged: 0, refused: { exists: 1 } });
  t.is(dstMac((await r('b ack of its own flow')).data), MAC1, 'lb-b\'s established flow stays on its real');
  // benign: a flow lb-b never saw, to a real the ring names, is inserted and used
  t.deepEqual((await r('new flow to a ring real')).answer, { applied: 1, unchanged: 0, refused: {} });
  t.is(dstMac((await r('b ack of the synced flow')).data), MAC2);
});

test('F3: a peer\'s translations are accepted only with its own SNAT address, never another node\'s', async (t) => {
  t.deepEqual((await r('translation of a third node\'s address')).answer.refused, { 'snat-address': 1 });
  t.deepEqual((await r('translation of the receiver\'s own address')).answer.refused, { 'snat-address': 1 });
  t.deepEqual((await r('translation of the sender\'s address')).answer, { applied: 1, unchanged: 0, refused: {} });
});

test('a replayed batch changes nothing (idempotent)', async (t) => {
  const a = await r('replay of a synced entry');
  t.deepEqual(a.answer, { applied: 0, unchanged: 1, refused: {} });
});

test('entries for a VIP, a port or a real this node does not have are refused and counted', async (t) => {
  t.deepEqual((await r('unknown VIP')).answer.refused, { 'no-listener': 1 });
  t.deepEqual((await r('unknown port of a VIP')).answer.refused, { 'no-listener': 1 });
  t.deepEqual((await r('unknown real')).answer.refused, { 'no-real': 1 });
  t.deepEqual((await r('ct entry for a snat listener')).answer.refused, { 'no-listener': 1 });
});

test('translations: another SNAT address, a port of the node\'s own range and a port held by another client are refused; a valid one is inserted', async (t) => {
  t.deepEqual((await r('other SNAT address')).answer.refused, { 'snat-address': 1 });
  t.deepEqual((await r('port of b\'s own range')).answer.refused, { 'snat-own-port': 1 });
  t.deepEqual((await r('valid translation')).answer, { applied: 1, unchanged: 0, refused: {} });
  t.deepEqual((await r('port held by another client')).answer.refused, { 'snat-port-taken': 1 });
});

test('malformed, oversize, replayed, unauthenticated and forged messages are refused by the channel and counted', async (t) => {
  for (const n of ['malformed: version', 'malformed: arity', 'malformed: address not canonical', 'malformed: port 0', 'too many entries']) {
    const a = await r(n);
    t.is(a.reason, 'refused', `${n}: ${JSON.stringify(a)}`);
    t.regex(a.error, /HTTP 400 \(bad-body\)/, n);
  }
  // refused before its body is read to the end: the 413, or a reset while the rest was still being sent
  const [big] = (await r('oversize body')).answers;
  t.true(big.status === 413 || /ECONNRESET|EPIPE|socket hang up/.test(big.error ?? ''), JSON.stringify(big));
  const forged = await r('forged sender');
  t.regex(forged.error ?? '', /HTTP 401 \(bad-mac\)/, JSON.stringify(forged));
  const [bare] = (await r('unauthenticated (no MAC, no sender)')).answers;
  t.is(bare.status, 400, JSON.stringify(bare));
  t.regex(bare.body ?? '', /malformed/);
  const replayed = (await r('recorded message replayed')).answers;
  t.is(replayed[0].status, 200, 'the genuine message itself passes (benign)');
  t.deepEqual(JSON.parse(replayed[0].body ?? 'null'), { applied: 1, unchanged: 0, refused: {} });
  t.is(replayed[1].status, 401, 'its copy is a replay');
  t.regex(replayed[1].body ?? '', /replay/);
  // Counted once each, by reason, and nothing else was refused: every other message of the run (the floods
  // included) was within the channel's message bound, which no delay on a loaded machine can change.
  t.deepEqual((await r('b rejections')).rejections, { 'bad-body': 5, 'too-large': 1, 'bad-mac': 1, malformed: 1, replay: 1 });
});

test('a peer flooding more entries than lb-b\'s whole table inserts exactly its budget: 2 x importPerSecond at once, then importPerSecond per second', async (t) => {
  const floods = await Promise.all(Array.from({ length: FLOOD_MESSAGES }, (_, i) => r(`flood ${i}`)));
  t.true(FLOOD_MESSAGES * 512 > CT_MAX, 'uncapped, the flood alone would overfill the table and evict lb-b\'s own entries');
  t.deepEqual(floods.map((x) => x.answer.applied), [2 * IMPORT_PER_SECOND, ...Array(FLOOD_MESSAGES - 1).fill(0)]);
  t.deepEqual(floods.map((x) => x.answer.refused['rate-limited']), [512 - 2 * IMPORT_PER_SECOND, ...Array(FLOOD_MESSAGES - 1).fill(512)]);
  const before = await r('b count before flood');
  const after = await r('b count after flood');
  t.is(after.ct - before.ct, 2 * IMPORT_PER_SECOND, 'the table grew by the burst and not one of lb-b\'s entries was evicted');
  const later = await r('flood a second later');
  t.deepEqual(later.answer, { applied: IMPORT_PER_SECOND, unchanged: 0, refused: { 'rate-limited': 512 - IMPORT_PER_SECOND } });
  t.is((await r('b count after second flood')).ct - after.ct, IMPORT_PER_SECOND);
  const report = (await r('b report')).report['lb-a'];
  t.is(report.refused['rate-limited'], FLOOD_MESSAGES * 512 + 512 - 3 * IMPORT_PER_SECOND, 'every entry over the budget counted');
});

test('refresh: a translation in use at its owner is sent again before the peer\'s copy would expire; one not in use is not, and expires there', async (t) => {
  for (let i = 1; i <= REFRESH_ROUNDS; i++) t.is((await r(`a ack kept ${i}`)).counters.snat_hit, 1);
  const sent = async (n: string) => (await r(n)).report['lb-b'].sent as number;
  t.is(await sent('a tick r0') - await sent('a tick after reopen'), 2, 'the two new translations (and nothing else)');
  const refreshes = await sent(`a tick r${REFRESH_ROUNDS}`) - await sent('a tick r0');
  t.true(refreshes >= 2, `the kept translation was sent again (${refreshes} times in ${REFRESH_ROUNDS * ROUND_MS} ms)`);
  t.true(refreshes <= REFRESH_ROUNDS / 2, `at most once per half idle timeout (${refreshes})`);
  t.deepEqual((await r('b has kept')).has, true, 'refreshed: alive on lb-b after more than its idle timeout');
  t.deepEqual((await r('b has idle')).has, false, 'not in use: expired on lb-b by its own idle timeout');
  t.true((await r('b sweep r')).swept >= 2, 'the idle copy\'s two entries (and older ones of the scenario)');
});

test('deletions: lb-a\'s swept translations leave lb-b too, except one whose flow moved to lb-b after lb-a\'s last packet', async (t) => {
  t.true((await r('b has ended (synced)')).has);
  t.is((await r('b ack of the moved flow')).counters.snat_hit, 1, 'the moved flow uses lb-b\'s copy');
  t.true((await r('a sweep d')).swept >= 4, 'lb-a swept the expired translations (two entries each)');
  t.falsy((await r('a tick d1')).error);
  t.false((await r('b has ended')).has, 'the end reached lb-b: its copy is deleted');
  t.true((await r('b has moved')).has, 'alive here: kept (it ends by its own idle timeout)');
  t.is((await r('b report d')).report['lb-a'].refused.newer, 1);
});

test('hostile ends: a peer cannot end lb-b\'s own translation, another client\'s, nor one with a bad or missing idle age; a replayed end changes nothing; a genuine end is applied once', async (t) => {
  t.is((await r('b own snat syn 2')).retval, TX);
  t.deepEqual((await r('forged end of b\'s own translation')).answer, { applied: 0, unchanged: 0, refused: { 'not-owner': 1 } });
  t.deepEqual((await r('forged end naming b\'s address')).answer, { applied: 0, unchanged: 0, refused: { 'snat-address': 1 } });
  t.deepEqual((await r('end of a translation of another client')).answer, { applied: 0, unchanged: 0, refused: { 'not-owner': 1 } });
  t.deepEqual((await r('end with a negative idle age')).answer, { applied: 0, unchanged: 0, refused: { 'bad-age': 1 } });
  t.deepEqual((await r('end without an idle age')).answer, { applied: 0, unchanged: 0, refused: { 'bad-age': 1 } });
  t.true((await r('b has own after forged ends')).has);
  t.deepEqual((await r('end replayed')).answer, { applied: 0, unchanged: 1, refused: {} });
  t.deepEqual((await r('end of the sender\'s translation')).answer, { applied: 1, unchanged: 0, refused: {} });
  t.deepEqual((await r('the same end again')).answer, { applied: 0, unchanged: 1, refused: {} });
  t.false((await r('b has 6')).has);
});

test('an end over the budget waits on lb-b and is applied when the budget refills; over the bound, ends are refused and counted', async (t) => {
  t.true((await r('b has 7 (synced)')).has);
  t.deepEqual((await r('end over the budget')).answer, { applied: 0, unchanged: 0, refused: {}, deferred: 1 });
  t.is((await r('b tick g, the budget still spent')).report['lb-a'].goneDeferred, 1, 'no budget, no end: it waits');
  t.true((await r('b has 7 while its end waits')).has);
  const g2 = (await r('b tick g2')).report['lb-a'];
  t.is(g2.goneDeferred, 0);
  t.false((await r('b has 7 after the budget refilled')).has, 'the copy is gone without lb-a sending the end again');
  // the bound (MAX_DEFERRED_GONE): two wait, the third is refused and counted; those two are applied later
  t.deepEqual((await r('ends over the budget and the bound')).answer, { applied: 0, unchanged: 0, refused: { 'rate-limited': 1 }, deferred: MAX_DEFERRED_GONE });
  const g3 = (await r('b tick g3')).report['lb-a'];
  t.is(g3.goneDeferred, 0);
  const spent = (await r('spend the budget again')).answer.refused['rate-limited'] as number;
  t.is(g3.refused['rate-limited'] - g2.refused['rate-limited'], spent + 1, 'the dropped end counted once, beside the flood\'s entries');
});

test('an end queued when a send failed goes with the resync that follows: the peer\'s copy is deleted', async (t) => {
  t.true((await r('b has 8 (synced)')).has);
  t.true((await r('a sweep h')).swept >= 1, 'lb-a\'s translation expired there');
  const h1 = (await r('a tick h1 (its send fails)')).report['lb-b'];
  t.false(h1.inSync, 'the send failed');
  t.regex(h1.lastError ?? '', /./);
  t.true((await r('b has 8 while refusing')).has);
  const h2 = (await r('a tick h2 (resync)')).report['lb-b'];
  t.true(h2.inSync, JSON.stringify(h2));
  t.false((await r('b has 8 after the resync')).has, 'the end was not lost with the failed send\'s queue');
});

test('a restarted lb-a sends lb-b its whole table', async (t) => {
  const count = await r('a count');
  const tick = await r('a tick after restart');
  t.falsy(tick.error, tick.error);
  t.is(tick.report['lb-b'].sent, count.ct + count.ownSnat, 'every entry and every translation of its own (lb-b\'s copies are lb-b\'s to send)');
  t.true(tick.report['lb-b'].inSync);
});

test('every step ran (only the refused messages end in an error)', async (t) => {
  const out = await lab.results();
  const refused = new Set(['malformed: version', 'malformed: arity', 'malformed: address not canonical', 'malformed: port 0', 'too many entries',
    'forged sender']);
  t.deepEqual(steps.map((s, i) => [s.name, out[i]?.error]).filter(([n, e]) => e && !refused.has(n as string)), []);
});

test('names of the harness steps are unique', (t) => {
  t.is(new Set(steps.map((s) => s.name)).size, steps.length);
  t.truthy(labNames(TAG).ns);
});
