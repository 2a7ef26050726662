// Prints median Maglev build times and memory. Run through bench/maglev/run.
import { buildMaglevTable, maglevBackendId, type MaglevBackend } from '../../src/render/maglev.js';

const SIZES = [16381, 65537, 131071];
const COUNTS = [10, 100, 1000];
const SEED = 0x2c6b1f0e;
const runs = Number(process.env.BENCH_RUNS ?? 21);

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

/** Median build time, and the typed-array memory one build allocates (table + working arrays). */
async function measure(list: MaglevBackend[], m: number): Promise<{ ms: number; min: number; allocated: number }> {
  for (let w = 0; w < 5; w++) buildMaglevTable(list, m, SEED); // warm up the JIT
  const times: number[] = [];
  for (let r = 0; r < runs; r++) {
    const t0 = process.hrtime.bigint();
    buildMaglevTable(list, m, SEED);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
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
  return { ms: median(times), min: Math.min(...times), allocated };
}

const load = (await import('node:os')).loadavg()[0]!.toFixed(2);
console.log(`maglev build, median and minimum of ${runs} runs (node ${process.version}, 1-min load average ${load})`);
for (const weighted of [false, true]) {
  console.log(`\n${weighted ? 'weights 1..10' : 'equal weights'}`);
  console.log('       M      N   median ms   min ms   table KiB   typed arrays KiB/build');
  for (const m of SIZES) {
    for (const n of COUNTS) {
      const { ms, min, allocated } = await measure(backends(n, weighted), m);
      console.log(
        `${String(m).padStart(8)} ${String(n).padStart(6)} ${ms.toFixed(3).padStart(11)} ${min.toFixed(3).padStart(8)} ${((m * 4) / 1024)
          .toFixed(0)
          .padStart(11)} ${(allocated / 1024).toFixed(0).padStart(24)}`,
      );
    }
  }
}
const mem = process.memoryUsage();
console.log(`\nprocess: rss ${(mem.rss / 1048576).toFixed(1)} MiB, heapUsed ${(mem.heapUsed / 1048576).toFixed(1)} MiB`);
console.log('reference: a C++ build of M=65537, N=1000 takes about 2 ms; target within 1.5x (3 ms)');
