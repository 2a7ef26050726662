// Stable numeric ids without state. Render is pure, so it cannot remember which id a service or real had in the
// previous revision; instead an id is derived from the name itself: the first 4 bytes (big-endian) of
// SHA-256("gitlb/<kind>/" + key). The same name gets the same id in every revision, on every node.
//
// Collisions in the 2^32 space are rare (about 1 in 8,600 for 1,000 keys) but must still be resolved
// deterministically: keys are processed in code-unit order and a key whose id is 0 or already taken takes the
// next free value (+1, wrapping past 2^32-1 to 1). Only the later key of a colliding pair moves. See docs/render.md.
import { createHash } from 'node:crypto';

export type IdKind = 'service' | 'real';

export function rawStableId(kind: IdKind, key: string): number {
  const digest = createHash('sha256').update(`gitlb/${kind}/${key}`, 'utf8').digest();
  return digest.readUInt32BE(0);
}

/** Assigns each distinct key an id in [1, 2^32-1]; the result depends only on the set of keys. */
export function assignStableIds(kind: IdKind, keys: Iterable<string>): Map<string, number> {
  const sorted = [...new Set(keys)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const taken = new Set<number>();
  const ids = new Map<string, number>();
  for (const key of sorted) {
    let id = rawStableId(kind, key);
    while (id === 0 || taken.has(id)) id = id === 0xffffffff ? 1 : id + 1;
    taken.add(id);
    ids.set(key, id);
  }
  return ids;
}
