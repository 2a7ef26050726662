// The lb data plane's executor: the ops converge planned (src/reconciler/converge.ts), written to the maps of a
// loaded xdp_lb in their order with undo. How each op maps onto the kernel (slots, rings, batches): docs/datapath.md,
// "Plan and execute".
import { BpfMap } from '../libbpf.js';
import { ringRealIds } from '../../render/ops.js';
import { SOURCE_RANGE_ALLOW, encodeSourceRangeKey, encodeQuicServer, encodeQuicServerKey, decodeVipValue, configFlags, encodeConfig, encodeReal, encodeRealSlot, encodeU32, isMarkerKey, realSlotOf } from './codec.js';
import { RingCache, createRing, ringDigest, ringIdentities, slotRing, type RingInfo } from './rings.js';
import { encodeSnatConfig, snatSettingsToConfig, validateSnatPorts } from './snat.js';
import { PROGRESS_INTERVAL_MS, UndoLog, undoableMapWrites, type ApplyReport, type ExecuteOptions, type Op } from './types.js';
import { einval } from './validate.js';
import { vipKeyOf, vipValueOf, markerKeyOf, MARKER_VALUE, ZERO_TRAFFIC, ZERO_REAL_TRAFFIC, FREE_SLOT, type LbMaps, liveSlotOf } from './maps.js';
import { ringReader } from './live.js';

/** The ops of one kind that follow each other from `start` (the executor batches such a run into one kernel call). */
function runOf<K extends Op['op']>(ops: readonly Op[], start: number, kind: K): Array<Extract<Op, { op: K }>> {
  let end = start;
  while (end < ops.length && ops[end]!.op === kind) end++;
  return ops.slice(start, end) as Array<Extract<Op, { op: K }>>;
}

/**
 * Runs `ops` on the maps of a loaded xdp_lb in their order (table resizes are done by the caller first, in one
 * program swap): settings, reals with their slots, ring fills into new inner maps, switches (a run in one batch),
 * listeners and markers, deletions. Every write is recorded with its previous value; if any op throws, what ran is
 * undone in reverse order (the previous state stays intact) and the error is rethrown. Synchronous.
 */
export function executeOps(m: LbMaps, ringCache: RingCache, ops: Op[], report: ApplyReport, opts: ExecuteOptions = {}): void {
  const log = new UndoLog();
  /** Rings filled by this execute, by service id, until their switch (closed at the end either way). */
  const filled = new Map<number, { map: BpfMap; info: RingInfo }>();
  /** Inner maps replaced or removed by this execute, held open so an undo can put them back. */
  const held: BpfMap[] = [];

  /** Stats slots of the services that have listeners, and how many listeners name each service (read once, at
   * the first listener write). A service keeps its slot while any listener names it; a slot no listener names
   * is free at once (a removed service's slot can go to a new service of the same apply), and zeroed when given
   * out again. The planner keeps services with listeners within lb_rings, so within the 1024 slots. */
  let svcSlots: { slot: Map<number, number>; listeners: Map<number, number> } | null = null;
  const listenerIndex = () => {
    if (svcSlots) return svcSlots;
    const slot = new Map<number, number>();
    const listeners = new Map<number, number>();
    for (const [k, v] of m.vips.entries()) {
      if (isMarkerKey(k)) continue;
      const val = decodeVipValue(v);
      slot.set(val.serviceId, val.statsSlot ?? 0);
      listeners.set(val.serviceId, (listeners.get(val.serviceId) ?? 0) + 1);
    }
    return (svcSlots = { slot, listeners });
  };
  /** The listener at `key` names its service no more (deleted or about to name another). */
  const unnameService = (key: Buffer) => {
    const cur = m.vips.lookup(key);
    if (!cur) return;
    const { serviceId } = decodeVipValue(cur);
    const idx = listenerIndex();
    const n = (idx.listeners.get(serviceId) ?? 1) - 1;
    if (n > 0) idx.listeners.set(serviceId, n);
    else { idx.listeners.delete(serviceId); idx.slot.delete(serviceId); }
  };
  const serviceSlot = (serviceId: number): number => {
    const idx = listenerIndex();
    idx.listeners.set(serviceId, (idx.listeners.get(serviceId) ?? 0) + 1);
    const have = idx.slot.get(serviceId);
    if (have !== undefined) return have;
    const used = new Set(idx.slot.values());
    let s = 0;
    while (used.has(s)) s++;
    if (s >= m.serviceStats.maxEntries) einval(`services: all ${m.serviceStats.maxEntries} service stats slots are in use`);
    put(m.serviceStats, encodeU32(s), ZERO_TRAFFIC);
    idx.slot.set(serviceId, s);
    return s;
  };
  /** Slots of the reals in lb_reals (read once, when the first new real needs one), minus those freed and plus
   * those given out by this execute: a deleted real's slot can go to a real added after it. */
  let slotsInUse: Set<number> | null = null;
  let cursor = 0;
  const freeSlot = (): number => {
    slotsInUse ??= new Set(m.reals.entries().map(([, v]) => realSlotOf(v)));
    while (cursor < m.realSlots.maxEntries && slotsInUse.has(cursor)) cursor++;
    if (cursor >= m.realSlots.maxEntries) einval(`reals: all ${m.realSlots.maxEntries} real slots are in use`);
    slotsInUse.add(cursor);
    return cursor;
  };
  const releaseSlot = (slot: number) => {
    if (!slotsInUse) return; // not read yet: the read will not see it
    slotsInUse.delete(slot);
    cursor = Math.min(cursor, slot);
  };
  const { put, del } = undoableMapWrites(log, report);
  /** The real ids each ring in lb_rings names now, by service id: read at the first real.delete (from the ring
   * cache; a ring new to it is read), again after rings were switched or deleted. */
  let ringReals: Map<number, ReadonlySet<number>> | null = null;
  const liveRingNaming = (realId: number): number | null => {
    if (!ringReals) {
      ringReals = new Map();
      let read: ((inner: BpfMap) => Uint32Array) | null = null;
      for (const [serviceId, mapId] of ringIdentities(m.rings)) {
        let reals = ringCache.get(mapId)?.reals;
        if (!reals) {
          const inner = m.rings.openInner(encodeU32(serviceId));
          if (!inner) continue;
          try {
            const ring = (read ??= ringReader(m))(inner);
            reals = ringRealIds(ring);
            ringCache.set(inner.id(), { tableSize: ring.length, digest: ringDigest(ring), reals });
          } finally {
            inner.close();
          }
        }
        ringReals.set(serviceId, new Set(reals));
      }
    }
    for (const [serviceId, reals] of ringReals) if (reals.has(realId)) return serviceId;
    return null;
  };
  /** Opens the ring a service uses now (null if none), kept open until the end of execute. */
  const holdCurrent = (key: Buffer): BpfMap | null => {
    const cur = m.rings.openInner(key);
    if (cur) held.push(cur);
    return cur;
  };

  const switchRings = (sw: Array<Extract<Op, { op: 'service.switch' }>>) => {
    const keys: Buffer[] = [];
    const rings: BpfMap[] = [];
    const prevs: Array<BpfMap | null> = [];
    for (const o of sw) {
      const ring = filled.get(o.serviceId);
      if (!ring) einval(`service.switch of service ${o.serviceId} without a ring.fill before it`);
      keys.push(encodeU32(o.serviceId));
      rings.push(ring.map);
      prevs.push(holdCurrent(keys[keys.length - 1]!));
    }
    let written = keys.length;
    try {
      m.rings.setInnerBatch(keys, rings);
    } catch (e) {
      written = Number((e as { written?: number }).written ?? 0);
      throw e;
    } finally {
      for (let n = 0; n < written; n++) {
        const key = keys[n]!;
        const prev = prevs[n]!;
        log.onUndo(() => (prev ? m.rings.setInner(key, prev) : m.rings.delete(key)));
        ringCache.set(rings[n]!.id(), filled.get(sw[n]!.serviceId)!.info);
        report.ringSwitches++;
        report.mapWrites++;
      }
      ringReals = null;
    }
  };

  /** Services no listener uses any more, removed in one batch (one wait for running programs). */
  const deleteRings = (dels: Array<Extract<Op, { op: 'service.delete' }>>) => {
    const keys = dels.map((o) => encodeU32(o.serviceId)).filter((k) => m.rings.innerMapId(k) !== null);
    const prevs = keys.map((k) => holdCurrent(k));
    let deleted = keys.length;
    try {
      m.rings.deleteBatch(Buffer.concat(keys), keys.length);
    } catch (e) {
      deleted = Number((e as { deleted?: number }).deleted ?? 0);
      throw e;
    } finally {
      for (let n = 0; n < deleted; n++) {
        const key = keys[n]!;
        const prev = prevs[n];
        report.mapDeletes++;
        if (prev) log.onUndo(() => m.rings.setInner(key, prev));
        // its stats slot is free once no listener names it (the listeners go in vip.delete)
      }
      ringReals = null;
    }
  };

  try {
    let reported = performance.now();
    for (let i = 0; i < ops.length; i++) {
      const o = ops[i]!;
      report.ops++;
      // the loop is synchronous: a long one says how far it got, every couple of seconds (checked every 64 ops)
      if (opts.onProgress && (report.ops & 63) === 0 && performance.now() - reported >= PROGRESS_INTERVAL_MS) {
        opts.onProgress(report.ops, ops.length, report);
        reported = performance.now();
      }
      switch (o.op) {
        case 'settings.set':
          // the flags are the flow sync's (lb_sync.h), not the plan's: kept as the map holds them
          put(m.config, encodeU32(0), encodeConfig(o.value, configFlags(m.config.lookup(encodeU32(0)))));
          break;
        case 'snat.set':
          validateSnatPorts({ min: o.value.portMin, max: o.value.portMax });
          put(m.snatConfig, encodeU32(0), encodeSnatConfig(snatSettingsToConfig(o.value)));
          break;
        case 'real.put': {
          // a new real gets a free slot whose traffic counters start at zero; a changed one keeps its slot.
          // The slot entry is written first: the ring can only lead to the real once lb_reals holds it.
          const key = encodeU32(o.real.id);
          const prev = m.reals.lookup(key);
          const slot = prev ? realSlotOf(prev) : freeSlot();
          const value = encodeReal(o.real.address, o.real.family, slot);
          if (!prev) put(m.realStats, encodeU32(slot), ZERO_REAL_TRAFFIC);
          put(m.realSlots, encodeU32(slot), encodeRealSlot(o.real.id, value));
          put(m.reals, key, value);
          break;
        }
        case 'ring.fill': {
          // the inner array holds this node's slots of the ring's real ids: every real it names has its slot by
          // now (real.put comes first), and no slot it names is freed while a ring names it (real.delete comes
          // after the switch away from it, which waits for running programs)
          filled.get(o.serviceId)?.map.close();
          const map = createRing(o.serviceId, slotRing(o.ring, (id) => {
            const slot = liveSlotOf(m, id);
            if (slot === null) einval(`ring.fill of service ${o.name} (${o.serviceId}): real ${id} has no slot on this node`);
            return slot;
          }));
          filled.set(o.serviceId, { map, info: { tableSize: o.tableSize, digest: o.digest, reals: o.reals ?? ringRealIds(o.ring) } });
          report.changedRingEntries += o.ring.length;
          report.mapWrites++;
          break;
        }
        case 'service.switch': {
          // a run of switches goes in one batch: one wait for running programs instead of one per ring
          const run = runOf(ops, i, 'service.switch');
          switchRings(run);
          report.ops += run.length - 1;
          i += run.length - 1;
          break;
        }
        case 'vip.put': {
          // the new service is named before the old one is unnamed: a listener that stays with its service keeps
          // the slot (and its counters)
          const key = vipKeyOf(o.vip);
          const slot = serviceSlot(o.vip.serviceId);
          unnameService(key);
          put(m.vips, key, vipValueOf(o.vip, slot));
          break;
        }
        case 'marker.put':
          put(m.vips, markerKeyOf(o.marker), MARKER_VALUE);
          break;
        case 'vip.delete': {
          const key = vipKeyOf(o.vip);
          unnameService(key);
          del(m.vips, key);
          break;
        }
        case 'marker.delete':
          del(m.vips, markerKeyOf(o.marker));
          break;
        case 'service.delete': {
          const run = runOf(ops, i, 'service.delete');
          deleteRings(run);
          report.ops += run.length - 1;
          i += run.length - 1;
          break;
        }
        case 'real.delete': {
          // connection-table entries to it fall back to the ring once its slot is free (real id 0). Rings name
          // slots: a slot still named by a live ring could be given to another real (even later in this
          // execute) and take that ring's flows, so the plan's order (switch away first) is checked here.
          const namer = liveRingNaming(o.real.id);
          if (namer !== null) einval(`real.delete of real ${o.real.id}: the ring of service ${namer} in lb_rings still names it`);
          const key = encodeU32(o.real.id);
          const prev = m.reals.lookup(key);
          del(m.reals, key);
          if (prev) {
            put(m.realSlots, encodeU32(realSlotOf(prev)), FREE_SLOT);
            releaseSlot(realSlotOf(prev));
          }
          break;
        }
        case 'source-range.put': {
          // created, never overwritten (the plan puts only missing entries), so the undo is a delete. A lookup
          // cannot tell whether this exact prefix is there: the trie answers with the longest enclosing one.
          const key = encodeSourceRangeKey(o.range.serviceId, o.range.prefix);
          try {
            m.sourceRanges.update(key, SOURCE_RANGE_ALLOW, 'noexist');
          } catch (e) {
            if ((e as { code?: string }).code === 'EEXIST') break;
            throw e;
          }
          report.mapWrites++;
          log.onUndo(() => m.sourceRanges.delete(key));
          break;
        }
        case 'source-range.delete': {
          const key = encodeSourceRangeKey(o.range.serviceId, o.range.prefix);
          if (!m.sourceRanges.delete(key)) break; // deletes match the exact prefix
          report.mapDeletes++;
          log.onUndo(() => m.sourceRanges.update(key, SOURCE_RANGE_ALLOW));
          break;
        }
        case 'quic-server.put': {
          // one update creates or replaces the entry: a packet finds the old real or the new one, never none. The
          // real has its slot by now (the plan puts these after every real.put)
          const slot = liveSlotOf(m, o.entry.realId);
          if (slot === null) einval(`quic-server.put of service ${o.entry.serviceId} server id ${o.entry.serverId}: real ${o.entry.realId} has no slot on this node`);
          put(m.quicServers, encodeQuicServerKey(o.entry.serviceId, o.entry.serverId), encodeQuicServer(o.entry.realId, slot));
          break;
        }
        case 'quic-server.delete':
          del(m.quicServers, encodeQuicServerKey(o.entry.serviceId, o.entry.serverId));
          break;
        case 'table.resize':
          break; // done before the other ops
        default:
          einval(`the lb data plane cannot execute '${o.op}'`);
      }
    }
  } catch (e) {
    log.rollback();
    throw e;
  } finally {
    // The outer map holds its own reference to every ring it points at; ours are no longer needed.
    for (const r of filled.values()) r.map.close();
    for (const h of held) h.close();
  }
  log.commit();
}
