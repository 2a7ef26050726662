// What xdp_lb publishes for connection-state sync (src/bpf/include/lb_sync.h, docs/datapath.md "Connection-state
// sync"): new connection-table entries and new or reopened SNAT translations, each a map key and value byte for byte,
// in the ring buffer lb_sync_events. This module reads the ring (the addon's ring-buffer consumer, the same event
// queue `gitlb capture` reads its perf buffer through), counts what the program could not publish (lb_sync_stats)
// and turns publishing on and off (lb_config.flags). Decoding the entries is flow-state.ts's (FlowDelta.published).
import type { BpfObject } from '../libbpf.js';
import { native } from '../addon.js';
import { perCpuCounters } from '../counters.js';
import { CONFIG_FLAGS, configFlags, encodeU32 } from './codec.js';

export const SYNC_MAPS = { events: 'lb_sync_events', stats: 'lb_sync_stats' } as const;
/** enum lb_sync_counter order (lb_sync.h). */
export const SYNC_COUNTER_NAMES = ['sync_lost'] as const;
/** lb_sync_event.kind */
export const SYNC_EVENT = { ct: 1, snat: 2 } as const;
/** Bytes of one record (struct lb_sync_event; lb_sync.h asserts the same size and offsets). */
export const SYNC_EVENT_BYTES = 112;
const KEY_OFFSET = 8;
const VALUE_OFFSET = 48;
/** Ring sizes the loader accepts (bytes; a power of two): one page (4 KiB) .. 256 MiB. */
export const SYNC_RING_BOUNDS = { min: 4096, max: 256 * 1024 * 1024, default: 4 * 1024 * 1024 } as const;

/** `bytes` when it is a ring size the kernel and the bounds accept (a power of two within SYNC_RING_BOUNDS). */
export function checkSyncRingBytes(bytes: number): number {
  if (!Number.isInteger(bytes) || bytes < SYNC_RING_BOUNDS.min || bytes > SYNC_RING_BOUNDS.max || (bytes & (bytes - 1)) !== 0)
    throw new RangeError(`sync ring: ${bytes} bytes is not a power of two from ${SYNC_RING_BOUNDS.min} to ${SYNC_RING_BOUNDS.max}`);
  return bytes;
}

/** Raw map entries, [key, value] as the maps hold them. */
export interface PublishedEntries { ct: Array<[Buffer, Buffer]>; snat: Array<[Buffer, Buffer]> }

/** Splits ring records (as ringBufferConsume packs them: u32 length, bytes, padding to 8) into connection-table and
 * SNAT entries, as views of `data`; a record of another size or kind is counted as bad. */
export function decodeSyncEvents(data: Buffer): PublishedEntries & { bad: number; records: number } {
  const out: PublishedEntries & { bad: number; records: number } = { ct: [], snat: [], bad: 0, records: 0 };
  for (let at = 0; at + 4 <= data.length;) {
    const len = data.readUInt32LE(at);
    const r = data.subarray(at + 4, at + 4 + len);
    at += (4 + len + 7) & ~7;
    out.records++;
    if (r.length < SYNC_EVENT_BYTES || r.length !== len) { out.bad++; continue; }
    const kind = r[0]!;
    const key = r.subarray(KEY_OFFSET, KEY_OFFSET + r[1]!);
    const value = r.subarray(VALUE_OFFSET, VALUE_OFFSET + r[2]!);
    if (kind === SYNC_EVENT.ct) out.ct.push([key, value]);
    else if (kind === SYNC_EVENT.snat) out.snat.push([key, value]);
    else out.bad++;
  }
  return out;
}

/** Reads lb_sync_events of one loaded xdp_lb, never waiting. Each loaded program has its own ring (not pinned): a
 * new object (a daemon restart, a table resize) needs a new reader. */
export class SyncEventReader {
  private handle: unknown;

  constructor(readonly obj: BpfObject) {
    this.handle = native().ringBufferOpen(obj.map(SYNC_MAPS.events).fd);
  }

  /** What the ring holds now, up to `max` records (the rest stays for the next read). */
  read(max: number): PublishedEntries & { bad: number; records: number } {
    if (!this.handle) return { ct: [], snat: [], bad: 0, records: 0 };
    return decodeSyncEvents(native().ringBufferConsume(this.handle, max).data);
  }

  close(): void {
    if (this.handle) native().ringBufferClose(this.handle);
    this.handle = null;
  }
}

/** Records the program could not publish (the ring was full), summed over CPUs; 0 for an object without the map. */
export function syncLost(obj: BpfObject): number {
  return perCpuCounters(obj.map(SYNC_MAPS.stats), SYNC_COUNTER_NAMES).sync_lost;
}

/** Whether xdp_lb publishes new entries (lb_config.flags LB_CFG_F_SYNC_PUBLISH). */
export function syncPublishing(obj: BpfObject): boolean {
  return (configFlags(obj.map('lb_config').lookup(encodeU32(0))) & CONFIG_FLAGS.syncPublish) !== 0;
}

/** Turns publishing on or off, keeping the rest of lb_config as it is. The settings the plan writes keep the flag
 * (execute.ts). Returns whether anything was written. */
export function setSyncPublish(obj: BpfObject, on: boolean): boolean {
  const m = obj.map('lb_config');
  const cur = m.lookup(encodeU32(0));
  const b = Buffer.alloc(m.valueSize);
  if (cur) Buffer.from(cur).copy(b);
  const flags = configFlags(b);
  const next = on ? flags | CONFIG_FLAGS.syncPublish : flags & ~CONFIG_FLAGS.syncPublish;
  if (next === flags) return false;
  b.writeUInt32LE(next >>> 0, 68);
  m.update(encodeU32(0), b);
  return true;
}
