// The connections a node still carries (graceful drain, src/reconciler/flows/drain-watch.ts): connection-table entries
// whose coarse last-seen (lb_flow_value.last_seen, CLOCK_MONOTONIC >> 30, which xdp_lb writes on insert and on a hit
// at most once per unit) is recent. An entry a peer sent and no packet of which arrived here has last_seen 0. Read in
// pages with the event loop's turn between them (paging.ts): the watch counts the whole table every 5 s.
import type { BpfMap } from '../libbpf.js';
import { FLOW_LAST_SEEN_SHIFT } from './codec.js';
import { forEachPaged, nextTurn } from './paging.js';

const LAST_SEEN_AT = 12;

/** Entries of `ct` (lb_conntrack) with a packet seen here within the last `seconds` (to the 1.07 s unit, rounded up). */
export async function connectionsSeenWithin(ct: BpfMap, seconds: number, nowNs: bigint, pause: () => Promise<void> = nextTurn)
  : Promise<number> {
  const from = (nowNs >> FLOW_LAST_SEEN_SHIFT) - BigInt(Math.ceil((seconds * 1e9) / 2 ** Number(FLOW_LAST_SEEN_SHIFT)));
  let n = 0;
  await forEachPaged(ct, (_k, v) => {
    const seen = v.readUInt32LE(LAST_SEEN_AT);
    if (seen !== 0 && BigInt(seen) >= from) n++;
  }, pause);
  return n;
}
