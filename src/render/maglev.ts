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
import { GitlbError } from '../errors.js';

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
    throw new GitlbError('ConfigInvalid', `${field}: '${text}' is not standard base64`, { field });
  }
  const bytes = Buffer.from(text, 'base64');
  if (bytes.length !== 12) throw new GitlbError('ConfigInvalid', `${field}: decodes to ${bytes.length} bytes, expected 12`, { field });
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
// share of the fill. KatranLb likewise computes a real's hash once, when the real is added. Each entry also keeps
// the offset and skip for the last table size it was used with (a cluster mostly uses one size), so a build does
// no 64-bit modulo either. Bounded: the memo is dropped when it is full or the seed changes. Every value depends
// only on (id, seed, M), so builds stay pure.
interface Identity {
  hash: Uint32Array; // [h1.hi, h1.lo, h2.hi, h2.lo]
  m: number; // table size of offset and skip below (0: not computed yet)
  offset: number;
  skip: number;
}
const MEMO_MAX = 65536;
let memoSeed = -1;
const memo = new Map<string, Identity>();

/** The memo entry of `id`, with offset and skip computed for table size `m`. */
function identity(id: string, seed: number, m: number): Identity {
  if (seed !== memoSeed || memo.size >= MEMO_MAX) {
    memo.clear();
    memoSeed = seed;
  }
  let e = memo.get(id);
  if (!e) {
    e = { hash: murmur3x64_128(encodeId(id), seed, new Uint32Array(4)), m: 0, offset: 0, skip: 0 };
    memo.set(id, e);
  }
  if (e.m !== m) {
    const h = e.hash;
    e.offset = u64Mod(h[0]!, h[1]!, m);
    e.skip = u64Mod(h[2]!, h[3]!, m - 1) + 1;
    e.m = m;
  }
  return e;
}

/** The Maglev permutation parameters of one backend: offset = h1 mod M, skip = h2 mod (M-1) + 1. */
export function maglevOffsetSkip(id: string, tableSize: number, seed: number): { offset: number; skip: number } {
  const e = identity(id, seed, tableSize);
  return { offset: e.offset, skip: e.skip };
}

function compareIds(a: MaglevBackend, b: MaglevBackend): number {
  // Code-unit order; identity strings are ASCII, so this is Go's byte order (cmp.Compare on strings). The
  // equality test is cheap (interned or hashed strings) and lets duplicates be found next to each other.
  return a.id < b.id ? -1 : a.id === b.id ? 0 : 1;
}

/** Validates the inputs and returns all backends sorted by identity (a copy; duplicates are found as neighbours). */
function checkedSorted(backends: readonly MaglevBackend[], tableSize: number, seed: number): MaglevBackend[] {
  if (!isPrime(tableSize) || tableSize > MAX_TABLE_SIZE) {
    throw new GitlbError('RenderFailed', `maglev: table size ${tableSize} must be a prime below ${MAX_TABLE_SIZE + 1}`);
  }
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new GitlbError('RenderFailed', `maglev: seed ${seed} is not a u32`);
  const sorted = backends.slice().sort(compareIds);
  let weightSum = 0;
  for (let k = 0; k < sorted.length; k++) {
    const b = sorted[k]!;
    weightSum += b.weight;
    if (k > 0 && sorted[k - 1]!.id === b.id) throw new GitlbError('RenderFailed', `maglev: duplicate backend identity '${b.id}'`);
    if (!Number.isInteger(b.weight) || b.weight < 0 || b.weight > 0xffffffff) {
      throw new GitlbError('RenderFailed', `maglev: backend '${b.id}' has invalid weight ${b.weight}`);
    }
    if (!Number.isInteger(b.realId) || b.realId < 1 || b.realId > 0xffffffff) {
      throw new GitlbError('RenderFailed', `maglev: backend '${b.id}' has invalid realId ${b.realId} (must be a u32 >= 1)`);
    }
  }
  if (weightSum * tableSize >= 2 ** 52) {
    throw new GitlbError('RenderFailed', `maglev: total weight ${weightSum} is too large for table size ${tableSize} (weight sum x M must be < 2^52)`);
  }
  return sorted;
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
function weightedTurnOwners(weight: Float64Array, n: number, m: number): Int32Array {
  const owners = scratchOwners(m);
  let weightSum = 0;
  for (let i = 0; i < n; i++) weightSum += weight[i]!;
  const counter = new Float64Array(n);
  const eligible = new Int32Array((n + 31) >>> 5);
  const bucketHead = scratchBucketHead(m); // backends that become eligible at turn t
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

// Working arrays reused from build to build (a render builds many tables of the same size): sized by the largest
// N or M seen so far and re-initialised by every build before use, so no result depends on an earlier build.
let backendCapacity = 0;
let positionScratch = new Int32Array(0); // slot of the backend's next permutation candidate
let skipScratch = new Int32Array(0); // skip - M (see the fill loop)
let skip2Scratch = new Int32Array(0); // (2·skip mod M) - M
let weightScratch = new Float64Array(0);
let realIdScratch = new Uint32Array(0);
let ownersScratch = new Int32Array(0);
let bucketScratch = new Int32Array(0);

function reserveBackends(n: number): void {
  if (n <= backendCapacity) return;
  backendCapacity = Math.max(n, 2 * backendCapacity);
  positionScratch = new Int32Array(backendCapacity);
  skipScratch = new Int32Array(backendCapacity);
  skip2Scratch = new Int32Array(backendCapacity);
  weightScratch = new Float64Array(backendCapacity);
  realIdScratch = new Uint32Array(backendCapacity);
}

/** Turn owners, M entries (every one is written by weightedTurnOwners). */
function scratchOwners(m: number): Int32Array {
  if (ownersScratch.length < m) ownersScratch = new Int32Array(m);
  return ownersScratch;
}

/** Bucket heads, M entries, all -1. */
function scratchBucketHead(m: number): Int32Array {
  if (bucketScratch.length < m) bucketScratch = new Int32Array(m);
  return bucketScratch.fill(-1, 0, m);
}

/**
 * Builds the Maglev lookup table of `tableSize` entries for `backends`; each entry is the realId of the backend
 * that owns it, or 0 for every entry when no backend has a positive weight. Deterministic: depends only on the
 * set of (id, weight, realId), the size and the seed — never on the order of `backends`.
 */
export function buildMaglevTable(backends: readonly MaglevBackend[], tableSize: number, seed: number): Uint32Array {
  return fillTable(backends, tableSize, seed, null);
}

/**
 * buildMaglevTable and the entries each realId got (countEntries of the table without a Map lookup per entry:
 * every turn of the fill writes exactly one entry, so a backend's entries are the turns it claimed). Realids of
 * no entry are absent.
 */
export function buildMaglevTableCounted(backends: readonly MaglevBackend[], tableSize: number, seed: number): { table: Uint32Array; entries: Map<number, number> } {
  const entries = new Map<number, number>();
  return { table: fillTable(backends, tableSize, seed, entries), entries };
}

let claimScratch = new Int32Array(0);

function fillTable(backends: readonly MaglevBackend[], tableSize: number, seed: number, entries: Map<number, number> | null): Uint32Array {
  const sorted = checkedSorted(backends, tableSize, seed);
  const m = tableSize;
  const table = new Uint32Array(m);
  reserveBackends(sorted.length);
  // Locals, not the module's bindings, in the loops below.
  const position = positionScratch;
  const skipLessM = skipScratch;
  const skip2LessM = skip2Scratch;
  const weights = weightScratch;
  const realIds = realIdScratch;
  let n = 0; // backends with a positive weight, in identity order
  let equal = true;
  for (const b of sorted) {
    if (b.weight === 0) continue;
    const e = identity(b.id, seed, m);
    position[n] = e.offset;
    skipLessM[n] = e.skip - m;
    const twice = 2 * e.skip - m; // 2·skip mod M, minus M
    skip2LessM[n] = twice >= 0 ? twice - m : twice;
    weights[n] = b.weight;
    realIds[n] = b.realId;
    if (b.weight !== weights[0]) equal = false;
    n++;
  }
  if (n === 0) {
    if (entries) entries.set(0, m);
    return table;
  }

  // With equal weights no turn is ever passed on (proof in docs/maglev.md §5): the turn order is round robin.
  const turnOwner = equal ? null : weightedTurnOwners(weights, n, m);

  // Each turn, its owner takes the first still-empty slot of its permutation (offset + j·skip mod M). Stepping is
  // `slot += skip - M`, then `+ M` back when that went negative: the sign bit makes the mask, so there is no
  // division and no branch (a wrap-around branch would be taken at random, about half of the time).
  let roundRobin = n - 1;
  for (let t = 0; t < m; t++) {
    let i: number;
    if (turnOwner === null) {
      roundRobin = roundRobin + 1 === n ? 0 : roundRobin + 1;
      i = roundRobin;
    } else {
      i = turnOwner[t]!;
    }
    const step = skipLessM[i]!;
    let slot = position[i]!;
    if (table[slot] !== 0) {
      // Two candidates per iteration, both computed from `slot` (one and two steps on), so the chain of dependent
      // additions is half as long and the loop branches half as often; measured ~10% faster at M = 16381.
      const step2 = skip2LessM[i]!;
      for (;;) {
        let a = slot + step;
        a += (a >> 31) & m;
        let b = slot + step2;
        b += (b >> 31) & m;
        if (table[a] === 0) {
          slot = a;
          break;
        }
        slot = b;
        if (table[b] === 0) break;
      }
    }
    table[slot] = realIds[i]!;
    slot += step;
    position[i] = slot + ((slot >> 31) & m);
  }
  if (entries) {
    if (claimScratch.length < n) claimScratch = new Int32Array(Math.max(n, 2 * claimScratch.length));
    const claims = claimScratch.fill(0, 0, n);
    if (turnOwner === null) for (let i = 0; i < n; i++) claims[i] = Math.floor(m / n) + (i < m % n ? 1 : 0);
    else for (let t = 0; t < m; t++) claims[turnOwner[t]!]!++;
    for (let i = 0; i < n; i++) if (claims[i]! > 0) entries.set(realIds[i]!, claims[i]!);
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
