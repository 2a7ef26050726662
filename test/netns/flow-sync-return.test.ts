// A rebooted lb node gets its own SNAT translations back (issue 24; src/reconciler/flows/flow-sync.ts `needOwn` /
// `ownBack`, src/bpf/dataplane/snat-return.ts, importFlows `takeOwnBack`; docs/datapath.md "Connection-state sync",
// docs/bgp.md "Rejoining with empty maps"). Two data planes (own pin roots, the real xdp_lb through
// BPF_PROG_TEST_RUN) and two real authenticated peer channels inside a test namespace (test/lib/flow-sync-harness.ts);
// each lb node its own SNAT address. lb-b translates two client flows, lb-a keeps copies. Then:
// - attacker: while lb-b is not rejoining, lb-a sending it translations of lb-b's own address is refused, a resync
//   mark claiming `ownBack` included; a restart of lb-b's daemon with its pins kept (not rejoining) asks for nothing
//   and lb-a sends none of them back;
// - lb-b rebooted (pins removed, rejoining): its resync asks (`needOwn`), lb-a's answer carries the copies, lb-b
//   inserts them as its own (owner 0) and translates the real's replies with them; a translation lb-b made itself
//   after the reboot for one of those client flows stays as it was; lb-a says the address can be handed back only
//   once its answer went through;
// - the import rule while rejoining (lb-a's channel sending crafted entries): a replay is unchanged, a port outside
//   lb-b's own range, another client flow on a port lb-b holds, and a client flow lb-b translates on another port are
//   refused; after the gate is released a translation of lb-b's address is refused again.
import test from 'ava';
import { LAB, labNames } from '../lib/xdp-lab.js';
import { flowSyncLab } from '../lib/flow-sync-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import type { FlowSyncStep } from '../lib/flow-sync-harness.js';
import type { DesiredState } from '../../src/render/state.js';

const TAG = 'fsret';
const SECRET = 'Pq7w2E9rT4yU1iO6pA3sD8fG5hJ0kL2zX7cV4bN9mQ1='; // a test secret (44 base64 chars)
const REAL = '198.51.100.11';
const MAC1 = LAB.neighbours[REAL]!;
const VIP_SNAT = '203.0.113.20';
const CLIENT = '192.0.2.1';
const SNAT_A = LAB.lbA.v4;
const SNAT_B = '198.51.100.3';
const TX = 3;

function state(node: 'a' | 'b'): unknown {
  const s = makeState({ reals: { 1: REAL }, hashSeed: 7, conntrackMaxEntries: 4096, addresses: [LAB.lbA.v4], services: [
    { id: 2, vip: VIP_SNAT, forwarding: 'snat', ring: Array(7).fill(1), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] },
  ] });
  const d: DesiredState = { ...s, node: `lb-${node}`, snatAddress: node === 'a' ? SNAT_A : SNAT_B };
  return stateToJson(d);
}
const STATES = { own: { a: state('a'), b: state('b') } };

const tcp = (sport: number, flags: number) => frame({ dst: LAB.lbA.mac, src: LAB.clientMac },
  ipPacket({ src: CLIENT, dst: VIP_SNAT, l4: { tcp: { sport, dport: 80, flags, ack: flags & TCP_FLAGS.ACK ? 1 : 0 } } })).toString('hex');
const SYN = TCP_FLAGS.SYN;
/** A translation in the wire's 'snat' form (its port replaced by sendSnat when sent that way). */
const snatE = (cport: number, snatAddress: string, snatPort: number) => [CLIENT, VIP_SNAT, cport, 80, 6, 1, 8080, snatAddress, snatPort, false, 0, 0];

const lab = flowSyncLab(TAG);
const { steps, at, add, r } = lab;
const reply = (node: 'a' | 'b', ofStep: string, snat: string): FlowSyncStep =>
  ({ op: 'snatReply', node, ofStep: at[ofStep]!, real: REAL, realMac: MAC1, snat, realPort: 8080 });

add('apply', { op: 'apply', state: 'own' });
add('a tick 0', { op: 'tick', node: 'a' });
add('b tick 0', { op: 'tick', node: 'b' });
add('b syn 5401', { op: 'run', node: 'b', data: tcp(5401, SYN) });
add('b syn 5402', { op: 'run', node: 'b', data: tcp(5402, SYN) });
add('b tick 1', { op: 'tick', node: 'b' });
add('a holds copies', { op: 'count', node: 'a' });
// ---- attacker: lb-b not rejoining
add('own translation while not rejoining', { op: 'send', body: { v: 1, ct: [], snat: [snatE(5403, SNAT_B, 40000)] } });
add('own translation marked ownBack while not rejoining', { op: 'send',
  body: { v: 1, ct: [], snat: [snatE(5403, SNAT_B, 40000)], resync: { seq: 77, done: true, ownBack: true } } });
add('restart b (pins kept)', { op: 'restartB', empty: false, rejoining: false });
add('b tick after restart', { op: 'tick', node: 'b' });
add('a tick after restart', { op: 'tick', node: 'a' });
add('b report after restart', { op: 'report', node: 'b' });
// ---- lb-b rebooted: empty maps, rejoining
add('reboot b', { op: 'restartB', empty: true, rejoining: true });
add('b count after reboot', { op: 'count', node: 'b' });
add('b answers again', { op: 'mark' });
add('a hand back: nothing heard', { op: 'handBack', node: 'a', peer: 'lb-b', sinceStep: at['b answers again']! });
add('b tick: resync asking', { op: 'tick', node: 'b' });
add('a hand back: owed', { op: 'handBack', node: 'a', peer: 'lb-b', sinceStep: at['b answers again']! });
add('b reply before the return', reply('b', 'b syn 5402', SNAT_B));
add('b syn 5401 after reboot', { op: 'run', node: 'b', data: tcp(5401, SYN) });
add('b has 5401 before the return', { op: 'snatHas', node: 'b', clientPort: 5401 });
// ---- the import rule while rejoining (crafted entries from lb-a's channel): own translations only in a resync marked
// ownBack that lb-b asked lb-a for (it did: 'b tick: resync asking'), while that resync is open
const asked = (seq: number) => ({ seq, done: false, ownBack: true });
add('attacker: own translation in a delta while the gate is held', { op: 'send', body: { v: 1, ct: [], snat: [snatE(5405, SNAT_B, 40005)] } });
add('attacker: own translation in a resync not marked ownBack', { op: 'send',
  body: { v: 1, ct: [], snat: [snatE(5405, SNAT_B, 40005)], resync: { seq: 900, done: false } } });
add('a new own translation in the asked resync', { op: 'send', body: { v: 1, ct: [], snat: [snatE(5405, SNAT_B, 40005)], resync: asked(901) } });
add('replay of a returned translation', { op: 'send', body: { v: 1, ct: [], snat: [snatE(5405, SNAT_B, 40005)], resync: asked(901) } });
add('own address, port outside own range', { op: 'send', body: { v: 1, ct: [], snat: [snatE(5404, SNAT_B, 1000)], resync: asked(901) } });
add('another client on a port b holds', { op: 'sendSnat', ofStep: at['b syn 5401 after reboot']!, entry: snatE(5499, SNAT_B, 0), resync: asked(901) });
add('b\'s client flow on another port', { op: 'sendSnat', ofStep: at['b syn 5401 after reboot']!, entry: snatE(5401, SNAT_B, 0), portOffset: 1,
  resync: asked(901) });
add('a later resync begins', { op: 'send', body: { v: 1, ct: [], snat: [], resync: asked(902) } });
add('attacker: own translation in a batch of the earlier resync', { op: 'send',
  body: { v: 1, ct: [], snat: [snatE(5406, SNAT_B, 40006)], resync: asked(901) } });
add('b report before the answer', { op: 'report', node: 'b' });
add('a tick: answer', { op: 'tick', node: 'a' });
add('a hand back: answered', { op: 'handBack', node: 'a', peer: 'lb-b', sinceStep: at['b answers again']! });
add('b report after the return', { op: 'report', node: 'b' });
add('b has 5401 after the return', { op: 'snatHas', node: 'b', clientPort: 5401 });
add('b has 5402 after the return', { op: 'snatHas', node: 'b', clientPort: 5402 });
add('b reply after the return', reply('b', 'b syn 5402', SNAT_B));
add('attacker: own translation in a new ownBack resync after the ask was answered', { op: 'send',
  body: { v: 1, ct: [], snat: [snatE(5407, SNAT_B, 40007)], resync: { seq: 903, done: false, ownBack: true } } });
add('gate released', { op: 'rejoining', node: 'b', on: false });
add('own translation after release', { op: 'send', body: { v: 1, ct: [], snat: [snatE(5406, SNAT_B, 40006)], resync: asked(904) } });
add('b report at the end', { op: 'report', node: 'b' });
add('b has 5406 at the end', { op: 'snatHas', node: 'b', clientPort: 5406 });
add('b has 5407 at the end', { op: 'snatHas', node: 'b', clientPort: 5407 });
// ---- lb-b rebooted again; this time lb-a speaks first (its takeover nudges it while lb-b is not ready): lb-b's answer
// to lb-a's empty message says it still waits for its own translations (needOwn in the answer)
add('reboot b again', { op: 'restartB', empty: true, rejoining: true });
add('b answers again (2)', { op: 'mark' });
add('a nudges b', { op: 'nudge', node: 'a', peer: 'lb-b' });
add('a tick: hello', { op: 'tick', node: 'a' });
add('a hand back: asked in the answer', { op: 'handBack', node: 'a', peer: 'lb-b', sinceStep: at['b answers again (2)']! });
add('a tick: answer (2)', { op: 'tick', node: 'a' });
add('a hand back: answered (2)', { op: 'handBack', node: 'a', peer: 'lb-b', sinceStep: at['b answers again (2)']! });
add('b report (2)', { op: 'report', node: 'b' });

lab.run({ secret: SECRET, states: STATES, importPerSecond: 50_000 });

const srcPort = (hex: string) => parseInt(hex.slice(68, 72), 16);

test('lb-b\'s translations reach lb-a as copies (owner slot)', async (t) => {
  for (const n of ['b syn 5401', 'b syn 5402']) t.is((await r(n)).retval, TX, n);
  t.is((await r('b tick 1')).report['lb-a'].sent, 2);
  t.is((await r('a holds copies')).snat, 2);
});

test('attacker: while lb-b is not rejoining, translations of its own address from a peer are refused, whatever the resync mark claims', async (t) => {
  t.deepEqual((await r('own translation while not rejoining')).answer, { applied: 0, unchanged: 0, refused: { 'snat-address': 1 } });
  t.deepEqual((await r('own translation marked ownBack while not rejoining')).answer, { applied: 0, unchanged: 0, refused: { 'snat-address': 1 } });
});

test('a daemon restart with the pins kept (not rejoining) asks for nothing: lb-a\'s resync carries none of lb-b\'s copies', async (t) => {
  t.falsy((await r('b tick after restart')).error);
  const a = await r('a tick after restart');
  t.falsy(a.error, a.error);
  t.is(a.report['lb-b'].sent - (await r('a tick 0')).report['lb-b'].sent, 0, 'lb-a\'s table (nothing of its own) and none of its 2 copies of lb-b\'s');
  const b = (await r('b report after restart')).report['lb-a'];
  t.deepEqual(b.refused, {});
  t.is(b.returned, 0);
  t.true(b.resyncReceived, 'not rejoining: lb-a\'s table is all it needs');
});

test('lb-b rebooted: it asks, lb-a sends the copies back inside its resync, lb-b takes them as its own and translates the real\'s replies with them', async (t) => {
  t.deepEqual((await r('b count after reboot')).snat, 0, 'empty maps');
  t.is((await r('b reply before the return')).counters.snat_reply ?? 0, 0, 'before the return lb-b has no translation for the reply');
  const a = await r('a tick: answer');
  t.falsy(a.error, a.error);
  t.is(a.report['lb-b'].inSync, true);
  const b = (await r('b report after the return')).report['lb-a'];
  const before = (await r('b report before the answer')).report['lb-a'];
  t.is(b.returned - before.returned, 1, 'the copy of 5402 inserted as lb-b\'s own');
  t.deepEqual(b.refused, before.refused, 'the copy of 5401 equals the translation lb-b made again for that flow: unchanged, nothing refused');
  t.true(b.resyncReceived, 'lb-a\'s table with lb-b\'s own translations back: the rejoin gate may release');
  const has = await r('b has 5402 after the return');
  t.deepEqual([has.has, has.owners], [true, [0]], 'lb-b\'s own (owner 0), not a copy');
  const back = await r('b reply after the return');
  t.is(back.retval, TX, 'the real\'s reply to lb-b\'s address is translated again');
  t.is(back.counters.snat_reply, 1);
});

test('a translation lb-b made itself after the reboot is never overwritten by a returned copy', async (t) => {
  const made = await r('b syn 5401 after reboot');
  t.is(made.retval, TX);
  t.is(srcPort(made.data), srcPort((await r('b syn 5401')).data), 'the flow hash gives the client flow the same port again');
  const before = await r('b has 5401 before the return');
  const after = await r('b has 5401 after the return');
  t.deepEqual([after.has, after.owners, after.created], [true, [0], before.created], 'the same entry, its times untouched');
});

test('hand back: lb-a says lb-b may take its address back only after a message since its return and once the copies went through', async (t) => {
  t.false((await r('a hand back: nothing heard')).ready);
  t.false((await r('a hand back: owed')).ready, 'lb-b asked: its translations are owed');
  t.true((await r('a hand back: answered')).ready);
});

test('attacker: while the gate is held, own translations outside a resync marked ownBack that lb-b asked for and that is still open are refused', async (t) => {
  const refused = { applied: 0, unchanged: 0, refused: { 'snat-address': 1 } };
  t.deepEqual((await r('attacker: own translation in a delta while the gate is held')).answer, { ...refused, needOwn: true });
  t.deepEqual((await r('attacker: own translation in a resync not marked ownBack')).answer, { ...refused, needOwn: true });
  t.deepEqual((await r('attacker: own translation in a batch of the earlier resync')).answer, { ...refused, needOwn: true });
  t.deepEqual((await r('attacker: own translation in a new ownBack resync after the ask was answered')).answer, refused, 'lb-a\'s answer came: nothing asked any more');
  t.false((await r('b has 5406 at the end')).has);
  t.false((await r('b has 5407 at the end')).has);
});

test('the rule in the asked resync: a replay changes nothing; a port outside its own range, another client on a port it holds, and its client flow on another port are refused; a new one is taken', async (t) => {
  t.deepEqual((await r('a new own translation in the asked resync')).answer, { applied: 1, unchanged: 0, refused: {}, returned: 1, needOwn: true });
  t.deepEqual((await r('replay of a returned translation')).answer, { applied: 0, unchanged: 1, refused: {}, needOwn: true });
  t.deepEqual((await r('own address, port outside own range')).answer, { applied: 0, unchanged: 0, refused: { 'snat-address': 1 }, needOwn: true });
  t.deepEqual((await r('another client on a port b holds')).answer, { applied: 0, unchanged: 0, refused: { 'snat-port-taken': 1 }, needOwn: true });
  t.deepEqual((await r('b\'s client flow on another port')).answer, { applied: 0, unchanged: 0, refused: { exists: 1 }, needOwn: true });
});

test('attacker: once the gate is released, translations of lb-b\'s own address are refused again', async (t) => {
  t.deepEqual((await r('own translation after release')).answer, { applied: 0, unchanged: 0, refused: { 'snat-address': 1 } });
  const b = (await r('b report at the end')).report['lb-a'];
  t.is(b.returned, 2, '5405 in the asked resync, 5402 in lb-a\'s answer');
  t.is(b.refused['snat-address'], 6, 'a delta, a resync not marked ownBack, a port outside the range, an earlier resync, after the answer, after the release');
});

test('lb-a speaking first: lb-b\'s answer to its nudge asks for lb-b\'s own translations, and lb-a\'s next round sends them', async (t) => {
  const hello = await r('a tick: hello');
  t.falsy(hello.error, hello.error);
  t.false((await r('a hand back: asked in the answer')).ready, 'lb-b answered, but asked for its translations');
  t.falsy((await r('a tick: answer (2)')).error);
  t.true((await r('a hand back: answered (2)')).ready);
  const b = (await r('b report (2)')).report['lb-a'];
  t.is(b.returned, 2, 'the copies of 5401 and 5402 (lb-a holds no other)');
  t.true(b.resyncReceived);
});

test('every step ran', async (t) => {
  const out = await lab.results();
  t.deepEqual(steps.map((s, i) => [s.name, out[i]?.error]).filter(([, e]) => e), []);
  t.truthy(labNames(TAG).ns);
});
