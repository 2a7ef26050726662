// bench/sync, data-plane side (run by bench.ts inside its namespace, on CPU 1). The sync is scan-based: the XDP
// program publishes nothing (no ring buffer, no extra map write: `grep -r ringbuf src/bpf` is empty), so a new flow
// costs XDP the same with and without the sync; what the sync costs instead is its scan of the tables (FlowDelta,
// every 250 ms). Printed: a new flow's XDP cost (bench/xdp's method: BPF_PROG_TEST_RUN, bench/xdp/snat_vary.c makes
// every iteration a new flow, net of that harness's floor, median of runs, every iteration checked to have inserted
// an entry), and the scan's cost per entry for tables of several sizes, with every entry new and with none.
import { BpfObject } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { FlowDelta } from '../../src/bpf/dataplane/flow-state.js';
import { applyTo } from '../../test/lib/converge.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { loadHarness, measurer, median, xdpContextFor } from '../xdp/measure-lib.js';
import { SYNC_CT_ENTRIES, newFlowPacket, syncBenchState } from './state.js';

const pinRoot = process.argv[2]!;
const NEW_REPEAT = Number(process.env.XDP_BENCH_NEW_REPEAT ?? 20_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 5);
const SIZES = (process.env.SYNC_BENCH_SCAN_SIZES ?? '0,10000,100000').split(',').map(Number);

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
  console.log(`  new flow (dsr-l2 SYN: ring + connection-table insert): ${fresh.ns - floor.ns} ns net of the harness floor ${floor.ns} ns (runs ${fresh.runs.join(' ')})`);
  console.log('  publishing it for the sync: 0 ns in XDP, with or without the sync the program is the same (nothing is published');
  console.log('  from XDP: the sync reads the tables), so there is no second XDP figure to put beside it; the scan below is the cost.');
} catch (e) {
  failed = true;
  console.log(`  new flow FAILED: ${(e as Error).message}`);
}

// The scan instead: FlowDelta.read over a table of n entries, once when all are new (decoded and queued) and once
// when none changed (only compared); median of RUNS.
console.log(`  the sync's scan of the tables instead (FlowDelta.read every 250 ms, a ${SYNC_CT_ENTRIES}-entry connection table; wall time):`);
console.log(`    ${'entries'.padStart(8)} ${'all new'.padStart(10)} ${'ns/entry'.padStart(9)} ${'none new'.padStart(10)} ${'ns/entry'.padStart(9)}`);
for (const n of SIZES) {
  try {
    ct.clear();
    let made = 0;
    while (made < n) { const k = Math.min(50_000, n - made); const r = prog.testRun({ data: syn, repeat: k, ctxIn: ctxFor(syn.length) }); if (r.retval !== 3) throw new Error(`new flow returned ${r.retval}`); made += k; }
    const count = ct.lookupBatch(4096).count;
    if (count !== n) throw new Error(`the table holds ${count} entries, expected ${n}`);
    const allNew: number[] = [];
    const noneNew: number[] = [];
    for (let r = 0; r < RUNS; r++) {
      const delta = new FlowDelta();
      let t = process.hrtime.bigint();
      const first = delta.read(obj);
      allNew.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (first.changed.ct.length !== n) throw new Error(`first read found ${first.changed.ct.length} new entries, expected ${n}`);
      t = process.hrtime.bigint();
      const second = delta.read(obj);
      noneNew.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (second.changed.ct.length !== 0) throw new Error(`second read found ${second.changed.ct.length} new entries, expected 0`);
    }
    const a = median(allNew);
    const z = median(noneNew);
    const per = (ms: number) => (n ? String(Math.round((ms * 1e6) / n)) : '-').padStart(9);
    console.log(`    ${String(n).padStart(8)} ${`${a.toFixed(1)} ms`.padStart(10)} ${per(a)} ${`${z.toFixed(1)} ms`.padStart(10)} ${per(z)}`);
  } catch (e) {
    failed = true;
    console.log(`    ${String(n).padStart(8)} FAILED: ${(e as Error).message}`);
  }
}
console.log('  A round costs the table (its entries, and its buckets: the empty row), not the new flows; rounds take at most a fifth of the time (longer ones space out).');
vary.close();
empty.close();
dp.close();
if (failed) process.exitCode = 1;
