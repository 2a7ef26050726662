// Runs inside the bench namespace (bench.ts with XDP_BENCH_MEASURE=real-stats.ts): what the per-real counters cost on the hot path.
// The LB program is measured twice in the same run, alternating on the same harness, packets and maps: as built
// (build/bpf/xdp_lb.o) and built with -DLB_BENCH_NO_REAL_STATS (per-real counting compiled out), each net of the
// harness floor (an empty XDP program). BPF_PROG_TEST_RUN repeat = 1e6, medians of RUNS runs, on CPU 1.
import { BpfObject } from '../../src/bpf/libbpf.js';
import { loadHarness, median, runChecked } from './measure-lib.js';
import { twoVipBench } from './two-vip-bench.js';

const pinRoot = process.argv[2]!;
const variantPath = process.argv[3]!;
const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 1_000_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 9);

// the variant shares every pinned map (same sizes as pinned), so both programs see the same tables
const { dp, program: withStats, mapMaxEntries, empty, restoreObj, varyObj, ctxFor, counter, cases } = await twoVipBench(pinRoot);
const variant = await BpfObject.load(variantPath, { pinRoot, reusePinnedMaps: true, mapMaxEntries });
const without = variant.program('xdp_lb');

console.log(`Per-real counters on the XDP hot path: BPF_PROG_TEST_RUN repeat=${REPEAT}, ${RUNS} alternating runs, medians, CPU 1`);
console.log(`${'case'.padEnd(38)} ${'floor'.padStart(6)} ${'with'.padStart(6)} ${'without'.padStart(8)} ${'cost'.padStart(6)}   (ns/packet net of the floor)`);
const harnessProg = (o: BpfObject) => o.programs()[0]!;
let failed = false;
for (const c of cases) {
  try {
    const runs = { floor: [] as number[], with: [] as number[], without: [] as number[] };
    const ctx = ctxFor(c.data.length);
    for (let r = 0; r < RUNS; r++) {
      for (const [key, prog] of [['floor', empty.program('xdp_empty')], ['with', withStats], ['without', without]] as const) {
        loadHarness(c.harness, c.data, prog);
        runs[key].push(await runChecked(harnessProg(c.harness), c.data, ctx, key === 'floor' ? 2 : 3, REPEAT, counter, key === 'floor' ? [] : c.counters));
      }
    }
    const f = median(runs.floor);
    const w = median(runs.with) - f;
    const wo = median(runs.without) - f;
    console.log(`${c.name.padEnd(38)} ${String(f).padStart(6)} ${String(w).padStart(6)} ${String(wo).padStart(8)} ${String(w - wo).padStart(6)}`);
    console.log(`${''.padEnd(38)} runs: floor ${runs.floor.join(' ')} | with ${runs.with.join(' ')} | without ${runs.without.join(' ')}`);
  } catch (e) {
    failed = true;
    console.log(`${c.name.padEnd(38)} FAILED: ${(e as Error).message}`);
  }
}
variant.close();
dp.close();
process.exitCode = failed ? 1 : 0;
