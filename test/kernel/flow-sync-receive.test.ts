// A peer's batches are imported one at a time, in arrival order (src/reconciler/flows/flow-sync.ts receive()): an
// import yields to the event loop between slices of SCAN_PAGE_ENTRIES, and a second batch of the same peer arriving
// meanwhile (a sender that timed out and resent, or its next batch) waits for the first instead of overtaking it.
// And an entry's age is stamped when it was read, not when the round began (the round yields before its scan).
// Checked by structure, never by time, against a real data plane (BPF maps; xdp_lb is not run).
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { SCAN_PAGE_ENTRIES } from '../../src/bpf/dataplane/flow-state.js';
import { FlowSync } from '../../src/reconciler/flows/flow-sync.js';
import { makeState } from '../lib/lb-state.js';
import { applyTo } from '../lib/converge.js';
import type { BpfObject } from '../../src/bpf/libbpf.js';
import { encodeFlowKey, encodeFlowValue } from '../../src/bpf/dataplane/codec.js';
import { monotonicNs } from '../../src/bpf/dataplane/snat.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-fsrecv`;
const VIP = '203.0.113.52';
/** Not a listener of the node: every entry for it is refused ('no-listener'), and still goes through the import. */
const NOT_A_VIP = '203.0.113.53';

let dp: LbDataPlaneHandle;
let obj: BpfObject;

test.before(async () => {
  rmSync(PIN, { recursive: true, force: true });
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, makeState({ reals: { 7: '198.51.100.42' }, hashSeed: 3, conntrackMaxEntries: 8192,
    services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: Array(31).fill(7) }] }));
  obj = dp.object()!;
});
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

/** A FlowSync of lb-1 whose peer lb-2's batches the test hands to receive() itself (the channel is not under test). */
function syncOf(): FlowSync {
  return new FlowSync({ node: 'lb-1', peers: () => ['lb-2'], object: () => obj, desired: () => null,
    channel: { serve: () => undefined, request: async () => { throw new Error('lb-1 sends nothing in this test'); } } });
}

const batch = (n: number, first: number) => ({ v: 1, ct: Array.from({ length: n }, (_, i) => ['192.0.2.7', NOT_A_VIP, 1024 + first + i, 80, 6, 7, 0]), snat: [] });

test('two batches of one peer delivered at once are imported in order: the second starts after the first has been counted', async (t) => {
  const sync = syncOf();
  const big = 2 * SCAN_PAGE_ENTRIES - 48; // several slices: the import yields between them
  const order: string[] = [];
  const first = sync.receive('lb-2', batch(big, 0)).then((r) => { order.push('first'); return r; });
  const second = sync.receive('lb-2', batch(1, big)).then((r) => {
    order.push('second');
    // the report when the second batch's import ended holds the whole first batch already
    return { r, refusedSoFar: sync.report()['lb-2']!.refused['no-listener'] };
  });
  const [a, b] = await Promise.all([first, second]);
  t.deepEqual(order, ['first', 'second']);
  t.deepEqual(a.refused, { 'no-listener': big });
  t.deepEqual(b.r.refused, { 'no-listener': 1 });
  t.is(b.refusedSoFar, big + 1);
});

test('a bad batch refuses itself alone: the peer\'s next batch is still imported', async (t) => {
  const sync = syncOf();
  const bad = sync.receive('lb-2', { v: 2, ct: [], snat: [] });
  const good = sync.receive('lb-2', batch(3, 0));
  await t.throwsAsync(bad, { message: /v: not 1/ });
  t.deepEqual((await good).refused, { 'no-listener': 3 });
});

test('batches of different peers do not wait for each other\'s order', async (t) => {
  const sync = syncOf();
  const order: string[] = [];
  const a = sync.receive('lb-2', batch(2 * SCAN_PAGE_ENTRIES - 48, 0)).then(() => order.push('lb-2'));
  const b = sync.receive('lb-3', batch(1, 0)).then(() => order.push('lb-3'));
  await Promise.all([a, b]);
  t.deepEqual(order, ['lb-3', 'lb-2'], 'lb-3\'s single entry is not queued behind lb-2\'s slices');
});

test('an entry read after the round yielded carries its age at its read, not at the round\'s start (injected clock)', async (t) => {
  // lb-1's clock: the test moves it; the round's first yield (lb-2's deferred ends, applied in slices) moves it 60 s on
  let clock = 1_000_000;
  const sent: Array<{ ct: unknown[][] }> = [];
  const sync = new FlowSync({ node: 'lb-1', peers: () => ['lb-2'], object: () => obj, desired: () => null, now: () => clock,
    limits: { importPerSecond: 600 },
    channel: { serve: () => undefined, request: async (_peer: string, _kind: string, body: unknown) => { sent.push(body as { ct: unknown[][] }); return {}; } } });
  const ct = obj.map('lb_conntrack');
  const key = encodeFlowKey({ src: '192.0.2.8', dst: VIP, sport: 4321, dport: 80, proto: 6, family: 4 });
  ct.update(key, encodeFlowValue({ realId: 7, serviceId: 1, realSlot: 1, lastSeen: 0, chosenNs: monotonicNs() }));
  t.teardown(() => { ct.delete(key); });
  // ends over lb-2's budget (1,200 at once) wait here: 848 + 2,048 of them
  const ends = (first: number) => ({ v: 1, ct: [], snat: [], gone: Array.from({ length: 2048 }, (_, i) =>
    ['192.0.2.9', VIP, 1024 + first + i, 80, 6, 7, 8080, '198.51.100.9', 40000, false, 0, 0]) });
  await sync.receive('lb-2', ends(0));
  await sync.receive('lb-2', ends(2048));
  t.is(sync.report()['lb-2']!.goneDeferred, 848 + 2048);
  clock += 10_000; // the budget refills: the round applies 1,200 of them, in two slices, the event loop's turn between
  setImmediate(() => { clock += 60_000; });
  await sync.tick();
  t.is(sync.report()['lb-2']!.goneDeferred, 848 + 2048 - 1200, 'the round applied deferred ends before its scan');
  const entry = sent.flatMap((b) => b.ct).find((e) => e[2] === 4321);
  t.truthy(entry, 'the scan read the entry and the resync sent it');
  // its age at the read (well under a minute: it was written just now) and nothing for the 60 s before the read
  t.true((entry![6] as number) < 30_000, `age sent ${String(entry![6])} ms`);
});

test('a deferred end is dropped when a later batch brings a translation of the same identity; another identity drops nothing', async (t) => {
  let clock = 1_000_000;
  const sync = new FlowSync({ node: 'lb-1', peers: () => ['lb-2'], object: () => obj, desired: () => null, now: () => clock,
    limits: { importPerSecond: 600 }, channel: { serve: () => undefined, request: async () => ({}) } });
  const end = (cport: number) => ['192.0.2.9', VIP, cport, 80, 6, 7, 8080, '198.51.100.9', 40000, false, 0, 0];
  const ends = (first: number) => ({ v: 1, ct: [], snat: [], gone: Array.from({ length: 2048 }, (_, i) => end(1024 + first + i)) });
  await sync.receive('lb-2', ends(0));
  await sync.receive('lb-2', ends(2048));
  t.is(sync.report()['lb-2']!.goneDeferred, 848 + 2048);
  // the budget refills: the next batch's import applies 1,200 deferred ends first (two slices, a turn between them, in
  // which the clock moves on, so the batch's own two translations are granted too)
  clock += 10_000;
  setImmediate(() => { clock += 10_000; });
  const r = await sync.receive('lb-2', { v: 1, ct: [], snat: [end(1024 + 2048 + 2047), end(60000)] });
  t.is(r.refused['rate-limited'], undefined, 'both translations were granted');
  t.is(sync.report()['lb-2']!.goneDeferred, 848 + 2048 - 1200 - 1, 'the end of the translation made again is dropped, no other');
});
