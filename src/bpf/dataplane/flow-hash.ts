// The data path's flow hash (docs/datapath.md "Flow hash"), in TypeScript: Bob Jenkins' lookup3
// hashword() over the flow's 32-bit words with the cluster seed as initval. Used by tests and tools
// to predict which ring slot (and so which real) a new flow gets.
import { addr16, familyOf } from './codec.js';

const rol = (x: number, k: number) => ((x << k) | (x >>> (32 - k))) >>> 0;

export function hashword(words: number[], initval: number): number {
  let a = (0xdeadbeef + (words.length << 2) + initval) >>> 0;
  let b = a;
  let c = a;
  let i = 0;
  let n = words.length;
  const mix = () => {
    a = (a - c) >>> 0; a = (a ^ rol(c, 4)) >>> 0; c = (c + b) >>> 0;
    b = (b - a) >>> 0; b = (b ^ rol(a, 6)) >>> 0; a = (a + c) >>> 0;
    c = (c - b) >>> 0; c = (c ^ rol(b, 8)) >>> 0; b = (b + a) >>> 0;
    a = (a - c) >>> 0; a = (a ^ rol(c, 16)) >>> 0; c = (c + b) >>> 0;
    b = (b - a) >>> 0; b = (b ^ rol(a, 19)) >>> 0; a = (a + c) >>> 0;
    c = (c - b) >>> 0; c = (c ^ rol(b, 4)) >>> 0; b = (b + a) >>> 0;
  };
  const final = () => {
    c = (c ^ b) >>> 0; c = (c - rol(b, 14)) >>> 0;
    a = (a ^ c) >>> 0; a = (a - rol(c, 11)) >>> 0;
    b = (b ^ a) >>> 0; b = (b - rol(a, 25)) >>> 0;
    c = (c ^ b) >>> 0; c = (c - rol(b, 16)) >>> 0;
    a = (a ^ c) >>> 0; a = (a - rol(c, 4)) >>> 0;
    b = (b ^ a) >>> 0; b = (b - rol(a, 14)) >>> 0;
    c = (c ^ b) >>> 0; c = (c - rol(b, 24)) >>> 0;
  };
  while (n > 3) {
    a = (a + words[i]!) >>> 0;
    b = (b + words[i + 1]!) >>> 0;
    c = (c + words[i + 2]!) >>> 0;
    mix();
    n -= 3;
    i += 3;
  }
  if (n === 0) return c;
  if (n >= 3) c = (c + words[i + 2]!) >>> 0;
  if (n >= 2) b = (b + words[i + 1]!) >>> 0;
  a = (a + words[i]!) >>> 0;
  final();
  return c;
}

export interface Flow { src: string; dst: string; sport: number; dport: number; proto: number }

/** The words hashed for a flow: addresses as big-endian u32s, (sport << 16 | dport), protocol. */
export function flowWords(f: Flow, hashSourcePort: boolean): number[] {
  const fam = familyOf(f.src);
  const s = addr16(f.src);
  const d = addr16(f.dst);
  const n = fam === 4 ? 1 : 4;
  const words: number[] = [];
  for (let i = 0; i < n; i++) words.push(s.readUInt32BE(i * 4));
  for (let i = 0; i < n; i++) words.push(d.readUInt32BE(i * 4));
  words.push((((hashSourcePort ? f.sport : 0) << 16) | f.dport) >>> 0, f.proto);
  return words;
}

export function flowHash(f: Flow, hashSourcePort: boolean, seed: number): number {
  return hashword(flowWords(f, hashSourcePort), seed >>> 0);
}

/** Ring slot of a new flow. */
export function ringSlot(f: Flow, hashSourcePort: boolean, seed: number, tableSize: number): number {
  return flowHash(f, hashSourcePort, seed) % tableSize;
}
