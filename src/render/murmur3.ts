// MurmurHash3 x64_128 (Austin Appleby's public-domain algorithm), with a 32-bit seed widened to 64 bits for both
// lanes, exactly as the reference MurmurHash3_x64_128 does. Maglev uses it to place backends (docs/maglev.md).
//
// JavaScript has no unsigned 64-bit integer short of BigInt, which is slow and allocates, so every 64-bit value is
// carried as two unsigned 32-bit halves (hi, lo) and multiplied with 16-bit limbs. Results are written into a
// caller-owned Uint32Array so hashing allocates nothing.

// Scratch register for the 64-bit helpers: each helper leaves its result in R = [hi, lo]. A typed array, not two
// `let`s, because module-level numbers above 2^30 would be boxed on every store; an Int32Array, not a
// Uint32Array, because a Uint32Array load of a value above 2^31 becomes a double, and the halves here are mostly
// that large (the bits are the same; readers that need the unsigned value apply >>> 0). Measured: 0.97 -> 0.52 µs
// per 36-byte identity, together with the division-free mulHigh32.
const R = new Int32Array(2);

/** High 32 bits of the unsigned 64-bit product of two unsigned 32-bit numbers (16-bit limbs, no division). */
function mulHigh32(a: number, b: number): number {
  const a0 = a & 0xffff;
  const a1 = a >>> 16;
  const b0 = b & 0xffff;
  const b1 = b >>> 16;
  // Every partial sum stays below 2^32, so it is exact whether the engine keeps it as an integer or a double.
  const low = a0 * b0;
  const mid1 = a1 * b0 + (low >>> 16);
  const mid2 = a0 * b1 + (mid1 & 0xffff);
  return (a1 * b1 + (mid1 >>> 16) + (mid2 >>> 16)) >>> 0;
}

/** (ah:al) * (bh:bl) mod 2^64 -> R. */
function mul64(ah: number, al: number, bh: number, bl: number): void {
  const lo = Math.imul(al, bl) >>> 0;
  const hi = (mulHigh32(al, bl) + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0;
  R[0] = hi;
  R[1] = lo;
}

/** (ah:al) + (bh:bl) mod 2^64 -> R. */
function add64(ah: number, al: number, bh: number, bl: number): void {
  const lo = (al >>> 0) + (bl >>> 0); // halves may arrive signed (from R): compare the carry unsigned
  R[1] = lo | 0;
  R[0] = (ah + bh + (lo > 0xffffffff ? 1 : 0)) | 0;
}

/** Rotate (h:l) left by r bits, 0 < r < 64 -> R. */
function rotl64(h: number, l: number, r: number): void {
  if (r >= 32) {
    const t = h;
    h = l;
    l = t;
    r -= 32;
  }
  if (r === 0) {
    R[0] = h >>> 0;
    R[1] = l >>> 0;
    return;
  }
  R[0] = ((h << r) | (l >>> (32 - r))) >>> 0;
  R[1] = ((l << r) | (h >>> (32 - r))) >>> 0;
}

// Constants of MurmurHash3 x64_128, as (hi, lo) halves.
const C1H = 0x87c37b91;
const C1L = 0x114253d5;
const C2H = 0x4cf5ad43;
const C2L = 0x2745937f;

/** fmix64 finaliser -> R. */
function fmix64(h: number, l: number): void {
  l = (l ^ (h >>> 1)) >>> 0; // k ^= k >> 33
  mul64(h, l, 0xff51afd7, 0xed558ccd);
  h = R[0]!;
  l = (R[1]! ^ (R[0]! >>> 1)) >>> 0;
  mul64(h, l, 0xc4ceb9fe, 0x1a85ec53);
  h = R[0]!;
  l = (R[1]! ^ (R[0]! >>> 1)) >>> 0;
  R[0] = h;
  R[1] = l;
}

function readU32LE(data: Uint8Array, at: number): number {
  return (data[at]! | (data[at + 1]! << 8) | (data[at + 2]! << 16) | (data[at + 3]! << 24)) >>> 0;
}

/** Mixes the k1 lane: k1 *= c1; k1 = rotl(k1, 31); k1 *= c2 -> R. */
function mixK1(kh: number, kl: number): void {
  mul64(kh, kl, C1H, C1L);
  rotl64(R[0]!, R[1]!, 31);
  mul64(R[0]!, R[1]!, C2H, C2L);
}

/** Mixes the k2 lane: k2 *= c2; k2 = rotl(k2, 33); k2 *= c1 -> R. */
function mixK2(kh: number, kl: number): void {
  mul64(kh, kl, C2H, C2L);
  rotl64(R[0]!, R[1]!, 33);
  mul64(R[0]!, R[1]!, C1H, C1L);
}

/**
 * MurmurHash3 x64_128 of `data` with a 32-bit `seed`. Writes [h1.hi, h1.lo, h2.hi, h2.lo] into `out`
 * (a Uint32Array of length >= 4) and returns it. h1 and h2 are the two 64-bit words the reference
 * implementation returns (its output bytes are h1 then h2, each little-endian).
 */
export function murmur3x64_128(data: Uint8Array, seed: number, out: Uint32Array = new Uint32Array(4)): Uint32Array {
  const len = data.length;
  const nblocks = len >>> 4;
  let h1h = 0;
  let h1l = seed >>> 0;
  let h2h = 0;
  let h2l = seed >>> 0;

  for (let i = 0; i < nblocks; i++) {
    const at = i * 16;
    mixK1(readU32LE(data, at + 4), readU32LE(data, at));
    h1h = (h1h ^ R[0]!) >>> 0;
    h1l = (h1l ^ R[1]!) >>> 0;
    rotl64(h1h, h1l, 27);
    add64(R[0]!, R[1]!, h2h, h2l);
    mul64(R[0]!, R[1]!, 0, 5);
    add64(R[0]!, R[1]!, 0, 0x52dce729);
    h1h = R[0]!;
    h1l = R[1]!;

    mixK2(readU32LE(data, at + 12), readU32LE(data, at + 8));
    h2h = (h2h ^ R[0]!) >>> 0;
    h2l = (h2l ^ R[1]!) >>> 0;
    rotl64(h2h, h2l, 31);
    add64(R[0]!, R[1]!, h1h, h1l);
    mul64(R[0]!, R[1]!, 0, 5);
    add64(R[0]!, R[1]!, 0, 0x38495ab5);
    h2h = R[0]!;
    h2l = R[1]!;
  }

  // Tail: up to 15 bytes, little-endian into k1 (bytes 0..7) and k2 (bytes 8..14).
  const tail = nblocks * 16;
  const rest = len & 15;
  if (rest > 8) {
    let k2h = 0;
    let k2l = 0;
    for (let b = rest - 1; b >= 8; b--) {
      const byte = data[tail + b]!;
      const shift = (b - 8) * 8;
      if (shift >= 32) k2h = (k2h | (byte << (shift - 32))) >>> 0;
      else k2l = (k2l | (byte << shift)) >>> 0;
    }
    mixK2(k2h, k2l);
    h2h = (h2h ^ R[0]!) >>> 0;
    h2l = (h2l ^ R[1]!) >>> 0;
  }
  if (rest > 0) {
    let k1h = 0;
    let k1l = 0;
    for (let b = Math.min(rest, 8) - 1; b >= 0; b--) {
      const byte = data[tail + b]!;
      const shift = b * 8;
      if (shift >= 32) k1h = (k1h | (byte << (shift - 32))) >>> 0;
      else k1l = (k1l | (byte << shift)) >>> 0;
    }
    mixK1(k1h, k1l);
    h1h = (h1h ^ R[0]!) >>> 0;
    h1l = (h1l ^ R[1]!) >>> 0;
  }

  // Finalisation. The length is below 2^32 here, so only the low half changes.
  h1l = (h1l ^ len) >>> 0;
  h2l = (h2l ^ len) >>> 0;
  add64(h1h, h1l, h2h, h2l);
  h1h = R[0]!;
  h1l = R[1]!;
  add64(h2h, h2l, h1h, h1l);
  h2h = R[0]!;
  h2l = R[1]!;
  fmix64(h1h, h1l);
  h1h = R[0]!;
  h1l = R[1]!;
  fmix64(h2h, h2l);
  h2h = R[0]!;
  h2l = R[1]!;
  add64(h1h, h1l, h2h, h2l);
  h1h = R[0]!;
  h1l = R[1]!;
  add64(h2h, h2l, h1h, h1l);
  h2h = R[0]!;
  h2l = R[1]!;

  out[0] = h1h;
  out[1] = h1l;
  out[2] = h2h;
  out[3] = h2l;
  return out;
}

/** (hi * 2^32 + lo) mod m for 1 <= m < 2^26, exact in double arithmetic. */
export function u64Mod(hi: number, lo: number, m: number): number {
  return ((hi % m) * (4294967296 % m) + (lo % m)) % m;
}
