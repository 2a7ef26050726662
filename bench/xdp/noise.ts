// A defined background load for bench/xdp (XDP_BENCH_NOISE=cache, see bench/xdp/run): walks a buffer larger than
// the CPU's own caches, one read per 64-byte line, until it is killed. bench.ts starts it pinned to the CPU the
// measurements run on, at the same priority, so the two share that CPU by time slices and every slice of the
// measurement begins with caches the walk has emptied: the "loaded" case of a production lb node, where other
// work runs between packets, made the same for gitlb and Katran and from run to run.
//   node bench/xdp/noise.ts <MiB>
const mib = Number(process.argv[2] ?? 8);
const words = new Int32Array((mib * 1024 * 1024) / 4);
for (let i = 0; i < words.length; i += 16) words[i] = i; // touch every line once (no zero-page sharing)
let sum = 0;
for (;;) {
  for (let i = 0; i < words.length; i += 16) sum = (sum + words[i]!) | 0;
  if (sum === 0x7fffffff) console.log(sum); // keeps the loop from being optimised away
}
