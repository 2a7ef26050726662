// bench/sync, data-plane side (run by bench.ts inside its namespace, on CPU 1). xdp_lb publishes every new
// connection-table entry into a ring buffer while the node has sync peers (src/bpf/include/lb_sync.h); the daemon reads
// the ring every interval and scans the tables only to resync a peer and as a safety net. Printed: a new flow's XDP
// cost with publishing off and on (bench/xdp's method: BPF_PROG_TEST_RUN, bench/xdp/snat_vary.c makes every iteration
// a new flow, net of that harness's floor, median of runs, every iteration checked to have inserted an entry; the
// ring is read empty before every run and must lose nothing), what reading and decoding the published entries costs
// the daemon per entry, and the scan's cost per entry for tables of several sizes, with every entry new and with none.
import { BpfObject } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { FlowDelta, SCAN_PAGE_ENTRIES, nextTurn } from '../../src/bpf/dataplane/flow-state.js';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { loadavg } from 'node:os';
import { SyncEventReader, setSyncPublish, syncLost } from '../../src/bpf/dataplane/flow-events.js';
import { FLOW_SYNC_DEFAULTS } from '../../src/reconciler/flows/flow-sync.js';
import { applyTo } from '../../test/lib/converge.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { loadHarness, measurer, median, xdpContextFor } from '../xdp/measure-lib.js';
import { SYNC_CT_ENTRIES, newFlowPacket, syncBenchState } from './state.js';

const pinRoot = process.argv[2]!;
const NEW_REPEAT = Number(process.env.XDP_BENCH_NEW_REPEAT ?? 20_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 5);
const SIZES = (process.env.SYNC_BENCH_SCAN_SIZES ?? '0,10000,100000').split(',').map(Number);

// the default ring (4 MiB: room for one run's new flows; the reader empties it before each run)
const dp = await openLbDataPlane({ pinRoot });
await applyTo(dp, syncBenchState('lb-a'));
const obj = dp.object()!;
const lb = obj.program('xdp_lb');
const empty = await BpfObject.load(new URL('../../build/bench/xdp_empty.o', import.meta.url).pathname);
const vary = await BpfObject.load(new URL('../../build/bench/xdp_snat_vary.o', import.meta.url).pathname);
const ctxFor = xdpContextFor(LAB.lbA.name);
const counter = async (name: string) => ((await dp.counters())[name] as number | undefined) ?? 0;
const { measure } = measurer({ runs: RUNS, ctxFor, counter });
const ct = obj.map('lb_conntrack');
const syn = newFlowPacket();
const prog = vary.program('xdp_snat_vary');
let failed = false;

console.log('XDP side of the sync (same harness as bench/xdp: BPF_PROG_TEST_RUN, kernel ns, median of runs, on CPU 1)');
try {
  loadHarness(vary, syn, empty.program('xdp_empty'));
  const floor = await measure(prog, syn, 2, NEW_REPEAT);
  loadHarness(vary, syn, lb);
  const fresh = await measure(prog, syn, 3, NEW_REPEAT, ['ct_miss', 'tx'], () => ct.clear());
  console.log(`  new flow (dsr-l2 SYN: ring + connection-table insert), publishing off: ${fresh.ns - floor.ns} ns net of the harness floor ${floor.ns} ns (runs ${fresh.runs.join(' ')})`);
  const reader = new SyncEventReader(obj);
  setSyncPublish(obj, true);
  let read = 0;
  const published = await measure(prog, syn, 3, NEW_REPEAT, ['ct_miss', 'tx'], () => { ct.clear(); read += reader.read(10 * NEW_REPEAT).records; });
  read += reader.read(10 * NEW_REPEAT).records;
  const lost = syncLost(obj);
  if (lost !== 0) throw new Error(`the ring lost ${lost} records`);
  console.log(`  the same, publishing on (one ring record per new flow, ${read} read, 0 lost): ${published.ns - floor.ns} ns net (runs ${published.runs.join(' ')}): ` +
    `${published.ns - fresh.ns} ns for publishing`);
  // the daemon's side of it: reading and decoding what was published (FlowDelta.published), per entry
  const times: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    ct.clear();
    const k = prog.testRun({ data: syn, repeat: NEW_REPEAT, ctxIn: ctxFor(syn.length) });
    if (k.retval !== 3) throw new Error(`new flow returned ${k.retval}`);
    const delta = new FlowDelta();
    const t = process.hrtime.bigint();
    const raw = reader.read(10 * NEW_REPEAT);
    const got = delta.published(obj, raw);
    times.push(Number(process.hrtime.bigint() - t) / NEW_REPEAT);
    if (got.ct.length !== NEW_REPEAT) throw new Error(`read ${got.ct.length} published entries, expected ${NEW_REPEAT}`);
  }
  console.log(`  the daemon reading them (ring read + decode, ${NEW_REPEAT} entries a read; wall time): ${Math.round(median(times))} ns/entry, whatever the table holds`);
  setSyncPublish(obj, false);
  reader.close();
} catch (e) {
  failed = true;
  console.log(`  new flow FAILED: ${(e as Error).message}`);
}

// The scan instead: FlowDelta.read over a table of n entries, once when all are new (decoded) and once when none changed (only compared: the safety net's usual case); median of
// RUNS. The read is cooperative (it yields to the event loop between pages of SCAN_PAGE_ENTRIES); the event loop's
// longest stall meanwhile is measured twice: by monitorEventLoopDelay (what a timer, a health probe or a peer's
// message waits at most), and directly as the longest stretch between two yields. Beside it the same read without
// yielding (pause that never gives the event loop a turn: the read as it was before it was made cooperative).
const longestStall = async (run: (pause: () => Promise<void>) => Promise<unknown>, yielding: boolean): Promise<{ loopMs: number; stretchMs: number }> => {
  const loop = monitorEventLoopDelay({ resolution: 1 });
  let last = process.hrtime.bigint();
  let stretch = 0n;
  const pause = async () => {
    const t = process.hrtime.bigint();
    if (t - last > stretch) stretch = t - last;
    if (yielding) await nextTurn();
    last = process.hrtime.bigint();
  };
  loop.enable();
  await new Promise((r) => setTimeout(r, 20)); // the histogram measures from its first sample on
  const began = process.hrtime.bigint();
  last = began;
  await run(pause);
  const t = process.hrtime.bigint();
  if (t - last > stretch) stretch = t - last;
  if (!yielding) stretch = t - began; // one synchronous stretch: the pauses never gave the event loop a turn
  await new Promise((r) => setTimeout(r, 5)); // the histogram takes the last stall at its next sample
  loop.disable();
  return { loopMs: loop.max / 1e6, stretchMs: Number(stretch) / 1e6 };
};
console.log(`  the scan of the tables (FlowDelta.read: a peer's resync, a lost record, every ${FLOW_SYNC_DEFAULTS.scanIntervalMs / 1000} s as a safety net; a ${SYNC_CT_ENTRIES}-entry connection table; wall time;`);
console.log(`  pages of ${SCAN_PAGE_ENTRIES} entries; stall: the event loop's longest wait during the read of an unchanged table, monitorEventLoopDelay / longest stretch between yields, ms):`);
console.log(`    ${'entries'.padStart(8)} ${'all new'.padStart(10)} ${'ns/entry'.padStart(9)} ${'none new'.padStart(10)} ${'ns/entry'.padStart(9)} ${'stall yielding'.padStart(15)} ${'stall not yielding'.padStart(19)}`);
for (const n of SIZES) {
  try {
    ct.clear();
    let made = 0;
    while (made < n) { const k = Math.min(50_000, n - made); const r = prog.testRun({ data: syn, repeat: k, ctxIn: ctxFor(syn.length) }); if (r.retval !== 3) throw new Error(`new flow returned ${r.retval}`); made += k; }
    const count = ct.lookupBatch(4096).count;
    if (count !== n) throw new Error(`the table holds ${count} entries, expected ${n}`);
    const allNew: number[] = [];
    const noneNew: number[] = [];
    const stalls: Array<{ loopMs: number; stretchMs: number }> = [];
    const blocking: Array<{ loopMs: number; stretchMs: number }> = [];
    for (let r = 0; r < RUNS; r++) {
      const delta = new FlowDelta();
      let t = process.hrtime.bigint();
      const first = await delta.read(obj);
      allNew.push(Number(process.hrtime.bigint() - t) / 1e6);
      const whole = await first.all();
      if (first.changed.ct.length !== n || whole.ct.length !== n) throw new Error(`first read found ${first.changed.ct.length} new entries (${whole.ct.length} in all), expected ${n}`);
      t = process.hrtime.bigint();
      const second = await delta.read(obj);
      noneNew.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (second.changed.ct.length !== 0) throw new Error(`second read found ${second.changed.ct.length} new entries, expected 0`);
      stalls.push(await longestStall((pause) => delta.read(obj, pause), true));
      blocking.push(await longestStall((pause) => delta.read(obj, pause), false));
    }
    const a = median(allNew);
    const z = median(noneNew);
    const per = (ms: number) => (n ? String(Math.round((ms * 1e6) / n)) : '-').padStart(9);
    const stall = (xs: Array<{ loopMs: number; stretchMs: number }>) =>
      `${Math.round(median(xs.map((x) => x.loopMs)))} / ${median(xs.map((x) => x.stretchMs)).toFixed(1)}`;
    console.log(`    ${String(n).padStart(8)} ${`${a.toFixed(1)} ms`.padStart(10)} ${per(a)} ${`${z.toFixed(1)} ms`.padStart(10)} ${per(z)} ${stall(stalls).padStart(15)} ${stall(blocking).padStart(19)}`);
  } catch (e) {
    failed = true;
    console.log(`    ${String(n).padStart(8)} FAILED: ${(e as Error).message}`);
  }
}
console.log(`  load average: ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.log('  A scan costs the table (its entries, and its buckets: the empty row), not the new flows; scans take at most a fifth of the time (longer ones space out).');
vary.close();
empty.close();
dp.close();
if (failed) process.exitCode = 1;
