// A change of Cluster.spec.conntrack.maxEntries takes effect on a running lb data plane (src/bpf/dataplane/resize.ts):
// the connection table (and the SNAT tables sized with it) is replaced by one of the new size, its entries copied,
// and no established flow loses its real. Flows are put in the table by the real xdp_lb through BPF_PROG_TEST_RUN
// (ACKs of flows the table does not know: a miss records the flow); after the resize the ring is changed to pick
// another real, so a flow that still reaches its first real can only have found it in the copied table. No interface
// here (the packets stop at the next-hop lookup, after the connection table and the counters); the swap in a pinned
// XDP link is test/netns/xdp-resize-link-netns.test.ts.
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { BpfMap, MapType, onCpu, onlineCpus, possibleCpus, type BpfError } from '../../src/bpf/libbpf.js';
import { mergeSinceCopy } from '../../src/bpf/dataplane/resize.js';
import { encodeU32 } from '../../src/bpf/dataplane/codec.js';
import { describeOp } from '../../src/render/ops-text.js';
import { makeState } from '../lib/lb-state.js';
import { runMoved } from '../lib/xdp-run-moved.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import { applyTo, planOf } from '../lib/converge.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-ctresz`;
const VIP = '203.0.113.10';
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12' };
const ring = (id: number) => Array.from({ length: 7 }, () => id);
const state = (real: number, conntrackMaxEntries: number) => makeState({ reals: REALS, hashSeed: 3, conntrackMaxEntries,
  services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: ring(real) }] });
const ack = (sport: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: '192.0.2.1', dst: VIP, l4: { tcp: { sport, dport: 80, flags: TCP_FLAGS.ACK } } }));
const TABLES = ['lb_conntrack', 'lb_snat_fwd', 'lb_snat_rev', 'lb_affinity'];

let dp: LbDataPlaneHandle | null = null;
test.before(() => rmSync(PIN, { recursive: true, force: true }));
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

/** One packet through the loaded xdp_lb; the counters that moved (test/lib/xdp-run-moved.ts). */
const run = (data: Buffer) => runMoved(dp!, data);

/** max_entries and kernel id of each table, from its pin. */
function pinned(): Record<string, { max: number; id: number }> {
  return Object.fromEntries(TABLES.map((name) => {
    const m = BpfMap.open(join(PIN, name), name);
    try {
      return [name, { max: m.maxEntries, id: m.id() }];
    } finally {
      m.close();
    }
  }));
}

const progId = () => dp!.object()!.program('xdp_lb').info().id;
const FLOWS = Array.from({ length: 200 }, (_, i) => 41000 + i);

test.serial('grow: the pinned tables get the new size and every flow keeps its real', async (t) => {
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, state(1, 1024));
  for (const sport of FLOWS) t.like(await run(ack(sport)), { ct_miss: 1, 'real:1': 1 });
  const before = pinned();
  t.is(before.lb_conntrack!.max, 1024);
  const prog = progId();

  const ops = await planOf(dp, state(1, 8192));
  t.log(ops.map(describeOp).join('\n'));
  t.deepEqual(ops, TABLES.map((map) => ({ op: 'table.resize', map, from: 1024, to: 8192 })));
  const report = await dp.execute(ops);
  t.like(report, { ops: 4, mapWrites: 4, mapDeletes: 0, ringSwitches: 0 });
  const after = pinned();
  for (const name of TABLES) {
    t.is(after[name]!.max, 8192, name);
    t.not(after[name]!.id, before[name]!.id, `${name}: a new map`);
    t.is(dp.object()!.map(name).id(), after[name]!.id, `${name}: the program uses the pinned map`);
  }
  t.not(progId(), prog, 'a new instance of xdp_lb');
  t.is(dp.resized!.lb_conntrack!.copied, FLOWS.length);
  t.deepEqual(await planOf(dp, state(1, 8192)), [], 'nothing left to do');

  // the ring now picks real 2: a flow that still reaches real 1 found its entry in the copied table
  await applyTo(dp, state(2, 8192));
  t.like(await run(ack(50000)), { ct_miss: 1, 'real:2': 1 }, 'control: a new flow goes to real 2');
  for (const sport of FLOWS) t.like(await run(ack(sport)), { ct_hit: 1, 'real:1': 1 }, `flow ${sport}`);
});

test.serial('an unchanged size plans no resize and writes nothing', async (t) => {
  const before = pinned();
  const prog = progId();
  t.deepEqual(await planOf(dp!, state(2, 8192)), []);
  const report = await applyTo(dp!, state(2, 8192));
  t.is(report.mapWrites, 0);
  t.is(report.ops, 0);
  t.deepEqual(pinned(), before);
  t.is(progId(), prog, 'the program was not replaced');
});

test.serial('shrink: the flows that fit are kept', async (t) => {
  const ops = await planOf(dp!, state(2, 2048));
  t.deepEqual(ops.map((o) => o.op), TABLES.map(() => 'table.resize'));
  await dp!.execute(ops);
  t.is(pinned().lb_conntrack!.max, 2048);
  t.is(dp!.resized!.lb_conntrack!.copied, FLOWS.length + 1);
  for (const sport of FLOWS) t.like(await run(ack(sport)), { ct_hit: 1, 'real:1': 1 }, `flow ${sport}`);
});

test.serial('a size the kernel refuses: a CapacityExceeded (ENOSPC) error naming it, and everything as it was', async (t) => {
  const before = pinned();
  const prog = progId();
  // the same apply also changes the ring: nothing of it may be written either
  const err = await t.throwsAsync(applyTo(dp!, state(1, 0xffffffff))) as BpfError;
  t.like(err, { code: 'CapacityExceeded', errno: 'ENOSPC' });
  t.regex(err.message, /lb_conntrack: the kernel refused a table of 4294967295 entries .*the table of 2048 entries stays in place/);
  t.deepEqual(pinned(), before);
  t.is(progId(), prog);
  t.deepEqual(TABLES.map((n) => [`${n}_next`, BpfMapExists(join(PIN, `${n}_next`))]), TABLES.map((n) => [`${n}_next`, false]));
  t.like(await run(ack(50001)), { ct_miss: 1, 'real:2': 1 }, 'the ring change was not applied');
  for (const sport of FLOWS.slice(0, 20)) t.like(await run(ack(sport)), { ct_hit: 1, 'real:1': 1 });
});

function BpfMapExists(path: string): boolean {
  try {
    BpfMap.open(path).close();
    return true;
  } catch {
    return false;
  }
}

// ------------------------------------------------------------------ per-CPU shares

/** Runs packets through xdp_lb (on `cpu` when given: BPF_PROG_TEST_RUN runs on the caller's CPU); the sums of the
 * counters that moved. */
async function runAll(packets: Buffer[], cpu?: number): Promise<{ ctHit: number; ctMiss: number; real1: number; real2: number }> {
  const before = await dp!.counters();
  const prog = dp!.object()!.program('xdp_lb');
  const send = () => {
    for (const data of packets) prog.testRun({ data, ctxIn: Buffer.concat([Buffer.alloc(4), encodeU32(data.length), Buffer.alloc(16)]) });
  };
  if (cpu === undefined) send();
  else onCpu(cpu, send);
  const after = await dp!.counters();
  const n = (k: string) => (after[k] as number) - (before[k] as number);
  const pk = (k: string) => ((after[k] as Record<string, number> | undefined)?.packets ?? 0) - ((before[k] as Record<string, number> | undefined)?.packets ?? 0);
  return { ctHit: n('ct_hit'), ctMiss: n('ct_miss'), real1: pk('real:1'), real2: pk('real:2') };
}

// lb_conntrack gives each possible CPU a share of max_entries (BPF_F_NO_COMMON_LRU) and takes an insert from the
// share of the CPU it runs on: 800 flows, half from each CPU, fit a table of 1,024 on 2 CPUs and one of 1,536, but
// copied from one CPU they would not (768 a share). The copy is spread over the CPUs as the traffic was.
(onlineCpus().length === 2 && possibleCpus() === 2 ? test.serial : test.serial.skip)(
  'a grow keeps every flow even when they exceed one CPU\'s share of the new table', async (t) => {
    await applyTo(dp!, state(1, 1024));
    const cpuFlows = [Array.from({ length: 400 }, (_, i) => 43000 + i), Array.from({ length: 400 }, (_, i) => 44000 + i)];
    for (const [cpu, flows] of cpuFlows.entries())
      t.like(await runAll(flows.map(ack), onlineCpus()[cpu]!), { ctMiss: 400, real1: 400 }, `CPU ${cpu}`);
    await applyTo(dp!, state(1, 1536));
    t.is(pinned().lb_conntrack!.max, 1536);
    t.true(dp!.resized!.lb_conntrack!.copied >= 800);
    await applyTo(dp!, state(2, 1536));
    t.deepEqual(await runAll(cpuFlows.flat().map(ack)), { ctHit: 800, ctMiss: 0, real1: 800, real2: 0 });
  });

// ------------------------------------------------------------------ SNAT translations

const SNAT_VIP = '203.0.113.20';
const snatState = (real: number, conntrackMaxEntries: number) => {
  const s = makeState({ reals: REALS, hashSeed: 3, conntrackMaxEntries,
    services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: ring(1) }, { id: 2, vip: SNAT_VIP, forwarding: 'snat', ring: ring(real) }] });
  return { ...s, snatAddress: '192.0.2.100', snatPorts: { min: 40000, max: 40999 } };
};
const snatPacket = (sport: number, flags: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: '192.0.2.1', dst: SNAT_VIP, l4: { tcp: { sport, dport: 80, flags } } }));
const SNAT_FLOWS = Array.from({ length: 60 }, (_, i) => 42000 + i);
const dump = (name: string) => dp!.object()!.map(name).entries().map(([k, v]) => k.toString('hex') + v.toString('hex')).sort();

test.serial('SNAT: every translation is carried over byte for byte and still used', async (t) => {
  await applyTo(dp!, snatState(1, 2048));
  for (const sport of SNAT_FLOWS) t.like(await run(snatPacket(sport, TCP_FLAGS.SYN)), { snat_new: 1 });
  const fwd = dump('lb_snat_fwd');
  const rev = dump('lb_snat_rev');
  t.is(rev.length, SNAT_FLOWS.length);
  await applyTo(dp!, snatState(2, 4096));
  t.is(pinned().lb_snat_rev!.max, 4096);
  t.deepEqual(dump('lb_snat_fwd'), fwd);
  t.deepEqual(dump('lb_snat_rev'), rev);
  // the ring now says real 2: a translation found in the new tables keeps the flow on real 1
  for (const sport of SNAT_FLOWS) t.like(await run(snatPacket(sport, TCP_FLAGS.ACK)), { snat_hit: 1, 'real:1': 1 }, `flow ${sport}`);
});

test.serial('SNAT: a shrink below the live translations is refused and changes nothing', async (t) => {
  const before = pinned();
  const prog = progId();
  const err = await t.throwsAsync(applyTo(dp!, snatState(2, 32))) as BpfError;
  t.like(err, { code: 'CapacityExceeded', errno: 'ENOSPC' });
  t.regex(err.message, /lb_snat_fwd: 60 live translations do not fit in 32 entries/);
  t.deepEqual(pinned(), before, 'the connection table, already copied when SNAT was refused, is not swapped in either');
  t.is(progId(), prog);
  t.false(BpfMapExists(join(PIN, 'lb_conntrack_next')));
});

// ------------------------------------------------------------------ the merge after the swap

test('merge: what the old program wrote after the copy reaches the new table unless the new one wrote it first', (t) => {
  const spec = (name: string, type: number, maxEntries: number) => ({ name, type, keySize: 4, valueSize: 4, maxEntries });
  for (const [type, name] of [[MapType.hash, 'plain hash'], [MapType.lruHash, 'LRU hash']] as const) {
    const old = BpfMap.create(spec('old', type, 64));
    const neu = BpfMap.create(spec('neu', type, 128));
    try {
      const k = (n: number) => encodeU32(n);
      for (const n of [1, 2, 3, 4, 5]) old.update(k(n), k(100 + n));
      const base = old.lookupBatch();
      for (const n of [1, 2, 3, 4, 5]) neu.update(k(n), k(100 + n)); // the copy
      // the old program, between the copy and the swap: changes 1 and 2, deletes 3 and 4, inserts 6 and 7
      old.update(k(1), k(201)); old.update(k(2), k(202)); old.delete(k(3)); old.delete(k(4));
      old.update(k(6), k(206)); old.update(k(7), k(207));
      // the new program, after the swap: changes 2, writes 4 anew, inserts 7
      neu.update(k(2), k(302)); neu.update(k(4), k(304)); neu.update(k(7), k(307));
      const counts = mergeSinceCopy(base, old, neu);
      const got = Object.fromEntries(neu.entries().map(([kk, v]) => [kk.readUInt32LE(0), v.readUInt32LE(0)]));
      const lru = type === MapType.lruHash;
      t.deepEqual(got, { 1: 201, 2: 302, ...(lru ? { 3: 103 } : {}), 4: 304, 5: 105, 6: 206, 7: 307 }, name);
      t.deepEqual(counts, { written: 2, deleted: lru ? 0 : 1, lost: 0 }, name);
    } finally {
      old.close();
      neu.close();
    }
  }
});
