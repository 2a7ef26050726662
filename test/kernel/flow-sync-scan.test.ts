// The sync's scan of the whole tables is cooperative (src/bpf/dataplane/flow-state.ts FlowDelta.read, docs/datapath.md
// "Connection-state sync", The scan): the pinned tables are read in pages of SCAN_PAGE_ENTRIES (one batched system
// call each, BpfMap.lookupBatchPages) and the read gives the event loop a turn after every page, so the daemon's health
// checks and peer channels run while a table of 100,000 entries is read (bench/sync prints the stalls). Checked here by
// structure, never by time: a setImmediate callback queued before a scan runs before the scan finishes, the scan yields
// at least once per page, pages cover the table exactly once, and entries a peer's sync inserts while the scan is under
// way (FlowDelta.remember) are not sent back by the next read.
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { FLOW_LAST_SEEN_SHIFT, encodeFlowKey, encodeFlowValue } from '../../src/bpf/dataplane/codec.js';
import { connectionsSeenWithin } from '../../src/bpf/dataplane/conntrack-seen.js';
import { FlowDelta, SCAN_PAGE_ENTRIES, nextTurn } from '../../src/bpf/dataplane/flow-state.js';
import { makeState } from '../lib/lb-state.js';
import { applyTo } from '../lib/converge.js';
import type { BpfObject } from '../../src/bpf/libbpf.js';
import { SNAT_MAPS, SNAT_STATE, countActiveOwnTranslations, encodeSnatRev, encodeSnatRevKey, monotonicNs, sweepSnat } from '../../src/bpf/dataplane/snat.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-fsscan`;
const VIP = '203.0.113.51';
/** More than a few pages' worth: the scan must yield several times. */
const N = 5 * SCAN_PAGE_ENTRIES + 321;

let dp: LbDataPlaneHandle;
let obj: BpfObject;

const key = (i: number) => encodeFlowKey({ src: `192.0.2.${1 + (i >> 14)}`, dst: VIP, sport: 1024 + (i & 0x3fff), dport: 80, proto: 6, family: 4 });
const value = () => encodeFlowValue({ realId: 7, serviceId: 1, realSlot: 1, lastSeen: 0, chosenNs: 1_000_000n });

/** Writes connection-table entries first..first+count-1 (one batched update). */
function fill(first: number, count: number): void {
  const ct = obj.map('lb_conntrack');
  const keys = Buffer.concat(Array.from({ length: count }, (_, i) => key(first + i)));
  const values = Buffer.concat(Array.from({ length: count }, () => value()));
  ct.updateBatch(keys, values, count);
}

test.before(async () => {
  rmSync(PIN, { recursive: true, force: true });
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, makeState({ reals: { 7: '198.51.100.41' }, hashSeed: 3, conntrackMaxEntries: 4 * N,
    services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: Array(31).fill(7) }] }));
  obj = dp.object()!;
  fill(0, N);
});
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

test.serial('the table is read in pages that cover it exactly once', (t) => {
  const ct = obj.map('lb_conntrack');
  const seen = new Set<string>();
  let pages = 0;
  for (const page of ct.lookupBatchPages(SCAN_PAGE_ENTRIES)) {
    pages++;
    t.true(page.count <= SCAN_PAGE_ENTRIES, `a page of ${page.count}`);
    for (let i = 0; i < page.count; i++) seen.add(page.keys.subarray(i * ct.keySize, (i + 1) * ct.keySize).toString('hex'));
  }
  t.is(seen.size, N, 'every entry, none twice');
  t.true(pages >= Math.ceil(N / SCAN_PAGE_ENTRIES), `${pages} pages`);
});

test.serial('a scan yields to the event loop between pages: a setImmediate callback queued before it runs before it ends, once per page', async (t) => {
  const delta = new FlowDelta();
  let finished = false;
  let ranBeforeEnd = false;
  setImmediate(() => { ranBeforeEnd = !finished; });
  // a timer-like neighbour: counts the event loop's turns while the scan runs
  let turns = 0;
  const spin = () => { if (!finished) { turns++; setImmediate(spin); } };
  setImmediate(spin);
  const scan = await delta.read(obj);
  t.true(ranBeforeEnd, 'the callback ran while the scan was under way');
  const turnsInRead = turns;
  const all = await scan.all();
  finished = true;
  t.is(scan.changed.ct.length, N, 'every entry is new to a first read');
  t.is(all.ct.length, N);
  t.true(turnsInRead >= Math.ceil(N / SCAN_PAGE_ENTRIES) - 1, `${turnsInRead} turns of the event loop during the read of ${N} entries`);
  t.true(turns - turnsInRead >= Math.ceil(N / SCAN_PAGE_ENTRIES) - 1, `${turns - turnsInRead} turns while the whole table was decoded for a resync`);
  t.deepEqual((await delta.read(obj)).changed.ct, [], 'a second read: nothing changed');
});

test.serial('without yielding (the read as it was), the same callback runs only after the scan: the check above can fail', async (t) => {
  const delta = new FlowDelta();
  let finished = false;
  let ranBeforeEnd = false;
  setImmediate(() => { ranBeforeEnd = !finished; });
  let pauses = 0;
  await delta.read(obj, async () => { pauses++; });
  finished = true;
  await nextTurn();
  t.false(ranBeforeEnd);
  t.true(pauses >= Math.ceil(N / SCAN_PAGE_ENTRIES), `the read paused after each of its ${pauses} pages`);
});

test.serial('entries a peer\'s sync inserts while a scan is under way are seen: the next read does not send them back', async (t) => {
  const delta = new FlowDelta();
  await delta.read(obj);
  // 400 entries arrive from a peer after the first page: some land in buckets the scan has passed, some ahead of it
  const EXTRA = 400;
  let inserted = false;
  const scan = await delta.read(obj, async () => {
    if (!inserted) {
      inserted = true;
      fill(N, EXTRA);
      delta.remember({ ct: Array.from({ length: EXTRA }, (_, i) => [key(N + i), value()] as [Buffer, Buffer]), snat: [] });
    }
    await nextTurn();
  });
  t.true(inserted);
  t.deepEqual(scan.changed.ct.map((e) => e.sport), [], 'what the scan met of them was already seen');
  t.deepEqual((await delta.read(obj)).changed.ct.map((e) => e.sport), [], 'and the next read does not send them either');
  // benign: an entry this node made meanwhile (not remembered) is found by the next read
  fill(N + EXTRA, 1);
  t.deepEqual((await delta.read(obj)).changed.ct.map((e) => e.sport), [1024 + ((N + EXTRA) & 0x3fff)]);
});

// The SNAT sweep reads the NAT table the same way (src/bpf/dataplane/paging.ts): expired translations of a table of
// several pages are deleted, live ones stay, and the event loop turns while it runs.
test.serial('the SNAT sweep and the drain watch\'s count of translations yield between pages too; the sweep deletes exactly the expired translations', async (t) => {
  const snatDp = await openLbDataPlane({ pinRoot: `${PIN}/snat` });
  try {
    await applyTo(snatDp, { ...makeState({ reals: { 7: '198.51.100.41' }, hashSeed: 3,
      services: [{ id: 2, vip: VIP, forwarding: 'snat', ring: Array(31).fill(7), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] }] }),
    snatAddress: '198.51.100.250' });
    const o = snatDp.object()!;
    const rev = o.map(SNAT_MAPS.rev);
    // the sweep's clock: one second past the established TCP timeout (7440 s) after the live ones' last packet
    const sweepAt = monotonicNs() + 7441n * 1_000_000_000n;
    const liveSeen = sweepAt - 1_000_000_000n;
    const EXPIRED = 3 * SCAN_PAGE_ENTRIES;
    const LIVE = 100;
    const k = (i: number) => encodeSnatRevKey({ real: '198.51.100.41', realPort: 8080, snatPort: 1024 + i, proto: 6, family: 4 });
    const v = (i: number, lastSeenNs: bigint) => encodeSnatRev({ client: '192.0.2.7', vip: VIP, clientPort: 1024 + i, vipPort: 80, realId: 7,
      state: SNAT_STATE.open, createdNs: 1n, lastSeenNs });
    const n = EXPIRED + LIVE;
    rev.updateBatch(Buffer.concat(Array.from({ length: n }, (_, i) => k(i))),
      Buffer.concat(Array.from({ length: n }, (_, i) => v(i, i < EXPIRED ? 1n : liveSeen))), n);
    let finished = false;
    let ranBeforeEnd = false;
    setImmediate(() => { ranBeforeEnd = !finished; });
    const deleted = await sweepSnat(o, sweepAt);
    finished = true;
    t.true(ranBeforeEnd, 'the callback ran while the sweep was under way');
    t.is(deleted, EXPIRED, 'no forward entries here: one reverse entry each');
    t.is(rev.keys().length, LIVE);
    // a drained node's remaining SNAT connections (drain watch): own (owner 0), open, a packet within the window;
    // read the same way, a page at a time
    const OWN = 2 * SCAN_PAGE_ENTRIES;
    const kinds = [{ owner: 0, state: SNAT_STATE.open, seen: liveSeen }, { owner: 1, state: SNAT_STATE.open, seen: liveSeen },
      { owner: 0, state: SNAT_STATE.closing, seen: liveSeen }, { owner: 0, state: SNAT_STATE.open, seen: 1n }];
    const m = OWN + 3;
    rev.updateBatch(Buffer.concat(Array.from({ length: m }, (_, i) => k(5000 + i))), Buffer.concat(Array.from({ length: m }, (_, i) => {
      const kind = kinds[i < OWN ? 0 : i - OWN + 1]!;
      return encodeSnatRev({ client: '192.0.2.8', vip: VIP, clientPort: 1024 + i, vipPort: 80, realId: 7, state: kind.state, createdNs: 1n,
        lastSeenNs: kind.seen, owner: kind.owner });
    })), m);
    let counted = false;
    let ranBeforeCount = false;
    setImmediate(() => { ranBeforeCount = !counted; });
    // the live ones (LIVE, also own, open and recent) count too
    t.is(await countActiveOwnTranslations(o, 30n * 1_000_000_000n, sweepAt), OWN + LIVE, 'a peer\'s, a closing and an idle one are not counted');
    counted = true;
    t.true(ranBeforeCount);
  } finally {
    snatDp.close();
  }
});

test.serial('the drain watch\'s count of connections reads the connection table in pages too: a pause after each page, every entry counted once', async (t) => {
  const ct = obj.map('lb_conntrack');
  const key0 = key(0);
  const held = Buffer.from(ct.lookup(key0)!);
  t.teardown(() => ct.update(key0, held));
  // one entry seen here just now (xdp_lb's coarse last-seen); the rest were inserted with none (0)
  ct.update(key0, encodeFlowValue({ realId: 7, serviceId: 1, realSlot: 1, lastSeen: Number(monotonicNs() >> FLOW_LAST_SEEN_SHIFT), chosenNs: 1_000_000n }));
  let pauses = 0;
  const n = await connectionsSeenWithin(ct, 30, monotonicNs(), async () => { pauses++; await nextTurn(); });
  t.is(n, 1);
  t.true(pauses >= Math.ceil(N / SCAN_PAGE_ENTRIES), `${pauses} pauses for ${N} entries`);
});
