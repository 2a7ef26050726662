// Runs inside the bench namespace (bench.ts with XDP_BENCH_MEASURE=capture.ts): what `gitlb capture` support costs.
// Capture is off by swapping: the daemon runs xdp_lb.o, whose instructions carry no capture code, and the capture
// build (xdp_lb_capture.o) runs only while someone captures. Measured alternately in one run, on the same harness,
// packets and maps, each net of the harness floor (an empty XDP program):
//   normal          xdp_lb.o, the program the daemon runs (capture off)
//   normal again    xdp_lb.o loaded a second time over the same maps: what "no difference" looks like here (noise)
//   capture, no VIP match   xdp_lb_capture.o capturing --vip of another VIP: what a capture costs the frames it
//                   does not select (the address filters decide right after parsing; nothing is copied)
//   capture, no exit match  xdp_lb_capture.o capturing --reason drop_no_real: the address filters pass, the frame as
//                   received is copied, the exit filter refuses it (the dearest frame that is still not captured)
// BPF_PROG_TEST_RUN repeat = 1e6, medians of RUNS runs, on CPU 1; every iteration checked to take the measured path.
import { BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { CaptureProgram, NO_FILTER } from '../../src/bpf/capture/index.js';
import { parseAddressMatch } from '../../src/bpf/capture/filter.js';
import { loadHarness, median, runChecked } from './measure-lib.js';
import { twoVipBench } from './two-vip-bench.js';

const pinRoot = process.argv[2]!;
const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 1_000_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 9);

// the same object loaded again over every pinned map (same sizes as pinned)
const { dp, program: normal, mapMaxEntries, empty, restoreObj, varyObj, ctxFor, counter, cases } = await twoVipBench(pinRoot);
const again = await BpfObject.load('xdp_lb', { pinRoot, reusePinnedMaps: true, mapMaxEntries });
const noVip = await CaptureProgram.loadOver(normal.fd, { ...NO_FILTER, rate: 0, vips: [parseAddressMatch('203.0.113.99', '--vip', true)] });
const noExit = await CaptureProgram.loadOver(normal.fd, { ...NO_FILTER, rate: 0, counters: ['drop_no_real'] });

const programs: Array<[string, BpfProgram]> = [['normal', normal], ['again', again.program('xdp_lb')], ['noVip', noVip.program], ['noExit', noExit.program]];
console.log(`gitlb capture support on the XDP hot path: BPF_PROG_TEST_RUN repeat=${REPEAT}, ${RUNS} alternating runs, medians, CPU 1, ns/packet net of the floor`);
console.log(`${'case'.padEnd(38)} ${'floor'.padStart(6)} ${'normal'.padStart(7)} ${'again'.padStart(6)} ${'ratio'.padStart(6)} ${'capture:no-vip'.padStart(15)} ${'ratio'.padStart(6)} ${'capture:no-exit'.padStart(16)} ${'ratio'.padStart(6)}`);
const harnessProg = (o: BpfObject) => o.programs()[0]!;
let failed = false;
for (const c of cases) {
  try {
    const runs: Record<string, number[]> = { floor: [], normal: [], again: [], noVip: [], noExit: [] };
    const ctx = ctxFor(c.data.length);
    for (let r = 0; r < RUNS; r++) {
      for (const [key, prog] of [['floor', empty.program('xdp_empty')] as [string, BpfProgram], ...programs]) {
        loadHarness(c.harness, c.data, prog);
        runs[key]!.push(await runChecked(harnessProg(c.harness), c.data, ctx, key === 'floor' ? 2 : 3, REPEAT, counter, key === 'floor' ? [] : c.counters));
      }
    }
    const f = median(runs.floor!);
    const net = (k: string) => median(runs[k]!) - f;
    const [n, a, v, x] = [net('normal'), net('again'), net('noVip'), net('noExit')];
    const ratio = (y: number) => (y / n).toFixed(3);
    console.log(`${c.name.padEnd(38)} ${String(f).padStart(6)} ${String(n).padStart(7)} ${String(a).padStart(6)} ${ratio(a).padStart(6)} ${String(v).padStart(15)} ${ratio(v).padStart(6)} ${String(x).padStart(16)} ${ratio(x).padStart(6)}`);
    console.log(`${''.padEnd(38)} runs: ${Object.entries(runs).map(([k, xs]) => `${k} ${xs.join(' ')}`).join(' | ')}`);
  } catch (e) {
    failed = true;
    console.log(`${c.name.padEnd(38)} FAILED: ${(e as Error).message}`);
  }
}
// nothing was captured: the filters matched no measured frame
for (const [name, cap] of [['no-vip', noVip], ['no-exit', noExit]] as const) {
  const s = cap.stats();
  console.log(`capture:${name}: ${s.seen} frames seen, ${s.matched} matched, ${s.captured} captured`);
  if (s.matched) failed = true;
}
noVip.close();
noExit.close();
again.close();
dp.close();
process.exitCode = failed ? 1 : 0;
