// Weighted Maglev lookup tables (Eisenbud et al., NSDI 2016), specified byte for byte in docs/maglev.md.
//
// The permutation, the backend identity string and the weighting follow Cilium's pkg/maglev so that our tables can
// be checked against an implementation nobody here wrote: a table built here equals Cilium's for the same backends,
// seed and size, except that we ALWAYS honour weights (Cilium ignores unequal weights when sum/N <= 1).
//
// Speed: the permutation of a backend is an arithmetic progression (offset + j*skip) mod M, so instead of storing
// N*M permutation entries we keep, per backend, the position of its next candidate slot and step it by `skip`.
// All working state is in typed arrays sized N or M; nothing is allocated per table entry.
import { murmur3x64_128, u64Mod } from './murmur3.js';

export interface MaglevBackend {
  /** Identity string hashed for the permutation and used for ordering (see maglevBackendId). Unique per table. */
  id: string;
  /** Relative share. 0 means "no entries" (the backend is left out). Integer in [0, 2^32); the sum of all weights
   * times the table size must stay below 2^52 so the weight counters are exact (config limits keep it below 2^46). */
  weight: number;
  /** The value written into the table for this backend; >= 1, since 0 marks an empty table. */
  realId: number;
}

/** Table sizes must be prime (skip values 1..M-1 then give full permutations) and small enough for exact math. */
export const MAX_TABLE_SIZE = (1 << 26) - 1;

export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  if (n % 2 === 0) return n === 2;
  for (let d = 3; d * d <= n; d += 2) if (n % d === 0) return false;
  return true;
}

/**
 * Cilium's backend identity string: `[<addr>:<port>/<proto>,State:active]` for IPv4 and
 * `[[<addr>]:<port>/<proto>,State:active]` for IPv6. `address` must be canonical (IPv6 compressed, lower case).
 */
export function maglevBackendId(address: string, port: number, protocol: string): string {
  const host = address.includes(':') ? `[${address}]` : address;
  return `[${host}:${port}/${protocol},State:active]`;
}

/** The Murmur seed of a Cluster's `maglev.seed`: the first 4 bytes of the base64-decoded seed, big-endian. */
export function maglevSeedFromBase64(seed: string): number {
  const bytes = decodeBase64Strict(seed, 'maglev.seed');
  return ((bytes[0]! << 24) | (bytes[1]! << 16) | (bytes[2]! << 8) | bytes[3]!) >>> 0;
}

/** Decodes standard base64 (with padding) and insists on 12 bytes, as Cilium does. */
export function decodeBase64Strict(text: string, field: string): Uint8Array {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) {
    throw new Error(`${field}: '${text}' is not standard base64`);
  }
  const bytes = Buffer.from(text, 'base64');
  if (bytes.length !== 12) throw new Error(`${field}: decodes to ${bytes.length} bytes, expected 12`);
  return new Uint8Array(bytes);
}

const utf8 = new TextEncoder();
let idBytes = new Uint8Array(128);

/** UTF-8 bytes of `id` in a reused buffer (identity strings are ASCII; others take the slow path). */
function encodeId(id: string): Uint8Array {
  if (id.length > idBytes.length) idBytes = new Uint8Array(id.length * 2);
  for (let k = 0; k < id.length; k++) {
    const c = id.charCodeAt(k);
    if (c > 0x7f) return utf8.encode(id);
    idBytes[k] = c;
  }
  return idBytes.subarray(0, id.length);
}

// Murmur3 of backend identities, memoised per seed: every render hashes the same reals again (for every revision
// and every service they are in), and hashing a 40-byte identity in 32-bit halves costs more than a backend's
// share of the fill. KatranLb likewise computes a real's hash once, when the real is added. Bounded: the memo is
// dropped when it is full or the seed changes. The result depends only on (id, seed), so builds stay pure.
const MEMO_MAX = 65536;
let memoSeed = -1;
const memo = new Map<string, Uint32Array>();

function identityHash(id: string, seed: number): Uint32Array {
  if (seed !== memoSeed || memo.size >= MEMO_MAX) {
    memo.clear();
    memoSeed = seed;
  }
  let h = memo.get(id);
  if (!h) {
    h = murmur3x64_128(encodeId(id), seed, new Uint32Array(4));
    memo.set(id, h);
  }
  return h;
}

/** The Maglev permutation parameters of one backend: offset = h1 mod M, skip = h2 mod (M-1) + 1. */
export function maglevOffsetSkip(id: string, tableSize: number, seed: number): { offset: number; skip: number } {
  const h = identityHash(id, seed);
  return {
    offset: u64Mod(h[0]!, h[1]!, tableSize),
    skip: u64Mod(h[2]!, h[3]!, tableSize - 1) + 1,
  };
}

function compareIds(a: MaglevBackend, b: MaglevBackend): number {
  // Code-unit order; identity strings are ASCII, so this is Go's byte order (cmp.Compare on strings).
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function checkInputs(backends: readonly MaglevBackend[], tableSize: number, seed: number): void {
  if (!isPrime(tableSize) || tableSize > MAX_TABLE_SIZE) {
    throw new Error(`maglev: table size ${tableSize} must be a prime below ${MAX_TABLE_SIZE + 1}`);
  }
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`maglev: seed ${seed} is not a u32`);
  const seen = new Set<string>();
  let weightSum = 0;
  for (const b of backends) {
    weightSum += b.weight;
    if (seen.has(b.id)) throw new Error(`maglev: duplicate backend identity '${b.id}'`);
    seen.add(b.id);
    if (!Number.isInteger(b.weight) || b.weight < 0 || b.weight > 0xffffffff) {
      throw new Error(`maglev: backend '${b.id}' has invalid weight ${b.weight}`);
    }
    if (!Number.isInteger(b.realId) || b.realId < 1 || b.realId > 0xffffffff) {
      throw new Error(`maglev: backend '${b.id}' has invalid realId ${b.realId} (must be a u32 >= 1)`);
    }
  }
  if (weightSum * tableSize >= 2 ** 52) {
    throw new Error(`maglev: total weight ${weightSum} is too large for table size ${tableSize} (weight sum x M must be < 2^52)`);
  }
}

/** Smallest turn t >= 0 with (t + 1) * w >= f, for integers f >= 0, w >= 1 (exact: no rounded division decides). */
function firstEligibleTurn(f: number, w: number): number {
  if (f <= w) return 0;
  let q = Math.floor(f / w);
  while (q * w < f) q++;
  while ((q - 1) * w >= f) q--;
  return q - 1;
}

/** Index of the first set bit at or after `start`, cyclically; -1 when no bit is set. */
function nextSetBit(bits: Int32Array, start: number): number {
  const words = bits.length;
  let k = start >>> 5;
  let word = bits[k]! & (-1 << (start & 31));
  for (let scanned = 0; scanned <= words; scanned++) {
    if (word !== 0) return (k << 5) + (31 - Math.clz32(word & -word));
    k = k + 1 === words ? 0 : k + 1;
    word = bits[k]!;
  }
  return -1;
}

/**
 * Which backend claims each of the M turns of the fill. Turn n belongs to backend n mod N unless that backend is
 * ahead of its weighted share — (n+1)·w[i] < floor(counter[i]) — in which case the turn passes to the next backend
 * in order (the Envoy/Cilium counter method, docs/maglev.md §5). Each claim adds the weight sum to the claimant's
 * counter (a double, as in the specification).
 *
 * Scanning backend after backend costs O(N) per turn when weights are skewed, so this evaluates the same rule with
 * bookkeeping instead: a backend's condition only changes when it claims a turn, and then it becomes eligible again
 * at a turn computed exactly (firstEligibleTurn). Eligible backends sit in a bitset, the others in per-turn buckets;
 * "the next backend in order that is eligible" is a next-set-bit query. The result is the specification's turn order.
 */
function weightedTurnOwners(weight: Float64Array, m: number): Int32Array {
  const n = weight.length;
  const owners = new Int32Array(m);
  let weightSum = 0;
  for (let i = 0; i < n; i++) weightSum += weight[i]!;
  const counter = new Float64Array(n);
  const eligible = new Int32Array((n + 31) >>> 5);
  const bucketHead = new Int32Array(m).fill(-1); // backends that become eligible at turn t
  const bucketNext = new Int32Array(n);
  // A backend whose next eligible turn is `turn` goes into the bitset when that turn has come, else into its bucket.
  for (let i = 0; i < n; i++) {
    counter[i] = weight[i]! / n;
    const turn = firstEligibleTurn(Math.floor(counter[i]!), weight[i]!);
    if (turn <= 0) eligible[i >>> 5]! |= 1 << (i & 31);
    else if (turn < m) {
      bucketNext[i] = bucketHead[turn]!;
      bucketHead[turn] = i;
    }
  }
  for (let t = 0; t < m; t++) {
    for (let b = bucketHead[t]!; b !== -1; b = bucketNext[b]!) eligible[b >>> 5]! |= 1 << (b & 31);
    const i = nextSetBit(eligible, t % n);
    if (i < 0) throw new Error('internal: maglev weight counter left no backend eligible');
    owners[t] = i;
    eligible[i >>> 5]! &= ~(1 << (i & 31));
    counter[i] = counter[i]! + weightSum;
    const turn = firstEligibleTurn(Math.floor(counter[i]!), weight[i]!);
    if (turn <= t + 1) eligible[i >>> 5]! |= 1 << (i & 31);
    else if (turn < m) {
      bucketNext[i] = bucketHead[turn]!;
      bucketHead[turn] = i;
    }
  }
  return owners;
}

/**
 * Builds the Maglev lookup table of `tableSize` entries for `backends`; each entry is the realId of the backend
 * that owns it, or 0 for every entry when no backend has a positive weight. Deterministic: depends only on the
 * set of (id, weight, realId), the size and the seed — never on the order of `backends`.
 */
export function buildMaglevTable(backends: readonly MaglevBackend[], tableSize: number, seed: number): Uint32Array {
  checkInputs(backends, tableSize, seed);
  const table = new Uint32Array(tableSize);
  const live = backends.filter((b) => b.weight > 0).sort(compareIds);
  const n = live.length;
  if (n === 0) return table;

  const m = tableSize;
  const position = new Int32Array(n); // slot of the backend's next permutation candidate
  const skip = new Int32Array(n);
  const weight = new Float64Array(n);
  const realId = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const b = live[i]!;
    const p = maglevOffsetSkip(b.id, m, seed);
    position[i] = p.offset;
    skip[i] = p.skip;
    weight[i] = b.weight;
    realId[i] = b.realId;
  }

  // With equal weights no turn is ever passed on (proof in docs/maglev.md §5): the turn order is round robin.
  let equal = true;
  for (let k = 1; k < n; k++) if (weight[k] !== weight[0]) equal = false;
  const owners = equal ? null : weightedTurnOwners(weight, m);

  // Each turn, its owner takes the first still-empty slot of its permutation (offset + j·skip mod M).
  let roundRobin = n - 1;
  for (let t = 0; t < m; t++) {
    let i: number;
    if (owners === null) {
      roundRobin = roundRobin + 1 === n ? 0 : roundRobin + 1;
      i = roundRobin;
    } else {
      i = owners[t]!;
    }
    const step = skip[i]!;
    let slot = position[i]!;
    while (table[slot] !== 0) {
      slot += step;
      if (slot >= m) slot -= m;
    }
    table[slot] = realId[i]!;
    slot += step;
    if (slot >= m) slot -= m;
    position[i] = slot;
  }
  return table;
}

/** Number of table entries per realId. */
export function countEntries(table: Uint32Array): Map<number, number> {
  const counts = new Map<number, number>();
  for (let j = 0; j < table.length; j++) {
    const id = table[j]!;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}
