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

function measure(list: MaglevBackend[], m: number): { ms: number; heapDelta: number } {
  for (let w = 0; w < 5; w++) buildMaglevTable(list, m, SEED); // warm up the JIT
  const times: number[] = [];
  for (let r = 0; r < runs; r++) {
    const t0 = process.hrtime.bigint();
    buildMaglevTable(list, m, SEED);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const before = process.memoryUsage();
  const table = buildMaglevTable(list, m, SEED);
  const after = process.memoryUsage();
  if (table.length !== m) throw new Error('bad table');
  // The table itself lives in an ArrayBuffer; report what one build retains/allocates outside the JS heap too.
  return { ms: median(times), heapDelta: after.heapUsed + after.arrayBuffers - before.heapUsed - before.arrayBuffers };
}

console.log(`maglev build, median of ${runs} runs (node ${process.version}, pid ${process.pid})`);
for (const weighted of [false, true]) {
  console.log(`\n${weighted ? 'weights 1..10' : 'equal weights'}`);
  console.log('       M      N   median ms   table KiB   alloc KiB/build');
  for (const m of SIZES) {
    for (const n of COUNTS) {
      const { ms, heapDelta } = measure(backends(n, weighted), m);
      console.log(
        `${String(m).padStart(8)} ${String(n).padStart(6)} ${ms.toFixed(3).padStart(11)} ${((m * 4) / 1024)
          .toFixed(0)
          .padStart(11)} ${(heapDelta / 1024).toFixed(0).padStart(17)}`,
      );
    }
  }
}
const mem = process.memoryUsage();
console.log(`\nprocess: rss ${(mem.rss / 1048576).toFixed(1)} MiB, heapUsed ${(mem.heapUsed / 1048576).toFixed(1)} MiB`);
console.log('reference: a C++ build of M=65537, N=1000 takes about 2 ms; target within 1.5x (3 ms)');
