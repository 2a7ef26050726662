// Prints median Maglev build times and memory. Run through bench/maglev/run. With KATRAN_MAGLEV (Katran's C++
// MaglevHash, built from KATRAN_SRC by the run script) the equal-weight builds are timed beside Katran's in
// alternating rounds (ours, then the peer process, three times), and the ratio of the medians is printed. With
// MAGLEV_BASELINE (src/render/maglev.ts of another revision, extracted by the run script) that builder is timed
// in the same rounds too: before and after a change, in one run.
import { spawnSync } from 'node:child_process';
import { buildMaglevTable, maglevBackendId, type MaglevBackend } from '../../src/render/maglev.js';

const SIZES = [16381, 65537, 131071];
const COUNTS = [10, 100, 1000];
const SEED = 0x2c6b1f0e;
const runs = Number(process.env.BENCH_RUNS ?? 21);
const PEER = process.env.KATRAN_MAGLEV;
const ROUNDS = 3;
type Build = typeof buildMaglevTable;
const baseline: Build | undefined = process.env.MAGLEV_BASELINE
  ? ((await import(process.env.MAGLEV_BASELINE)) as { buildMaglevTable: Build }).buildMaglevTable
  : undefined;

function backends(n: number, weighted: boolean): MaglevBackend[] {
  return Array.from({ length: n }, (_, i) => ({
    id: maglevBackendId(`198.51.${100 + (i >> 8)}.${i & 255}`, 8080, 'TCP'),
    weight: weighted ? 1 + (i % 10) : 1,
    realId: i + 1,
  }));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Build times (ms) of Katran's MaglevHash for M, N: `count` runs in a process of its own. */
function peerTimes(m: number, n: number, count: number): number[] {
  const r = spawnSync(PEER!, [String(m), String(n), String(count)], { encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`${PEER} failed: ${r.stderr}`);
  return r.stdout.trim().split('\n').map(Number);
}

/** Median and minimum of `times` (ms). */
function summary(times: number[]): { ms: number; min: number } {
  return { ms: median(times), min: Math.min(...times) };
}

/** `count` timed builds with `build`, appended to `times`. */
function timeBuilds(build: Build, list: MaglevBackend[], m: number, count: number, times: number[]): void {
  for (let r = 0; r < count; r++) {
    const t0 = process.hrtime.bigint();
    build(list, m, SEED);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
}

interface Measured { ms: number; min: number; allocated: number; peer?: { ms: number; min: number }; base?: { ms: number; min: number } }

/** Median build time, and the typed-array memory one build allocates (table + working arrays); with `peer`,
 * Katran's median over the same number of runs, and with a baseline builder its median, measured in rounds
 * alternating with ours. */
async function measure(list: MaglevBackend[], m: number, peer: boolean): Promise<Measured> {
  for (let w = 0; w < 5; w++) {
    buildMaglevTable(list, m, SEED); // warm up the JIT
    baseline?.(list, m, SEED);
  }
  if (baseline && Buffer.compare(Buffer.from(baseline(list, m, SEED).buffer), Buffer.from(buildMaglevTable(list, m, SEED).buffer)) !== 0) {
    throw new Error(`baseline and current builders disagree at M=${m} N=${list.length}`);
  }
  const times: number[] = [];
  const baseRuns: number[] = [];
  const peerRuns: number[] = [];
  const rounds = peer || baseline ? ROUNDS : 1;
  for (let round = 0; round < rounds; round++) {
    const count = Math.ceil(runs / rounds);
    timeBuilds(buildMaglevTable, list, m, count, times);
    if (baseline) timeBuilds(baseline, list, m, count, baseRuns);
    if (peer) peerRuns.push(...peerTimes(m, list.length, count));
  }
  // ArrayBuffer backing stores are freed asynchronously after a GC: collect, let the sweeper finish, then measure
  // the external memory a single build adds (nothing is freed that quickly in between).
  const gc = (globalThis as { gc?: () => void }).gc;
  let allocated = NaN;
  if (gc) {
    gc();
    await sleep(20);
    const before = process.memoryUsage().arrayBuffers;
    const table = buildMaglevTable(list, m, SEED);
    allocated = process.memoryUsage().arrayBuffers - before;
    if (table.length !== m) throw new Error('bad table');
  }
  return { ...summary(times), allocated, ...(peer && { peer: summary(peerRuns) }), ...(baseline && { base: summary(baseRuns) }) };
}

const pair = (a: number, b: number, digits: number) => `${a.toFixed(digits)} / ${b.toFixed(digits)}`;

const load = (await import('node:os')).loadavg()[0]!.toFixed(2);
console.log(`maglev build, median and minimum of ${runs} runs (node ${process.version}, 1-min load average ${load})`);
for (const weighted of [false, true]) {
  console.log(`\n${weighted ? 'weights 1..10' : 'equal weights'}`);
  const peer = Boolean(PEER) && !weighted; // Katran's MaglevHash weights differently: equal weights only
  console.log(`       M      N   median ms   min ms   table KiB   typed arrays KiB/build${baseline
    ? '   baseline median / min ms   gitlb/baseline' : ''}${peer ? '   Katran median / min ms   gitlb/Katran median / min' : ''}`);
  for (const m of SIZES) {
    for (const n of COUNTS) {
      const { ms, min, allocated, peer: k, base } = await measure(backends(n, weighted), m, peer);
      console.log(
        `${String(m).padStart(8)} ${String(n).padStart(6)} ${ms.toFixed(3).padStart(11)} ${min.toFixed(3).padStart(8)} ${((m * 4) / 1024)
          .toFixed(0)
          .padStart(11)} ${(allocated / 1024).toFixed(0).padStart(24)}${base
          ? `${pair(base.ms, base.min, 3).padStart(27)} ${pair(ms / base.ms, min / base.min, 2).padStart(16)}` : ''}${k
          ? `${pair(k.ms, k.min, 3).padStart(25)} ${pair(ms / k.ms, min / k.min, 2).padStart(27)}` : ''}`,
      );
    }
  }
}
// Cold builds: a new seed for every build drops the identity-hash memo, so each build hashes all N identities
// (Murmur3 in 32-bit halves) as a daemon's first render does. Katran's peer has no such row: its endpoints
// carry hashes computed when the reals were added.
console.log('\ncold (identity hashes not memoised: a new seed every build), equal weights');
console.log(`       M      N   median ms   min ms${baseline ? '   baseline median / min ms   gitlb/baseline' : ''}`);
let coldSeed = 1;
for (const m of [16381, 65537]) {
  for (const n of [100, 1000]) {
    const list = backends(n, false);
    const times: number[] = [];
    const baseRuns: number[] = [];
    for (let r = 0; r < runs; r++) {
      for (const [build, into] of [[buildMaglevTable, times], ...(baseline ? [[baseline, baseRuns] as const] : [])] as const) {
        const seed = coldSeed++;
        const t0 = process.hrtime.bigint();
        build(list, m, seed);
        into.push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
    }
    const ours = summary(times);
    const base = baseline && summary(baseRuns);
    console.log(`${String(m).padStart(8)} ${String(n).padStart(6)} ${ours.ms.toFixed(3).padStart(11)} ${ours.min.toFixed(3).padStart(8)}${base
      ? `${pair(base.ms, base.min, 3).padStart(27)} ${pair(ours.ms / base.ms, ours.min / base.min, 2).padStart(16)}` : ''}`);
  }
}

const mem = process.memoryUsage();
console.log(`\nprocess: rss ${(mem.rss / 1048576).toFixed(1)} MiB, heapUsed ${(mem.heapUsed / 1048576).toFixed(1)} MiB`);
if (baseline) console.log(`baseline: ${process.env.MAGLEV_BASELINE} (gitlb/baseline < 1: this revision is faster)`);
if (!PEER) console.log('(no Katran column: set KATRAN_SRC to a checkout of Katran\'s repository to time its C++ MaglevHash beside ours)');
else console.log('Katran: MaglevHash::generateHashRing from KATRAN_SRC, g++ -O2, same M and N, equal weights; goal: gitlb/Katran <= 1.5');
