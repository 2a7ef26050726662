// U32Table (src/bpf/dataplane/u32-table.ts), the u32 -> u32 map the ring conversions and checks use: it must agree
// with a Map on every key, across growth, for keys 0 and 2^32-1, colliding keys and absent ones.
import test from 'ava';
import { U32Table } from '../../src/bpf/dataplane/u32-table.js';
import { prng } from '../lib/prng.js';

test('agrees with a Map: set, overwrite, absent keys, growth from the smallest size', (t) => {
  const rand = prng(2027);
  const table = new U32Table();
  const ref = new Map<number, number>();
  // random u32 keys, the extremes, and keys that share their low bits (the same probe start in a small table)
  const keys = [0, 0xffffffff, 1, 0x80000000, ...Array.from({ length: 64 }, (_, i) => i << 16),
    ...Array.from({ length: 5000 }, () => Math.floor(rand() * 2 ** 32))];
  for (const [i, k] of keys.entries()) {
    const v = Math.floor(rand() * 2 ** 32);
    table.set(k, v);
    ref.set(k, v);
    if (i % 7 === 0) { table.set(k, i); ref.set(k, i); }
  }
  t.is(table.size, ref.size);
  for (const [k, v] of ref) t.is(table.get(k), v);
  let absent = 0;
  for (let i = 0; i < 5000; i++) {
    const k = Math.floor(rand() * 2 ** 32);
    if (ref.has(k)) continue;
    absent++;
    t.is(table.get(k), -1);
  }
  t.true(absent > 4900);
});
