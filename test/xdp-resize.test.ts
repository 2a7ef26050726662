// A change of Cluster.spec.conntrack.maxEntries takes effect on a running lb data plane (src/bpf/dataplane/resize.ts):
// the connection table (and the SNAT tables sized with it) is replaced by one of the new size, its entries copied,
// and no established flow loses its real. Flows are put in the table by the real xdp_lb through BPF_PROG_TEST_RUN
// (ACKs of flows the table does not know: a miss records the flow); after the resize the ring is changed to pick
// another real, so a flow that still reaches its first real can only have found it in the copied table. No interface
// here (the packets stop at the next-hop lookup, after the connection table and the counters); the swap in a pinned
// XDP link is test/xdp-resize-link-netns.test.ts.
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openLbDataPlane, type LbDataPlaneHandle } from '../src/bpf/dataplane/index.js';
import { BpfMap, type BpfError } from '../src/bpf/libbpf.js';
import { encodeU32 } from '../src/bpf/dataplane/codec.js';
import { describeOp } from '../src/render/ops.js';
import { makeState } from './lib/lb-state.js';
import { TCP_FLAGS, frame, ipPacket } from './lib/packets.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-ctresz`;
const VIP = '203.0.113.10';
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12' };
const ring = (id: number) => Array.from({ length: 7 }, () => id);
const state = (real: number, conntrackMaxEntries: number) => makeState({ reals: REALS, hashSeed: 3, conntrackMaxEntries,
  services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: ring(real) }] });
const ack = (sport: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: '192.0.2.1', dst: VIP, l4: { tcp: { sport, dport: 80, flags: TCP_FLAGS.ACK } } }));
const TABLES = ['lb_conntrack', 'lb_snat_fwd', 'lb_snat_rev'];

let dp: LbDataPlaneHandle | null = null;
test.before(() => rmSync(PIN, { recursive: true, force: true }));
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

/** Runs one packet through the loaded xdp_lb; the counters that moved. */
async function run(data: Buffer): Promise<Record<string, number>> {
  const before = await dp!.counters();
  dp!.object()!.program('xdp_lb').testRun({ data, ctxIn: Buffer.concat([Buffer.alloc(4), encodeU32(data.length), Buffer.alloc(16)]) });
  const after = await dp!.counters();
  const moved: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) {
    if (typeof v === 'number' && v !== before[k]) moved[k] = v - (before[k] as number);
    if (typeof v === 'object' && (v.packets ?? 0) !== ((before[k] as Record<string, number> | undefined)?.packets ?? 0)) moved[k] = 1;
  }
  return moved;
}

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
  await dp.apply(state(1, 1024));
  for (const sport of FLOWS) t.like(await run(ack(sport)), { ct_miss: 1, 'real:1': 1 });
  const before = pinned();
  t.is(before.lb_conntrack!.max, 1024);
  const prog = progId();

  const ops = await dp.plan(state(1, 8192));
  t.log(ops.map(describeOp).join('\n'));
  t.deepEqual(ops, TABLES.map((map) => ({ op: 'table.resize', map, from: 1024, to: 8192 })));
  await dp.execute(ops);
  const after = pinned();
  for (const name of TABLES) {
    t.is(after[name]!.max, 8192, name);
    t.not(after[name]!.id, before[name]!.id, `${name}: a new map`);
    t.is(dp.object()!.map(name).id(), after[name]!.id, `${name}: the program uses the pinned map`);
  }
  t.not(progId(), prog, 'a new instance of xdp_lb');
  t.is(dp.resized!.lb_conntrack!.copied, FLOWS.length);
  t.deepEqual(await dp.plan(state(1, 8192)), [], 'nothing left to do');

  // the ring now picks real 2: a flow that still reaches real 1 found its entry in the copied table
  await dp.apply(state(2, 8192));
  t.like(await run(ack(50000)), { ct_miss: 1, 'real:2': 1 }, 'control: a new flow goes to real 2');
  for (const sport of FLOWS) t.like(await run(ack(sport)), { ct_hit: 1, 'real:1': 1 }, `flow ${sport}`);
});

test.serial('an unchanged size plans no resize and writes nothing', async (t) => {
  const before = pinned();
  const prog = progId();
  t.deepEqual(await dp!.plan(state(2, 8192)), []);
  const report = await dp!.apply(state(2, 8192));
  t.is(report.mapWrites, 0);
  t.is(report.ops, 0);
  t.deepEqual(pinned(), before);
  t.is(progId(), prog, 'the program was not replaced');
});

test.serial('shrink: the flows that fit are kept', async (t) => {
  const ops = await dp!.plan(state(2, 2048));
  t.deepEqual(ops.map((o) => o.op), ['table.resize', 'table.resize', 'table.resize']);
  await dp!.execute(ops);
  t.is(pinned().lb_conntrack!.max, 2048);
  t.is(dp!.resized!.lb_conntrack!.copied, FLOWS.length + 1);
  for (const sport of FLOWS) t.like(await run(ack(sport)), { ct_hit: 1, 'real:1': 1 }, `flow ${sport}`);
});

test.serial('a size the kernel refuses: an ENOSPC error naming it, and everything as it was', async (t) => {
  const before = pinned();
  const prog = progId();
  // the same apply also changes the ring: nothing of it may be written either
  const err = await t.throwsAsync(dp!.apply(state(1, 0xffffffff))) as BpfError;
  t.is(err.code, 'ENOSPC');
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
