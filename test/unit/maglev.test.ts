// Maglev and MurmurHash3: pinned to published vectors (SMHasher's verification value, Cilium's pkg/maglev test
// tables) and to the properties the issue lists.
import test from 'ava';
import { createHash } from 'node:crypto';
import { murmur3x64_128 } from '../../src/render/murmur3.js';
import {
  buildMaglevTable,
  buildMaglevTableCounted,
  countEntries,
  maglevBackendId,
  maglevOffsetSkip,
  maglevSeedFromBase64,
  type MaglevBackend,
} from '../../src/render/maglev.js';
import { prng } from '../lib/prng.js';

// ---------- MurmurHash3 ----------

// An independent, deliberately plain BigInt transcription of the reference MurmurHash3_x64_128.
const MASK = (1n << 64n) - 1n;
const rotl = (x: bigint, r: bigint) => ((x << r) | (x >> (64n - r))) & MASK;
const fmix = (k: bigint) => {
  k ^= k >> 33n;
  k = (k * 0xff51afd7ed558ccdn) & MASK;
  k ^= k >> 33n;
  k = (k * 0xc4ceb9fe1a85ec53n) & MASK;
  return k ^ (k >> 33n);
};
function referenceMurmur(data: Uint8Array, seed: number): [bigint, bigint] {
  const c1 = 0x87c37b91114253d5n;
  const c2 = 0x4cf5ad432745937fn;
  let h1 = BigInt(seed);
  let h2 = BigInt(seed);
  const word = (at: number, n: number) => {
    let v = 0n;
    for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(data[at + i]!);
    return v;
  };
  const nblocks = Math.floor(data.length / 16);
  for (let i = 0; i < nblocks; i++) {
    let k1 = word(i * 16, 8);
    let k2 = word(i * 16 + 8, 8);
    k1 = (rotl((k1 * c1) & MASK, 31n) * c2) & MASK;
    h1 = (((rotl(h1 ^ k1, 27n) + h2) & MASK) * 5n + 0x52dce729n) & MASK;
    k2 = (rotl((k2 * c2) & MASK, 33n) * c1) & MASK;
    h2 = (((rotl(h2 ^ k2, 31n) + h1) & MASK) * 5n + 0x38495ab5n) & MASK;
  }
  const tail = nblocks * 16;
  const rest = data.length - tail;
  if (rest > 8) h2 ^= (rotl((word(tail + 8, rest - 8) * c2) & MASK, 33n) * c1) & MASK;
  if (rest > 0) h1 ^= (rotl((word(tail, Math.min(rest, 8)) * c1) & MASK, 31n) * c2) & MASK;
  h1 ^= BigInt(data.length);
  h2 ^= BigInt(data.length);
  h1 = (h1 + h2) & MASK;
  h2 = (h2 + h1) & MASK;
  h1 = fmix(h1);
  h2 = fmix(h2);
  h1 = (h1 + h2) & MASK;
  h2 = (h2 + h1) & MASK;
  return [h1, h2];
}

test('murmur3: SMHasher verification value of MurmurHash3_x64_128 is 0x6384BA69', (t) => {
  // SMHasher's VerificationTest: hash keys {}, {0}, {0,1}, ... {0..254} with seed 256-i, hash the 256
  // concatenated 16-byte results with seed 0, and read the first 4 bytes little-endian.
  const key = new Uint8Array(256);
  const all = new Uint8Array(256 * 16);
  const out = new Uint32Array(4);
  for (let i = 0; i < 256; i++) {
    key[i] = i;
    murmur3x64_128(key.subarray(0, i), 256 - i, out);
    const dv = new DataView(all.buffer, i * 16, 16);
    dv.setUint32(0, out[1]!, true);
    dv.setUint32(4, out[0]!, true);
    dv.setUint32(8, out[3]!, true);
    dv.setUint32(12, out[2]!, true);
  }
  murmur3x64_128(all, 0, out);
  t.is(out[1]!, 0x6384ba69);
});

test('murmur3: matches a BigInt transcription of the reference for lengths 0..100 and varied seeds', (t) => {
  const rand = prng(7);
  const out = new Uint32Array(4);
  for (let len = 0; len <= 100; len++) {
    for (let round = 0; round < 4; round++) {
      const data = new Uint8Array(len);
      for (let i = 0; i < len; i++) data[i] = Math.floor(rand() * 256);
      const seed = round === 0 ? 0 : round === 1 ? 0xffffffff : Math.floor(rand() * 4294967296);
      const [h1, h2] = referenceMurmur(data, seed);
      murmur3x64_128(data, seed, out);
      const got1 = (BigInt(out[0]!) << 32n) | BigInt(out[1]!);
      const got2 = (BigInt(out[2]!) << 32n) | BigInt(out[3]!);
      if (got1 !== h1 || got2 !== h2) {
        t.fail(`len ${len} seed ${seed}: got ${got1.toString(16)},${got2.toString(16)} want ${h1.toString(16)},${h2.toString(16)}`);
        return;
      }
    }
  }
  t.pass();
});

// ---------- Cilium's published vectors (pkg/maglev/maglev_test.go) ----------

const CILIUM_SEED = 'JLfvgnHc2kaSUFaI'; // Cilium's DefaultHashSeed
/** Cilium's test helper mkAddr(i): IPv4 address i (big-endian), port i, TCP. */
const ciliumAddr = (i: number) => maglevBackendId(`${(i >>> 24) & 255}.${(i >>> 16) & 255}.${(i >>> 8) & 255}.${i & 255}`, i % 65535, 'TCP');

function runLength(ids: ArrayLike<number>): string {
  const runs: string[] = [];
  let current = ids[0]!;
  let count = 0;
  for (let j = 0; j < ids.length; j++) {
    if (ids[j] === current) count++;
    else {
      runs.push(`${current}(${count})`);
      current = ids[j]!;
      count = 1;
    }
  }
  runs.push(`${current}(${count})`);
  return runs.join(',');
}

test('cilium vector: backend identity string format', (t) => {
  t.is(ciliumAddr(1), '[0.0.0.1:1/TCP,State:active]');
  t.is(maglevBackendId('2001:db8::1', 8080, 'UDP'), '[[2001:db8::1]:8080/UDP,State:active]');
});

test("cilium vector: TestReproducible table at M=251 (weights 2, 13, 111, 10)", (t) => {
  const expected =
    '2(5),3(1),2(3),1(1),2(2),0(1),2(1),3(1),2(1),3(1),2(1),1(1),2(7),1(1),2(14),3(1),2(1),' +
    '1(2),2(12),3(1),2(3),1(1),2(4),3(1),2(8),3(1),2(2),1(1),2(16),1(2),2(3),3(1),2(11),1(2),2(4),3(1),2(3),' +
    '1(1),2(4),3(1),2(1),0(1),1(1),2(8),1(1),2(7),1(1),2(4),3(1),2(1),3(1),2(9),1(2),2(5),1(1),2(7),3(1),2(1),' +
    '3(1),1(1),2(8),1(1),2(4),0(1),2(1),1(1),2(5),3(1),2(3),1(1),2(4),3(1),2(3),1(1),2(12),0(1),3(1),2(3),3(1),' +
    '2(4),3(1),2(2),1(1),2(7)';
  // Cilium's ids are 0..3; ours must be >= 1, so shift by one and back.
  const backends: MaglevBackend[] = [
    { id: ciliumAddr(1), weight: 2, realId: 1 },
    { id: ciliumAddr(3), weight: 13, realId: 2 },
    { id: ciliumAddr(4), weight: 111, realId: 3 },
    { id: ciliumAddr(5), weight: 10, realId: 4 },
  ];
  const table = buildMaglevTable(backends, 251, maglevSeedFromBase64(CILIUM_SEED));
  t.is(runLength(Array.from(table, (id) => id - 1)), expected);
});

test('cilium vector: TestWeightedBackendWithRemoval counts at M=1021 and <1% churn on removal', (t) => {
  const seed = maglevSeedFromBase64(CILIUM_SEED);
  const backends: MaglevBackend[] = [
    { id: ciliumAddr(1), weight: 2, realId: 1 },
    { id: ciliumAddr(2), weight: 13, realId: 2 },
    { id: ciliumAddr(3), weight: 111, realId: 3 },
    { id: ciliumAddr(4), weight: 10, realId: 4 },
  ];
  const before = buildMaglevTable(backends, 1021, seed);
  const counts = countEntries(before);
  t.deepEqual([1, 2, 3, 4].map((id) => counts.get(id)), [16, 98, 832, 75]);
  const after = buildMaglevTable(backends.slice(1), 1021, seed);
  let moved = 0;
  for (let j = 0; j < before.length; j++) {
    if (before[j] !== 1 && after[j] !== before[j]) moved++;
    t.true(after[j] !== 1 && after[j] !== 0);
  }
  t.true(moved / 1021 < 0.01, `moved ${moved}`);
});

test('cilium vector: TestBackendRemoval (3 equal backends, M=1021) churn below 1%', (t) => {
  const seed = maglevSeedFromBase64(CILIUM_SEED);
  const backends = [1, 2, 3].map((i) => ({ id: ciliumAddr(i), weight: 1, realId: i }));
  const before = buildMaglevTable(backends, 1021, seed);
  const after = buildMaglevTable(backends.slice(0, 2), 1021, seed);
  let moved = 0;
  for (let j = 0; j < before.length; j++) {
    if (before[j] !== 3 && after[j] !== before[j]) moved++;
    t.true(after[j] === 1 || after[j] === 2);
  }
  t.true(moved / 1021 < 0.01);
});

// ---------- Our own golden tables ----------

const GOLDEN_SEED = maglevSeedFromBase64('Z2l0bGItc2VlZC0x'); // base64 of "gitlb-seed-1"
const goldenBackends = (n: number, weight: (i: number) => number): MaglevBackend[] =>
  Array.from({ length: n }, (_, i) => ({
    id: maglevBackendId(i % 2 ? `2001:db8::${(i + 1).toString(16)}` : `198.51.100.${i + 1}`, 8080, 'TCP'),
    weight: weight(i),
    realId: 1000 + i,
  }));
const sha = (ring: Uint32Array) => createHash('sha256').update(Buffer.from(ring.buffer, ring.byteOffset, ring.byteLength)).digest('hex');

test('golden: our seed and mixed IPv4/IPv6 reals give pinned tables', (t) => {
  // Pinned when the implementation was checked against Cilium's vectors above; any change here changes every
  // deployed table and must be deliberate (docs/maglev.md).
  const small = buildMaglevTable(goldenBackends(3, (i) => i + 1), 13, GOLDEN_SEED);
  t.is(Array.from(small).join(','), GOLDEN_SMALL);
  t.is(sha(buildMaglevTable(goldenBackends(50, (i) => 1 + (i % 7)), 16381, GOLDEN_SEED)), GOLDEN_16381);
});
const GOLDEN_SMALL = '1002,1002,1001,1001,1001,1001,1000,1000,1002,1000,1002,1002,1002';
const GOLDEN_16381 = 'af74ca1fdd78fd6beafd136c00e58066a80dc5414d9cc0bb109bede7f386434e';

// ---------- The specification, transcribed plainly (docs/maglev.md §4-5) ----------

/** docs/maglev.md as literally as possible: full permutation lists and the scanning weight counter. */
function specificationTable(backends: MaglevBackend[], m: number, seed: number): Uint32Array {
  const live = backends.filter((b) => b.weight > 0).sort((a, b) => (a.id < b.id ? -1 : 1));
  const n = live.length;
  const entry = new Uint32Array(m);
  if (n === 0) return entry;
  const perm = live.map((b) => {
    const { offset, skip } = maglevOffsetSkip(b.id, m, seed);
    return Array.from({ length: m }, (_, j) => (offset + j * skip) % m);
  });
  const next = new Array<number>(n).fill(0);
  const w = live.map((b) => b.weight);
  const W = w.reduce((a, b) => a + b, 0);
  const counter = w.map((x) => x / n);
  for (let turn = 0; turn < m; turn++) {
    let i = turn % n;
    while ((turn + 1) * w[i]! < Math.floor(counter[i]!)) i = (i + 1) % n;
    counter[i] = counter[i]! + W;
    let c = perm[i]![next[i]!]!;
    while (entry[c] !== 0) c = perm[i]![++next[i]!]!;
    entry[c] = live[i]!.realId;
    next[i]!++;
  }
  return entry;
}

test('the fast builder equals the plain specification (random, skewed, tiny and average-weight-1 cases)', (t) => {
  const rand = prng(2024);
  const cases: { n: number; m: number; weight: (i: number) => number }[] = [
    { n: 1, m: 251, weight: () => 7 },
    { n: 2, m: 251, weight: (i) => i + 1 }, // sum/N <= 1: Cilium would ignore these weights
    { n: 5, m: 13, weight: (i) => 1 + i * 3 },
    { n: 40, m: 4093, weight: () => 1 + Math.floor(rand() * 65535) },
    { n: 60, m: 4093, weight: (i) => (i === 0 ? 65535 : 1) }, // one heavy backend
    { n: 64, m: 8191, weight: (i) => (i % 32 === 31 ? 1 : 1000) }, // bitset word edges
    { n: 200, m: 16381, weight: () => 1 + Math.floor(rand() * 10) },
    { n: 33, m: 1021, weight: () => 100 },
  ];
  for (const { n, m, weight } of cases) {
    const list = reals(n, weight);
    t.deepEqual(buildMaglevTable(list, m, 31337), specificationTable(list, m, 31337), `N=${n} M=${m}`);
  }
});

// ---------- Properties ----------

const reals = (n: number, weight: (i: number) => number = () => 1): MaglevBackend[] =>
  Array.from({ length: n }, (_, i) => ({
    id: maglevBackendId(`203.0.${113 + (i >> 8)}.${i & 255}`, 443, 'TCP'),
    weight: weight(i),
    realId: i + 1,
  }));

test('property: equal weights give every backend floor(M/N) or ceil(M/N) entries', (t) => {
  for (const m of [251, 1021, 16381, 65537]) {
    for (const n of [1, 2, 3, 7, 10, 33, 100, 250]) {
      if (n > m) continue;
      const counts = countEntries(buildMaglevTable(reals(n), m, 99));
      t.is(counts.size, n);
      for (const c of counts.values()) t.true(c === Math.floor(m / n) || c === Math.ceil(m / n), `M=${m} N=${n} got ${c}`);
    }
  }
});

test('property: shares follow weights within 1% of M/N per backend at M=65537, N<=100', (t) => {
  const m = 65537;
  const rand = prng(3);
  for (const n of [2, 5, 10, 50, 100]) {
    const weights = Array.from({ length: n }, () => 1 + Math.floor(rand() * 100));
    const total = weights.reduce((a, b) => a + b, 0);
    const counts = countEntries(buildMaglevTable(reals(n, (i) => weights[i]!), m, 4242));
    for (let i = 0; i < n; i++) {
      const want = (m * weights[i]!) / total;
      const got = counts.get(i + 1) ?? 0;
      t.true(Math.abs(got - want) <= 0.01 * (m / n), `N=${n} backend ${i} weight ${weights[i]}: ${got} vs ${want.toFixed(1)}`);
    }
  }
});

test('property: weights are always honoured, also when sum/N <= 1 (where Cilium ignores them)', (t) => {
  // Weights 1 and 2: Cilium's integer test sum/N = 3/2 = 1 disables weighting and gives ~50/50.
  const counts = countEntries(buildMaglevTable(reals(2, (i) => i + 1), 16381, 5));
  t.true(Math.abs(counts.get(1)! - 16381 / 3) < 2, `${counts.get(1)}`);
  t.true(Math.abs(counts.get(2)! - (2 * 16381) / 3) < 2, `${counts.get(2)}`);
});

test('property: removing one of 100 backends moves at most 1% of entries between survivors (M=65537)', (t) => {
  const m = 65537;
  const all = reals(100);
  const before = buildMaglevTable(all, m, 77);
  for (const removed of [1, 50, 100]) {
    const after = buildMaglevTable(all.filter((b) => b.realId !== removed), m, 77);
    let moved = 0;
    for (let j = 0; j < m; j++) if (before[j] !== removed && after[j] !== before[j]) moved++;
    t.true(moved / m <= 0.01, `removing ${removed} moved ${moved}`);
  }
});

test('property: the table does not depend on input order', (t) => {
  const rand = prng(11);
  const list = reals(40, (i) => 1 + (i % 5));
  const reference = buildMaglevTable(list, 4093, 1);
  for (let k = 0; k < 5; k++) {
    const shuffled = [...list];
    for (let i = shuffled.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
    }
    t.deepEqual(buildMaglevTable(shuffled, 4093, 1), reference);
  }
});

test('property: a table does not depend on the builds before it (reused working arrays, memoised hashes)', (t) => {
  const small = reals(7, (i) => 1 + (i % 3));
  const reference = specificationTable(small, 1021, 5);
  t.deepEqual(buildMaglevTable(small, 1021, 5), reference);
  buildMaglevTable(reals(300, (i) => 1 + (i % 9)), 16381, 5); // larger N and M, weighted
  buildMaglevTable(reals(50), 4093, 5); // same identities at another table size
  buildMaglevTable(small, 1021, 6); // another seed drops the memo
  t.deepEqual(buildMaglevTable(small, 1021, 5), reference);
  t.deepEqual(buildMaglevTable(reals(7), 1021, 5), specificationTable(reals(7), 1021, 5)); // equal weights after weighted
});

test('property: zero-weight backends get no entries; no backends give an all-zero table', (t) => {
  const list = reals(4, (i) => (i === 2 ? 0 : 1));
  const counts = countEntries(buildMaglevTable(list, 251, 1));
  t.false(counts.has(3));
  t.is(counts.size, 3);
  const empty = buildMaglevTable([], 251, 1);
  t.is(empty.length, 251);
  t.true(empty.every((v) => v === 0));
});

test('a different seed gives a different table; permutation parameters are in range', (t) => {
  const list = reals(10);
  t.notDeepEqual(buildMaglevTable(list, 1021, 1), buildMaglevTable(list, 1021, 2));
  for (const b of list) {
    const { offset, skip } = maglevOffsetSkip(b.id, 1021, 1);
    t.true(offset >= 0 && offset < 1021 && skip >= 1 && skip < 1021);
  }
});

test('bad input is rejected with a clear message', (t) => {
  t.throws(() => buildMaglevTable(reals(2), 1000, 1), { message: /prime/ });
  t.throws(() => buildMaglevTable([...reals(2), reals(1)[0]!], 251, 1), { message: /duplicate backend identity/ });
  t.throws(() => buildMaglevTable([{ id: 'x', weight: 1, realId: 0 }], 251, 1), { message: /realId/ });
  t.throws(() => buildMaglevTable([{ id: 'x', weight: 2 ** 31, realId: 1 }, { id: 'y', weight: 2 ** 31, realId: 2 }], 2097143, 1), {
    message: /total weight/,
  });
  t.throws(() => maglevSeedFromBase64('short'), { message: /base64/ });
  t.throws(() => maglevSeedFromBase64('AAAA'), { message: /12/ });
});

test('buildMaglevTableCounted: the same table, and the entries countEntries finds in it (equal, skewed, zero weights, none)', (t) => {
  const rand = prng(27);
  const cases: [string, MaglevBackend[], number][] = [
    ['equal weights', reals(100), 10007],
    ['equal weights, N does not divide M', reals(7), 251],
    ['skewed weights', reals(60, () => 1 + Math.floor(rand() * 1000)), 16381],
    ['some weights 0', reals(20, (i) => (i % 3 === 0 ? 0 : 1 + i)), 1021],
    ['every weight 0', reals(5, () => 0), 251],
    ['no backend', [], 251],
  ];
  for (const [name, backends, m] of cases) {
    const { table, entries } = buildMaglevTableCounted(backends, m, 77);
    t.deepEqual(table, buildMaglevTable(backends, m, 77), name);
    const sorted = (x: Map<number, number>) => [...x].sort((a, b) => a[0] - b[0]);
    t.deepEqual(sorted(entries), sorted(countEntries(table)), name);
  }
});
