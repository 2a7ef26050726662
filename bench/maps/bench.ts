// Map write/read costs from Node through the gitlb binding: single vs batch update
// throughput for a 65537-entry array and hash map, and the per-call cost of a lookup.
// Prints medians of several rounds (the machine is shared: run pinned, see ./run).
import { BpfMap, MapType } from '../../src/bpf/libbpf.js';
import { packMany, u32 } from '../../src/bpf/codec.js';
import { native } from '../../src/bpf/addon.js';

const N = 65537;
const ROUNDS = Number(process.env.ROUNDS ?? 5);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function timeNs(fn: () => void): number {
  const t0 = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t0);
}

const keys = packMany(u32, Array.from({ length: N }, (_, i) => i));
const values = packMany(u32, Array.from({ length: N }, (_, i) => (i * 2654435761) >>> 0));
const keyViews = Array.from({ length: N }, (_, i) => keys.subarray(i * 4, i * 4 + 4));
const valueViews = Array.from({ length: N }, (_, i) => values.subarray(i * 4, i * 4 + 4));

function benchMap(label: string, type: number): void {
  const map = BpfMap.create({ name: `bench_${label}`, type, keySize: 4, valueSize: 4, maxEntries: N });
  try {
    const single: number[] = [];
    const batch: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      if (type === MapType.hash) map.clear();
      single.push(timeNs(() => { for (let i = 0; i < N; i++) map.update(keyViews[i]!, valueViews[i]!); }));
      if (type === MapType.hash) map.clear();
      batch.push(timeNs(() => map.updateBatch(keys, values, N)));
    }
    // check the batch actually wrote what we think
    if (map.lookup(keyViews[N - 1]!)!.readUInt32LE(0) !== valueViews[N - 1]!.readUInt32LE(0)) throw new Error('batch write lost');
    const s = median(single), b = median(batch);
    console.log(`${label.padEnd(5)} ${N} entries: single update ${(s / 1e6).toFixed(1)} ms (${(N / (s / 1e9) / 1e6).toFixed(2)} M/s, ${(s / N).toFixed(0)} ns/entry)` +
      ` | batch update ${(b / 1e6).toFixed(1)} ms (${(N / (b / 1e9) / 1e6).toFixed(2)} M/s, ${(b / N).toFixed(0)} ns/entry) | batch ${(s / b).toFixed(1)}x faster`);

    const CALLS = 200_000;
    const out = Buffer.alloc(4);
    const alloc: number[] = [];
    const into: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      alloc.push(timeNs(() => { for (let i = 0; i < CALLS; i++) map.lookup(keyViews[i % N]!); }) / CALLS);
      into.push(timeNs(() => { for (let i = 0; i < CALLS; i++) map.lookupInto(keyViews[i % N]!, out); }) / CALLS);
    }
    const rd: number[] = [];
    for (let r = 0; r < ROUNDS; r++) rd.push(timeNs(() => map.lookupBatch(8192)) / N);
    const raw: number[] = [];
    const fd = map.fd;
    const n = native();
    for (let r = 0; r < ROUNDS; r++) raw.push(timeNs(() => { for (let i = 0; i < CALLS; i++) n.mapLookupInto(fd, keyViews[i % N]!, out); }) / CALLS);
    console.log(`${label.padEnd(5)} lookup from Node: ${median(alloc).toFixed(0)} ns/call (lookup, new Buffer), ${median(into).toFixed(0)} ns/call (lookupInto)` +
      `, ${median(raw).toFixed(0)} ns/call (addon directly, i.e. N-API + bpf() syscall)`);
    console.log(`${label.padEnd(5)} batch read: ${median(rd).toFixed(0)} ns/entry (lookupBatch of all ${N})`);
  } finally {
    map.close();
  }
}

console.log(`maps bench: medians of ${ROUNDS} rounds, pid ${process.pid}`);
{
  const n = native();
  const floor: number[] = [];
  for (let r = 0; r < ROUNDS; r++) floor.push(timeNs(() => { for (let i = 0; i < 200_000; i++) n.numPossibleCpus(); }) / 200_000);
  console.log(`floor: an N-API call into the addon without a syscall costs ${median(floor).toFixed(0)} ns`);
}
benchMap('array', MapType.array);
benchMap('hash', MapType.hash);
