// Rings of real slots (docs/datapath.md, "Maps"): a ring is rendered, planned and digested in real ids, while its
// inner array holds this node's real slot + 1 of each entry, so a new flow finds its real in the array
// lb_real_slots. Checked here with the real program through BPF_PROG_TEST_RUN (no interface: packets stop at the
// next-hop lookup, after the ring, the connection table and the per-real counters this reads): the ring picks
// the real the reference flow hash says; a slot freed under a ring is never forwarded; the executor refuses to
// free the slot of a real a live ring names; a restarted data plane reads slots back as ids (same digests); and
// pins from the version whose rings held real ids, and from the version whose rings held one word per element,
// are rebuilt at load in blocks (established flows keep their reals, new ones go by the table the pin held).
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, readPinnedLbLive, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { encodeU32, realSlotOf } from '../../src/bpf/dataplane/codec.js';
import { BPF_F_RDONLY_PROG, readRing, ringsArePacked } from '../../src/bpf/dataplane/rings.js';
import { ringSlot } from '../../src/bpf/dataplane/flow-hash.js';
import { makeState } from '../lib/lb-state.js';
import { runMoved } from '../lib/xdp-run-moved.js';
import { pinIdRings, pinWordSlotRings } from '../lib/old-rings.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import type { DesiredState } from '../../src/render/state.js';
import { applyTo, planOf } from '../lib/converge.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-xrslot`;
const SEED = 5;
const VIP = '203.0.113.30';
const CLIENT = '192.0.2.7';
const ADDR: Record<number, string> = { 7: '198.51.100.21', 42: '198.51.100.22', 101: '198.51.100.23', 555: '198.51.100.24', 900: '198.51.100.25' };
/** A 13-entry ring interleaving `ids` (real ids chosen so that no id equals its slot + 1). */
const ring13 = (ids: number[]) => Array.from({ length: 13 }, (_, i) => ids[(i * 5) % ids.length]!);
const state = (ids: number[], ring: number[] = ring13(ids)): DesiredState => makeState({
  reals: Object.fromEntries(ids.map((id) => [id, ADDR[id]!])), hashSeed: SEED, conntrackMaxEntries: 4096,
  services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring }],
});
const tcp = (sport: number, flags: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: CLIENT, dst: VIP, l4: { tcp: { sport, dport: 80, flags } } }));
const ack = (sport: number) => tcp(sport, TCP_FLAGS.ACK);
const syn = (sport: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: CLIENT, dst: VIP, l4: { tcp: { sport, dport: 80, flags: TCP_FLAGS.SYN } } }));
/** The real id the rendered ring gives the flow from `sport` (flow-hash.ts is the program's reference). */
const expected = (d: DesiredState, sport: number) => {
  const s = d.services[0]!;
  return s.ring[ringSlot({ src: CLIENT, dst: VIP, sport, dport: 80, proto: 6 }, true, SEED, s.tableSize)]!;
};

let dp: LbDataPlaneHandle | null = null;
test.before(() => rmSync(PIN, { recursive: true, force: true }));
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

/** One packet through the loaded xdp_lb; the counters that moved (test/lib/xdp-run-moved.ts). */
const run = (data: Buffer) => runMoved(dp!, data);

/** real id -> its slot on this node */
const slotsOfReals = () => new Map(dp!.object()!.map('lb_reals').entries().map(([k, v]) => [k.readUInt32LE(0), realSlotOf(v)]));

/** The entries service 1's inner array holds (slots + 1). */
function innerEntries(): number[] {
  const inner = dp!.object()!.map('lb_rings').openInner(encodeU32(1))!;
  try {
    return [...readRing(inner)];
  } finally {
    inner.close();
  }
}

/** Every SYN from `sports` goes to the real the rendered ring names, counted as a new flow of that real only. */
async function picksAsRendered(t: import('ava').ExecutionContext, d: DesiredState, sports: number[]): Promise<void> {
  for (const sport of sports) {
    const want = expected(d, sport);
    const moved = await run(syn(sport));
    t.is(moved.ct_miss, 1, `sport ${sport}`);
    const reals = Object.keys(moved).filter((k) => k.startsWith('real:'));
    t.deepEqual(reals, [`real:${want}`], `sport ${sport}: the ring names real ${want}`);
  }
}

const SPORTS = Array.from({ length: 48 }, (_, i) => 41000 + i);

test.serial('a ring holds real slots + 1 and picks the real the rendered ring (in ids) names', async (t) => {
  dp = await openLbDataPlane({ pinRoot: PIN });
  const d = state([7, 42, 101]);
  await applyTo(dp, d);
  const slots = slotsOfReals();
  t.deepEqual([...slots.keys()].sort((a, b) => a - b), [7, 42, 101]);
  t.deepEqual(innerEntries(), [...d.services[0]!.ring].map((id) => slots.get(id)! + 1), 'slot + 1 of each entry');
  t.true(innerEntries().some((e, i) => e !== d.services[0]!.ring[i]), 'ids and slots + 1 differ here (the test can tell them apart)');
  t.not(dp.object()!.map('lb_rings').flags & BPF_F_RDONLY_PROG, 0);
  const live = await dp.readLive({ tables: true });
  t.deepEqual([...live.services[0]!.ring!], [...d.services[0]!.ring], 'read back in real ids');
  t.is(live.services[0]!.digest, d.services[0]!.digest);
  await picksAsRendered(t, d, SPORTS);
});

test.serial('a freed slot reached from a stale ring is dropped (drop_real_missing), never forwarded to another real', async (t) => {
  const d = state([7, 42, 101]);
  const slot = slotsOfReals().get(101)!;
  const realSlots = dp!.object()!.map('lb_real_slots');
  const kept = Buffer.from(realSlots.lookup(encodeU32(slot))!);
  realSlots.update(encodeU32(slot), Buffer.alloc(24)); // what real.delete leaves: real id 0
  try {
    const to101 = SPORTS.map((p) => p + 1000).filter((p) => expected(d, p) === 101);
    t.true(to101.length > 3);
    for (const sport of to101) {
      const moved = await run(syn(sport));
      t.is(moved.drop_real_missing, 1);
      t.deepEqual(Object.keys(moved).filter((k) => k.startsWith('real:')), [], 'no real counted the flow');
      t.like(await run(syn(sport)), { ct_miss: 1 }, 'and nothing entered the connection table');
    }
  } finally {
    realSlots.update(encodeU32(slot), kept);
  }
});

test.serial('the executor refuses to free the slot of a real a live ring names; a plan frees it after the switch', async (t) => {
  const slots = slotsOfReals();
  const real = { id: 101, address: ADDR[101]!, family: 4 as const };
  const err = await t.throwsAsync(dp!.execute([{ op: 'real.delete', real }]));
  t.regex(err!.message, /real\.delete of real 101: the ring of service 1 in lb_rings still names it/);
  t.deepEqual(slotsOfReals(), slots, 'nothing changed');
  t.is(dp!.object()!.map('lb_real_slots').lookup(encodeU32(slots.get(101)!))!.readUInt32LE(0), 101);
  // the planned removal (ring switched away first, then the real deleted) goes through; a real added later
  // reuses the freed slot and the ring naming it picks that real
  const without = state([7, 42, 555]);
  const ops = await planOf(dp!, without);
  const at = (op: string) => ops.findIndex((o) => o.op === op);
  t.true(at('service.switch') < at('real.delete'));
  await dp!.execute(ops);
  t.false(slotsOfReals().has(101));
  const d = state([7, 42, 555, 900]);
  await applyTo(dp!, d);
  t.is(slotsOfReals().get(900), slots.get(101), 'the freed slot went to the next new real');
  await picksAsRendered(t, d, SPORTS.map((p) => p + 2000));
});

test.serial('a restarted data plane reads the slots back as real ids: same digests, nothing to plan', async (t) => {
  const d = state([7, 42, 555, 900]);
  const before = await dp!.readLive();
  dp!.close();
  dp = await openLbDataPlane({ pinRoot: PIN }); // a new process: its ring cache is empty
  const after = await dp.readLive();
  t.deepEqual(after.services.map((s) => [s.id, s.tableSize, s.digest, s.mapId, s.reals]),
    before.services.map((s) => [s.id, s.tableSize, s.digest, s.mapId, s.reals]));
  t.is(after.services[0]!.digest, d.services[0]!.digest);
  t.deepEqual(await planOf(dp, d), []);
  t.is((await dp.readLive({ verify: true })).services[0]!.digest, d.services[0]!.digest);
  t.is(readPinnedLbLive(PIN).services[0]!.digest, d.services[0]!.digest, 'gitlb plan --live reads the same');
});

test.serial('pins whose rings hold real ids are rebuilt in slots at load; an entry naming a real the node lacks reads as no real', async (t) => {
  const d = state([7, 42, 555, 900]);
  const other = { id: 2, ring: [7, 9999, 42] }; // names a real lb_reals does not hold (the old program dropped those)
  dp!.close();
  dp = null;
  pinIdRings(PIN, [...d.services, other]);
  // gitlb plan --live against a node still on the old version reads its ids as they are
  const old = readPinnedLbLive(PIN, { tables: true });
  t.deepEqual(old.services.map((s) => [s.id, [...s.ring!]]), [[1, [...d.services[0]!.ring]], [2, other.ring]]);
  const oldPin = BpfMap.open(`${PIN}/lb_rings`);
  t.is(oldPin.flags & BPF_F_RDONLY_PROG, 0);
  oldPin.close();

  dp = await openLbDataPlane({ pinRoot: PIN });
  t.not(dp.object()!.map('lb_rings').flags & BPF_F_RDONLY_PROG, 0, 'lb_rings is of the slot layout now');
  const slots = slotsOfReals();
  t.deepEqual(innerEntries(), [...d.services[0]!.ring].map((id) => slots.get(id)! + 1));
  const live = await dp.readLive({ tables: true });
  t.deepEqual([...live.services.find((s) => s.id === 1)!.ring!], [...d.services[0]!.ring]);
  t.deepEqual([...live.services.find((s) => s.id === 2)!.ring!], [7, 0, 42], 'the unknown real reads as no real');
  await picksAsRendered(t, d, SPORTS.map((p) => p + 3000));
  // service 1 came across unchanged; service 2 is not in the desired state and goes
  t.deepEqual((await planOf(dp, d)).map((o) => o.op), ['service.delete']);
  await applyTo(dp, d);
  t.deepEqual(await planOf(dp, d), []);
  // loading again finds the slot layout and rebuilds nothing
  const mapId = (await dp.readLive()).services[0]!.mapId;
  dp.close();
  dp = await openLbDataPlane({ pinRoot: PIN });
  t.is((await dp.readLive()).services[0]!.mapId, mapId);
});

test.serial('pins whose rings are one word per element are rebuilt in blocks at load: established flows keep their reals, new flows go by the pinned ring', async (t) => {
  const d = state([7, 42, 555, 900]);
  await applyTo(dp!, d);
  // flows established under the rendered ring
  const established = new Map<number, number>();
  for (const sport of SPORTS.map((p) => p + 5000)) {
    const moved = await run(syn(sport));
    t.is(moved.ct_miss, 1);
    established.set(sport, expected(d, sport));
  }
  // the pins of the version before blocks, holding another table (so its picks can be told from the rendered ones)
  const pinnedIds = ring13([42, 900]);
  const slots = slotsOfReals();
  const pinnedSlots = Uint32Array.from(pinnedIds, (id) => slots.get(id)! + 1);
  dp!.close();
  dp = null;
  pinWordSlotRings(PIN, [{ id: 1, ring: pinnedSlots }]);
  const oldPin = BpfMap.open(`${PIN}/lb_rings`);
  t.false(ringsArePacked(oldPin));
  oldPin.close();
  const pinned = state([7, 42, 555, 900], pinnedIds);
  t.deepEqual([...readPinnedLbLive(PIN, { tables: true }).services[0]!.ring!], pinnedIds, 'gitlb plan --live reads the old layout');

  dp = await openLbDataPlane({ pinRoot: PIN });
  t.true(ringsArePacked(dp.object()!.map('lb_rings')), 'lb_rings is of the block layout now');
  const inner = dp.object()!.map('lb_rings').openInner(encodeU32(1))!;
  t.is(inner.valueSize, 64);
  t.is(inner.maxEntries, 1, '1 + 13 entries + 1 bitmap word fit one block');
  inner.close();
  t.deepEqual(innerEntries(), [...pinnedSlots], 'the same entries');
  t.is((await dp.readLive()).services[0]!.digest, pinned.services[0]!.digest, 'the digest of the table it held');
  for (const [sport, real] of established) {
    const moved = await run(ack(sport));
    t.is(moved.ct_miss, undefined, `sport ${sport}: found in the connection table`);
    t.deepEqual(Object.keys(moved).filter((k) => k.startsWith('real:')), [`real:${real}`], `sport ${sport} stays on real ${real}`);
  }
  await picksAsRendered(t, pinned, SPORTS.map((p) => p + 6000));
  // the next apply switches to the rendered table
  t.deepEqual((await planOf(dp, d)).map((o) => o.op), ['ring.fill', 'service.switch']);
  await applyTo(dp, d);
  await picksAsRendered(t, d, SPORTS.map((p) => p + 7000));
});
