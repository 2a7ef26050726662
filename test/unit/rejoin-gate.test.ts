// The rejoin gate (src/reconciler/flows/rejoin-gate.ts, docs/bgp.md "Rejoining with empty maps"): an lb node that
// starts with empty maps holds its BGP announcements until every sync peer has sent it its whole table (the
// `resync.done` mark of the sync wire), at most the bound. The gate's rules on a test clock; the announcement rule's
// reason; the wire mark's checks; and, over real authenticated peer channels on 127.0.0.1, the attacker/benign pair:
// a `done` from a sender without the peer secret is refused by the channel and releases nothing, the genuine peer's
// releases the gate.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { RejoinGate, REJOIN_BOUND_DEFAULT_MS } from '../../src/reconciler/flows/rejoin-gate.js';
import { FlowSync, FLOW_SYNC_KIND, parseResyncMark } from '../../src/reconciler/flows/flow-sync.js';
import { startPeerChannel, secretAuth, BadBody, PeerError, type PeerAddress, type PeerChannel } from '../../src/reconciler/peer/index.js';
import { decideAnnouncements } from '../../src/render/bgp/announce.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { goodModel } from '../helpers/bgp-model.js';

function clock(start = 1_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

function gate(o: { armed?: boolean; peers: string[]; done?: Set<string>; boundMs?: number }) {
  const c = clock();
  const done = o.done ?? new Set<string>();
  const logs: string[] = [];
  const releases: string[] = [];
  const g = new RejoinGate({ armed: o.armed ?? true, boundMs: o.boundMs, peers: () => o.peers, resynced: (p) => done.has(p), now: c.now,
    log: { info: (m) => logs.push(m), warn: (m) => logs.push(m) }, onRelease: (by) => releases.push(by) });
  return { g, c, done, logs, releases };
}

test('held until every peer\'s whole table arrived, then released (and logged, and reported)', (t) => {
  const { g, c, done, logs, releases } = gate({ peers: ['lb-2', 'lb-3'] });
  t.true(g.holding());
  t.deepEqual(g.report().waitingFor, ['lb-2', 'lb-3']);
  t.is(g.report().state, 'held');
  done.add('lb-2');
  c.advance(1000);
  t.true(g.holding(), 'one peer still missing');
  t.deepEqual(g.report().waitingFor, ['lb-3']);
  t.deepEqual(g.report().resynced, ['lb-2']);
  done.add('lb-3');
  c.advance(500);
  t.false(g.holding());
  const r = g.report();
  t.is(r.state, 'released');
  t.is(r.releasedBy, 'all peers resynced');
  t.is(Date.parse(r.releasedAt!) - Date.parse(r.since!), 1500);
  t.true(logs.some((l) => /held until lb-2, lb-3/.test(l)));
  t.true(logs.some((l) => /resync received from every peer .* announcements released/.test(l)));
  g.holding();
  t.deepEqual(releases, ['all peers resynced'], 'the release is told once (the status is written then)');
});

test('released by the bound when a peer never sends its whole table (unreachable, partitioned, or an older peer without the mark); it names what it left out', (t) => {
  const { g, c, logs } = gate({ peers: ['lb-2'], boundMs: 30_000 });
  t.true(g.holding());
  c.advance(29_999);
  t.true(g.holding(), 'not before the bound');
  c.advance(1);
  t.false(g.holding(), 'not beyond the bound');
  t.is(g.report().releasedBy, 'bound');
  t.deepEqual(g.report().waitingFor, ['lb-2']);
  t.true(logs.some((l) => /released by the bound \(30 s\) without the whole table of lb-2/.test(l)));
});

test('the default bound is 30 s', (t) => {
  t.is(REJOIN_BOUND_DEFAULT_MS, 30_000);
  const { g, c } = gate({ peers: ['lb-2'] });
  t.true(g.holding());
  c.advance(30_000);
  t.false(g.holding());
});

test('not held: a node without sync peers, or one whose gate is not armed (maps adopted, sync off, --rejoin-hold 0)', (t) => {
  const lone = gate({ peers: [] });
  t.false(lone.g.holding());
  t.is(lone.g.report().releasedBy, 'no peers');
  const adopted = gate({ armed: false, peers: ['lb-2'] });
  t.false(adopted.g.holding());
  t.is(adopted.g.report().state, 'off');
});

test('once released it stays released: a later resync (a peer out of sync again) withdraws nothing', (t) => {
  const peers = ['lb-2'];
  const { g, done } = gate({ peers });
  done.add('lb-2');
  t.false(g.holding());
  done.delete('lb-2');
  peers.push('lb-3');
  t.false(g.holding());
});

test('the announcement rule: held VIPs are withdrawn with the reason `awaiting resync`; a drained node still says draining', (t) => {
  const m = goodModel();
  const facts = { node: 'lb-1', model: m, desired: renderDesiredState(m, 'lb-1'), dataPlaneUp: true, stopping: false };
  const open = decideAnnouncements(facts);
  t.true(open.length > 0 && open.every((v) => v.announced));
  const held = decideAnnouncements({ ...facts, awaitingResync: true });
  t.true(held.every((v) => !v.announced && v.reason === 'awaiting resync'));
  const lb1 = m.nodes.find((n) => n.metadata.name === 'lb-1')!;
  (lb1.spec as { state?: string }).state = 'drain';
  t.true(decideAnnouncements({ ...facts, awaitingResync: true }).every((v) => v.reason === 'draining'));
});

test('the wire mark: absent (a delta, an older peer) or checked field by field; unknown fields inside it are ignored', (t) => {
  t.is(parseResyncMark({ v: 1, ct: [], snat: [] }), undefined);
  t.deepEqual(parseResyncMark({ resync: { seq: 7, done: true } }), { seq: 7, done: true });
  t.deepEqual(parseResyncMark({ resync: { seq: 7, done: false, need: true, future: 'x' } }), { seq: 7, done: false, need: true });
  t.deepEqual(parseResyncMark({ resync: { seq: 7, done: false, need: false } }), { seq: 7, done: false });
  for (const bad of [null, [], 'done', { seq: 0, done: true }, { seq: 1.5, done: true }, { seq: '1', done: true }, { seq: 2 ** 32, done: true },
    { seq: 1 }, { seq: 1, done: 'yes' }, { seq: 1, done: true, need: 1 }, { seq: 1, done: true, needOwn: 'true' }, { seq: 1, done: true, ownBack: 1 }])
    t.throws(() => parseResyncMark({ resync: bad }), { instanceOf: BadBody }, JSON.stringify(bad));
  t.deepEqual(parseResyncMark({ resync: { seq: 7, done: false, need: true, needOwn: true } }), { seq: 7, done: false, need: true, needOwn: true });
  t.deepEqual(parseResyncMark({ resync: { seq: 7, done: true, ownBack: true, needOwn: false } }), { seq: 7, done: true, ownBack: true });
});

test('rejoining(): armed and not released; never for a gate that is not armed', (t) => {
  const { g, done } = gate({ peers: ['lb-2'] });
  t.true(g.rejoining(), 'before the gate was first asked too (no config applied yet)');
  t.true(g.holding());
  t.true(g.rejoining());
  done.add('lb-2');
  t.false(g.holding());
  t.false(g.rejoining(), 'released: its own translations from a peer are refused again');
  t.false(gate({ armed: false, peers: ['lb-2'] }).g.rejoining());
});

const SECRET = randomBytes(32).toString('base64');
const OTHER = randomBytes(32).toString('base64');

/** lb-1 (rejoining: a FlowSync without a data plane yet, its gate armed) and lb-2, each on a real channel. */
async function rejoining(t: import('ava').ExecutionContext) {
  const book: PeerAddress[] = [];
  const peersOf = (self: string) => () => book.filter((p) => p.node !== self);
  const open = async (node: string, secret = SECRET): Promise<PeerChannel> => {
    const ch = await startPeerChannel({ node, host: '127.0.0.1', port: 0, auth: secretAuth(secret), peers: peersOf(node) });
    t.teardown(() => ch.close());
    return ch;
  };
  const ch1 = await open('lb-1');
  const ch2 = await open('lb-2');
  book.push({ node: 'lb-1', url: ch1.url }, { node: 'lb-2', url: ch2.url });
  const sync = new FlowSync({ node: 'lb-1', channel: ch1, peers: () => ['lb-2'], object: () => null, desired: () => null,
    limits: { importPerSecond: 5 } });
  const g = new RejoinGate({ armed: true, peers: () => ['lb-2'], resynced: (p) => sync.resyncReceived(p) });
  // an impostor: claims to be lb-2 from its own channel, without the secret
  const impostor = await startPeerChannel({ node: 'lb-2', host: '127.0.0.1', port: 0, auth: secretAuth(OTHER), peers: () => [{ node: 'lb-1', url: ch1.url }] });
  t.teardown(() => impostor.close());
  return { sync, g, ch2, impostor };
}

const done = (seq: number) => ({ v: 1, ct: [], snat: [], resync: { seq, done: true } });

test('attacker: a `done` from a sender without the peer secret is refused by the channel and releases nothing', async (t) => {
  const { sync, g, impostor } = await rejoining(t);
  t.true(g.holding());
  const err = await t.throwsAsync(impostor.request('lb-1', FLOW_SYNC_KIND, done(1)), { instanceOf: PeerError });
  t.regex(err!.message, /401|auth|bad-mac|unauth/i);
  t.false(sync.resyncReceived('lb-2'));
  t.true(g.holding(), 'still held');
});

test('attacker: a malformed mark from the authenticated peer is refused (BadBody) and releases nothing', async (t) => {
  const { sync, g, ch2 } = await rejoining(t);
  await t.throwsAsync(ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 1, done: 'true' } }));
  await t.throwsAsync(ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 0, done: true } }));
  t.false(sync.resyncReceived('lb-2'));
  t.true(g.holding());
});

test('benign: an older peer\'s batch without the mark is accepted and releases nothing (the bound will); the genuine peer\'s `done` releases the gate', async (t) => {
  const { sync, g, ch2 } = await rejoining(t);
  t.deepEqual(await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [] }), { applied: 0, unchanged: 0, refused: {} });
  t.false(sync.resyncReceived('lb-2'));
  t.true(g.holding());
  await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 3, done: false } });
  t.false(sync.resyncReceived('lb-2'), 'a resync under way is not a whole table');
  t.true(g.holding());
  await ch2.request('lb-1', FLOW_SYNC_KIND, done(3));
  t.true(sync.resyncReceived('lb-2'));
  t.false(g.holding());
  t.is(g.report().releasedBy, 'all peers resynced');
  t.true(sync.report()['lb-2']!.resyncReceived);
});

/** lb-1 rejoining with a SNAT address of its own (198.51.100.111) and lb-2 (198.51.100.112), each on a real channel;
 * lb-1's sync asks through `rejoining`, lb-2's is the one that keeps lb-1's copies. Neither has a data plane: what is
 * checked here is the mark's rule (the translations themselves: test/netns/flow-sync-return.test.ts). */
async function rejoiningWithOwnAddress(t: import('ava').ExecutionContext, addresses: Record<string, string> = { 'lb-1': '198.51.100.111', 'lb-2': '198.51.100.112' }) {
  const book: PeerAddress[] = [];
  const open = async (node: string): Promise<PeerChannel> => {
    const ch = await startPeerChannel({ node, host: '127.0.0.1', port: 0, auth: secretAuth(SECRET), peers: () => book.filter((p) => p.node !== node) });
    t.teardown(() => ch.close());
    return ch;
  };
  const ch1 = await open('lb-1');
  const ch2 = await open('lb-2');
  book.push({ node: 'lb-1', url: ch1.url }, { node: 'lb-2', url: ch2.url });
  const snatAddressOf = (n: string) => addresses[n];
  let g: RejoinGate | null = null;
  const s1 = new FlowSync({ node: 'lb-1', channel: ch1, peers: () => ['lb-2'], object: () => null, desired: () => null, snatAddressOf,
    rejoining: () => g!.rejoining() });
  g = new RejoinGate({ armed: true, peers: () => ['lb-2'], resynced: (p) => s1.resyncReceived(p) });
  const s2 = new FlowSync({ node: 'lb-2', channel: ch2, peers: () => ['lb-1'], object: () => null, desired: () => null, snatAddressOf });
  return { s1, s2, g: g!, ch1, ch2 };
}

test('rejoining with a SNAT address: a peer\'s whole table counts only when it brought this node\'s own translations back (ownBack); then the gate releases', async (t) => {
  const { s1, g, ch2 } = await rejoiningWithOwnAddress(t);
  t.true(g.holding());
  // a send that began before lb-1's ask reached lb-2: its table, but not lb-1's own translations
  await ch2.request('lb-1', FLOW_SYNC_KIND, done(4));
  t.false(s1.resyncReceived('lb-2'), 'without ownBack: not all lb-1 needs');
  t.true(g.holding());
  await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 5, done: true, ownBack: true } });
  t.true(s1.resyncReceived('lb-2'));
  t.false(g.holding());
  t.false(g.rejoining());
});

test('attacker: a table marked ownBack that lb-1 never asked lb-2 for, or a later batch of one that ended, does not count; the one answering the ask does', async (t) => {
  const { s1, g, ch2 } = await rejoiningWithOwnAddress(t);
  // lb-2 speaks first, before any answer of lb-1 could have asked it
  t.deepEqual(await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 5, done: true, ownBack: true } }),
    { applied: 0, unchanged: 0, refused: {}, needOwn: true }, 'not asked: lb-1 still waits, and now it asks');
  t.false(s1.resyncReceived('lb-2'));
  t.deepEqual(await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 5, done: true, ownBack: true } }),
    { applied: 0, unchanged: 0, refused: {}, needOwn: true }, 'the same resync again: it was not an answer and it is closed');
  t.true(g.holding());
  // benign: the resync lb-2 begins after the ask
  await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 6, done: false, ownBack: true } });
  t.false(s1.resyncReceived('lb-2'), 'open until its done batch');
  await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 6, done: true, ownBack: true } });
  t.true(s1.resyncReceived('lb-2'));
  t.false(g.holding());
});

test('while rejoining, every answer lb-1 gives says it still waits for its own translations (needOwn), until a table marked ownBack arrived; a node not rejoining never says it', async (t) => {
  const { ch2 } = await rejoiningWithOwnAddress(t);
  t.deepEqual(await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [] }), { applied: 0, unchanged: 0, refused: {}, needOwn: true });
  t.deepEqual(await ch2.request('lb-1', FLOW_SYNC_KIND, done(6)), { applied: 0, unchanged: 0, refused: {}, needOwn: true }, 'a table without them');
  t.deepEqual(await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 7, done: true, ownBack: true } }),
    { applied: 0, unchanged: 0, refused: {} });
  t.deepEqual(await ch2.request('lb-1', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [] }), { applied: 0, unchanged: 0, refused: {} });
  const { ch1 } = await rejoiningWithOwnAddress(t);
  t.deepEqual(await ch1.request('lb-2', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [] }), { applied: 0, unchanged: 0, refused: {} }, 'lb-2 is not rejoining');
});

test('the ask: lb-2 owes lb-1 its translations from lb-1\'s `needOwn` until a send carrying them completed; only a peer with a SNAT address is owed; handBackReady needs a message since the return and nothing owed', async (t) => {
  const { s2, ch1 } = await rejoiningWithOwnAddress(t);
  const since = Date.now();
  t.false(s2.handBackReady('lb-1', since), 'nothing heard from lb-1 since it answered again');
  t.deepEqual(s2.handBackWaitingFor('lb-1', since), ['sync-spoke'], 'the status says: waiting for its sync to speak');
  await ch1.request('lb-2', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 1, done: false, need: true, needOwn: true } });
  t.false(s2.handBackReady('lb-1', since), 'heard, but its own translations are owed: the address stays with lb-2');
  t.deepEqual(s2.handBackWaitingFor('lb-1', since), ['own-translations'], 'the status says: waiting for the translations it asked for');
  t.deepEqual(s2.handBackWaitingFor('lb-1', Date.now() + 1000), ['sync-spoke', 'own-translations'], 'both, for a later return');
  t.deepEqual(s2.handBackWaitingFor('lb-9', since), ['sync-spoke'], 'a peer never heard of');
  await ch1.request('lb-2', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 1, done: true } });
  t.false(s2.handBackReady('lb-1', since), 'lb-1\'s table arriving does not pay the debt');
  t.false(s2.handBackReady('lb-1', Date.now() + 1000), 'nothing heard since a later return');
  // benign: a node that only lost its link (pins kept) asks nothing: its first message is enough
  const other = await rejoiningWithOwnAddress(t);
  const since2 = Date.now();
  await other.ch1.request('lb-2', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 9, done: true } });
  t.true(other.s2.handBackReady('lb-1', since2));
  t.deepEqual(other.s2.handBackWaitingFor('lb-1', since2), [], 'nothing to wait for');
  // an ask of a node without a SNAT address (nothing of it kept, no address to give back) owes nothing
  const plain = await rejoiningWithOwnAddress(t, { 'lb-2': '198.51.100.112' });
  const since3 = Date.now();
  await plain.ch1.request('lb-2', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], resync: { seq: 2, done: true, need: true, needOwn: true } });
  t.true(plain.s2.handBackReady('lb-1', since3));
});
