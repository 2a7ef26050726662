// Dense slots of the LB data plane (docs/datapath.md, Maps): every real gets a slot of its own that
// lb_real_slots names it in, connection-table hits find the real through it, a removed real's entries miss,
// reals adopted from pins without slots (and their rings of real ids) are given slots at load, and a service's traffic counters live in the
// stats slot its listeners carry, zeroed when the slot is given to another service. Listeners and settings pinned
// in the older, shorter layouts are carried over at load. The real program runs
// through BPF_PROG_TEST_RUN; no interface is involved (the packets stop at the next-hop lookup, after the
// connection table and the counters this checks).
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { BpfMap, MapType } from '../../src/bpf/libbpf.js';
import { encodeReal, encodeU32, realSlotOf } from '../../src/bpf/dataplane/codec.js';
import { makeState } from '../lib/lb-state.js';
import { runMoved } from '../lib/xdp-run-moved.js';
import { pinIdRings } from '../lib/old-rings.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import { applyTo, planOf } from '../lib/converge.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-xslot`;
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12', 3: '198.51.100.13' };
const ring = (id: number) => Array.from({ length: 7 }, () => id);
const state = (services: Array<{ id: number; vip: string; real: number }>, reals: Record<number, string> = REALS) =>
  makeState({ reals, hashSeed: 3, conntrackMaxEntries: 4096,
    services: services.map((s) => ({ id: s.id, vip: s.vip, forwarding: 'dsr-l2' as const, ring: ring(s.real) })) });
const ack = (vip: string, sport: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: '192.0.2.1', dst: vip, l4: { tcp: { sport, dport: 80, flags: TCP_FLAGS.ACK } } }));

let dp: LbDataPlaneHandle | null = null;
test.before(() => rmSync(PIN, { recursive: true, force: true }));
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

/** One packet through the loaded xdp_lb; the counters that moved (test/lib/xdp-run-moved.ts). */
const run = (data: Buffer) => runMoved(dp!, data);

/** real id -> [slot, the id lb_real_slots holds at that slot] */
function slots(): Map<number, [number, number]> {
  const o = dp!.object()!;
  return new Map(o.map('lb_reals').entries().map(([k, v]) => {
    const slot = realSlotOf(v);
    return [k.readUInt32LE(0), [slot, o.map('lb_real_slots').lookup(encodeU32(slot))!.readUInt32LE(0)]];
  }));
}

test.serial('every real has a slot of its own that names it; a connection-table hit goes through it', async (t) => {
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, state([{ id: 1, vip: '203.0.113.10', real: 1 }, { id: 2, vip: '203.0.113.11', real: 2 }]));
  const s = slots();
  t.is(new Set([...s.values()].map(([slot]) => slot)).size, 3);
  for (const [id, [, named]] of s) t.is(named, id);
  t.like(await run(ack('203.0.113.10', 40000)), { ct_miss: 1 });
  t.like(await run(ack('203.0.113.10', 40000)), { ct_hit: 1 });
});

test.serial('a removed real frees its slot: its connection-table entries miss and go back to the ring', async (t) => {
  await applyTo(dp!, state([{ id: 1, vip: '203.0.113.10', real: 3 }, { id: 2, vip: '203.0.113.11', real: 2 }], { 2: REALS[2], 3: REALS[3] }));
  t.false(slots().has(1));
  const moved = await run(ack('203.0.113.10', 40000));
  t.is(moved.ct_hit, undefined);
  t.is(moved.ct_miss, 1);
  t.like(await run(ack('203.0.113.10', 40000)), { ct_hit: 1 }, 're-inserted with the real the ring gives now');
});

test.serial('reals pinned by a version without slots are given slots at load', async (t) => {
  const want = state([{ id: 1, vip: '203.0.113.10', real: 3 }, { id: 2, vip: '203.0.113.11', real: 2 }], { 2: REALS[2], 3: REALS[3] });
  const o = dp!.object()!;
  for (const [k, v] of o.map('lb_reals').entries()) {
    const id = k.readUInt32LE(0);
    o.map('lb_reals').update(k, encodeReal((REALS as Record<number, string>)[id]!, 4)); // slot 0, as old pins say
    o.map('lb_real_slots').update(encodeU32(realSlotOf(v)), Buffer.alloc(24));
  }
  dp!.close();
  pinIdRings(PIN, want.services); // and that version's rings held real ids
  dp = await openLbDataPlane({ pinRoot: PIN });
  const s = slots();
  t.is(new Set([...s.values()].map(([slot]) => slot)).size, s.size);
  for (const [id, [, named]] of s) t.is(named, id);
  t.deepEqual(await planOf(dp, want), [], 'slots are not part of what the plan compares');
  await run(ack('203.0.113.10', 40001));
  t.like(await run(ack('203.0.113.10', 40001)), { ct_hit: 1 });
});

test.serial('service traffic is counted in the slot its listeners carry; a reused slot starts at zero', async (t) => {
  const before = (await dp!.counters())['service:2'] as { packets: number };
  await run(ack('203.0.113.11', 41000));
  await run(ack('203.0.113.11', 41000));
  t.is(((await dp!.counters())['service:2'] as { packets: number }).packets - before.packets, 2);
  const slotOf = (id: number) => dp!.object()!.map('lb_vips').entries()
    .map(([, v]) => v).find((v) => v.readUInt32LE(0) === id)?.readUInt32LE(8);
  const old = slotOf(2);
  await applyTo(dp!, state([{ id: 1, vip: '203.0.113.10', real: 3 }], { 3: REALS[3] }));
  t.is((await dp!.counters())['service:2'], undefined);
  await applyTo(dp!, state([{ id: 1, vip: '203.0.113.10', real: 3 }, { id: 7, vip: '203.0.113.12', real: 3 }], { 3: REALS[3] }));
  t.is(slotOf(7), old, 'the freed slot is given to the next new service');
  t.like((await dp!.counters())['service:7'], { packets: 0, bytes: 0, newFlows: 0 });
  await run(ack('203.0.113.12', 42000));
  t.like((await dp!.counters())['service:7'], { packets: 1 });
});

test.serial('listeners and settings pinned in the older layouts (8-byte lb_vips values, 64-byte lb_config) are carried over', async (t) => {
  const want = state([{ id: 1, vip: '203.0.113.10', real: 3 }, { id: 7, vip: '203.0.113.12', real: 3 }], { 3: REALS[3] });
  await applyTo(dp!, want);
  const o = dp!.object()!;
  const vips = o.map('lb_vips').entries().map(([k, v]) => [Buffer.from(k), Buffer.from(v.subarray(0, 8))] as const);
  const config = Buffer.from(o.map('lb_config').lookup(encodeU32(0))!.subarray(0, 64));
  dp!.close();
  dp = null;
  for (const [name, valueSize, type, maxEntries, entries] of [
    ['lb_vips', 8, MapType.hash, 4096, vips], ['lb_config', 64, MapType.array, 1, [[encodeU32(0), config]]],
  ] as const) {
    rmSync(`${PIN}/${name}`);
    const m = BpfMap.create({ name, type, keySize: name === 'lb_vips' ? 20 : 4, valueSize, maxEntries });
    for (const [k, v] of entries) m.update(k, v);
    m.pin(`${PIN}/${name}`);
    m.close();
  }
  dp = await openLbDataPlane({ pinRoot: PIN });
  t.is(dp.object()!.map('lb_vips').valueSize, 16);
  t.deepEqual(await planOf(dp, want), [], 'nothing to re-apply: listeners, markers and settings came across');
  const slotsOf = dp.object()!.map('lb_vips').entries().filter(([k]) => k.readUInt16BE(16) !== 0).map(([, v]) => v.readUInt32LE(8));
  t.is(new Set(slotsOf).size, 2, 'one stats slot per service');
  t.like(await run(ack('203.0.113.12', 43000)), { ct_miss: 1 });
  t.like((await dp.counters())['service:7'], { packets: 1 });
});

test.serial('listeners pinned with 12-byte lb_vips values (before session affinity) keep their stats slots, no affinity', async (t) => {
  const want = state([{ id: 1, vip: '203.0.113.10', real: 3 }, { id: 7, vip: '203.0.113.12', real: 3 }], { 3: REALS[3] });
  await applyTo(dp!, want);
  const vips = dp!.object()!.map('lb_vips').entries().map(([k, v]) => [Buffer.from(k), Buffer.from(v.subarray(0, 12))] as const);
  const slots = new Map(vips.map(([k, v]) => [k.toString('hex'), v.readUInt32LE(8)]));
  dp!.close();
  dp = null;
  rmSync(`${PIN}/lb_vips`);
  const m = BpfMap.create({ name: 'lb_vips', type: MapType.hash, keySize: 20, valueSize: 12, maxEntries: 4096 });
  for (const [k, v] of vips) m.update(k, v);
  m.pin(`${PIN}/lb_vips`);
  m.close();
  dp = await openLbDataPlane({ pinRoot: PIN });
  const now = dp.object()!.map('lb_vips');
  t.is(now.valueSize, 16);
  t.deepEqual(await planOf(dp, want), [], 'nothing to re-apply');
  for (const [k, v] of now.entries()) {
    t.is(v.readUInt32LE(8), slots.get(Buffer.from(k).toString('hex')), 'the stats slot is kept');
    t.is(v.readUInt32LE(12), 0, 'no affinity timeout');
  }
  t.like(await run(ack('203.0.113.12', 44000)), { ct_miss: 1 });
});

test.serial('connection-table entries pinned with 12-byte values (before the recency mark) are carried over, marked "chosen at an unknown time"', async (t) => {
  // the flow was given real 3 by an older table; the table now sends new flows to real 2
  const older = state([{ id: 1, vip: '203.0.113.10', real: 3 }], { 2: REALS[2], 3: REALS[3] });
  await applyTo(dp!, older);
  const table = dp!.object()!.map('lb_conntrack');
  for (const k of table.keys()) table.delete(k); // the earlier tests' flows
  await run(frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
    ipPacket({ src: '192.0.2.1', dst: '203.0.113.10', l4: { tcp: { sport: 45000, dport: 80, flags: TCP_FLAGS.SYN } } })));
  const ct = dp!.object()!.map('lb_conntrack');
  const entries = ct.entries().map(([k, v]) => [Buffer.from(k), Buffer.from(v.subarray(0, 12))] as const);
  t.is(entries.length, 1);
  t.is(entries[0]![1].readUInt32LE(0), 3);
  const maxEntries = ct.maxEntries;
  dp!.close();
  dp = null;
  rmSync(`${PIN}/lb_conntrack`);
  const m = BpfMap.create({ name: 'lb_conntrack', type: MapType.lruHash, keySize: 40, valueSize: 12, maxEntries });
  for (const [k, v] of entries) m.update(k, v);
  m.pin(`${PIN}/lb_conntrack`);
  m.close();
  dp = await openLbDataPlane({ pinRoot: PIN });
  const now = dp.object()!.map('lb_conntrack');
  t.is(now.valueSize, 24);
  const v = Buffer.from(now.lookup(entries[0]![0])!);
  t.deepEqual(v.subarray(0, 12), entries[0]![1], 'real, service and slot kept');
  t.is(v.readBigUInt64LE(16), 0n, 'recency mark 0: chosen at an unknown time');
  await applyTo(dp, state([{ id: 1, vip: '203.0.113.10', real: 2 }], { 2: REALS[2], 3: REALS[3] }));
  t.like(await run(ack('203.0.113.10', 45000)), { ct_hit: 1, 'real:3': 1 }, 'the established flow keeps its real across the upgrade');
});
