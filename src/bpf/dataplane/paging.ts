// Reading a big pinned table without holding the daemon's event loop ("packets and health never wait": health checks
// and peer channels share that loop): a table is read in pages of PAGE_ENTRIES (one batched lookup each,
// BpfMap.lookupBatchPages) and the reader gives the loop a turn between pages. Used by the flow sync's scans
// (flow-state.ts) and the SNAT sweep (snat.ts).

/** Entries of a table read in one batched system call and handled before the reader yields to the event loop: about
 * 1-3 ms of work on an idle 2-core machine, a few tens of ms under a load average of 20 (bench/sync). */
export const PAGE_ENTRIES = 1024;

/** The event loop's next turn (setImmediate): what a reader awaits between pages, so timers, health probes and peer
 * channels run between them. */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
