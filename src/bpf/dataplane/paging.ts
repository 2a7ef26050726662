// Reading a big pinned table without holding the daemon's event loop ("packets and health never wait": health checks
// and peer channels share that loop): a table is read in pages of PAGE_ENTRIES (one batched lookup each,
// BpfMap.lookupBatchPages) and the reader gives the loop a turn between pages (forEachPaged). Used by the flow sync's
// scans (flow-state.ts), the copies sent back (snat-return.ts), the SNAT sweep and count (snat.ts) and the drain
// watch's count of connections (conntrack-seen.ts).
import type { BpfMap } from '../libbpf.js';

/** Entries of a table read in one batched system call and handled before the reader yields to the event loop: about
 * 1-3 ms of work on an idle 2-core machine, a few tens of ms under a load average of 20 (bench/sync). */
export const PAGE_ENTRIES = 1024;

/** The event loop's next turn (setImmediate): what a reader awaits between pages, so timers, health probes and peer
 * channels run between them. */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Calls `fn` with every entry of `map`, read in pages of PAGE_ENTRIES, awaiting `pause` after each page. `key` and
 * `value` are views into the page's own buffers (a new pair per page): they may be kept, not written. Entries
 * changed while the walk runs may be seen or not, as with any batched walk. */
export async function forEachPaged(map: BpfMap, fn: (key: Buffer, value: Buffer) => void, pause: () => Promise<void> = nextTurn)
  : Promise<void> {
  const ks = map.keySize;
  const vs = map.valueBufferSize;
  for (const page of map.lookupBatchPages(PAGE_ENTRIES)) {
    for (let i = 0; i < page.count; i++) fn(page.keys.subarray(i * ks, (i + 1) * ks), page.values.subarray(i * vs, (i + 1) * vs));
    await pause();
  }
}
