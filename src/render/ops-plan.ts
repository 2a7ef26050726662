// The one plan engine: what a node's data plane must do to turn what the kernel holds (LiveState) into what a
// revision wants (DesiredState), as an ordered list of map operations (Op[], ops.ts). Pure. The reconciler's
// converge (src/reconciler/converge.ts) is its only runtime caller and uses an empty plan as its read-back and drift
// check; `gitlb plan --live` prints the plan through it. Order (docs/render.md, planLb below): settings;
// listeners and markers the revision removes; then waves of (rings of removed services no listener names, reals
// no live ring names, new reals, ring fills, service switches, markers and listeners of the switched services),
// so that no packet finds a reference to something missing and no map ever holds more than its capacity.
import type { DesiredState, DesiredVip } from './state.js';
import { DATAPLANE_LIMITS } from './config/limits.js';
import { GitlbError } from '../errors.js';
import { backendTunnelId, backendVipId, desiredBackendTunnels, desiredBackendVips, desiredMarkers, desiredQuicServers, desiredRingReals, desiredSettings, desiredSnat, desiredSourceRanges, markerId, quicServerId, ringRealIds, sourceRangeId, vipId, type LbSettings, type LiveState, type Op, type QuicServer, type SnatSettings, type SourceRange } from './ops.js';

const sameJson = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

function sameVip(a: DesiredVip, b: DesiredVip): boolean {
  return a.vip === b.vip && a.family === b.family && a.port === b.port && a.protocol === b.protocol &&
    a.targetPort === b.targetPort && a.serviceId === b.serviceId && a.forwarding === b.forwarding &&
    a.hashSourcePort === b.hashSourcePort && !!a.sourceRanges === !!b.sourceRanges && (a.guePort ?? 0) === (b.guePort ?? 0) &&
    (a.affinityTimeoutS ?? 0) === (b.affinityTimeoutS ?? 0) && !!a.quic === !!b.quic;
}

function sameSnat(a: SnatSettings, b: SnatSettings): boolean {
  return a.addr4 === b.addr4 && a.addr6 === b.addr6 && a.portMin === b.portMin && a.portMax === b.portMax &&
    a.tcpEstablishedS === b.tcpEstablishedS && a.tcpClosingS === b.tcpClosingS && a.udpS === b.udpS;
}

function sameSettings(a: LbSettings, b: LbSettings): boolean {
  return a.hashSeed === b.hashSeed && a.mtu === b.mtu && sameJson(a.src4, b.src4) && a.src6 === b.src6 &&
    (a.newFlowRate ?? 0) === (b.newFlowRate ?? 0);
}

/** Ops that take `live` to `desired`; empty exactly when the kernel already holds the desired state. */
export function planOps(live: LiveState, desired: DesiredState, capacity: LbCapacity = LB_MAP_CAPACITY): Op[] {
  return desired.role === 'backend' ? planBackend(live, desired) : planLb(live, desired, capacity);
}

function planBackend(live: LiveState, desired: DesiredState): Op[] {
  const ops: Op[] = [];
  const have = new Map(live.backendVips.map((e) => [backendVipId(e), e]));
  const want = desiredBackendVips(desired);
  const wantIds = new Set<string>();
  // New and changed entries first, removals last: a VIP that stays is never missing in between.
  for (const e of want) {
    const id = backendVipId(e);
    wantIds.add(id);
    const cur = have.get(id) ?? null;
    if (cur && cur.kind === e.kind && cur.targetPort === e.targetPort) continue;
    // A listener moving to another targetPort keeps trusting the one it leaves (the program lets it lapse once
    // no lb node uses it any more): lb nodes that have not applied this revision, or refused it, still send it.
    const keep = cur && cur.kind === 'listener' && e.kind === 'listener' && cur.targetPort !== 0 ? cur.targetPort : 0;
    ops.push({ op: 'backend-vip.put', entry: keep ? { ...e, previousTargetPort: keep } : e, before: cur });
  }
  const haveT = new Map(live.backendTunnels.map((e) => [backendTunnelId(e), e]));
  const wantT = desiredBackendTunnels(desired);
  for (const e of wantT) {
    const cur = haveT.get(backendTunnelId(e)) ?? null;
    if (!cur || cur.lbSource !== e.lbSource || cur.local !== e.local) ops.push({ op: 'backend-tunnel.put', entry: e, before: cur });
  }
  for (const [id, e] of have) if (!wantIds.has(id)) ops.push({ op: 'backend-vip.delete', entry: e });
  const wantTIds = new Set(wantT.map(backendTunnelId));
  for (const [id, e] of haveT) if (!wantTIds.has(id)) ops.push({ op: 'backend-tunnel.delete', entry: e });
  return ops;
}

/** The room planLb plans within: the fixed sizes of an lb node's maps (src/bpf/include/lb_consts.h). */
export interface LbCapacity { services: number; vipEntries: number; reals: number; sourceRanges?: number; quicServers?: number }
export const LB_MAP_CAPACITY: LbCapacity = {
  services: DATAPLANE_LIMITS.lbServices, vipEntries: DATAPLANE_LIMITS.lbVipEntries, reals: DATAPLANE_LIMITS.lbReals,
  sourceRanges: DATAPLANE_LIMITS.lbSourceRangeEntries, quicServers: DATAPLANE_LIMITS.lbQuicServers,
};

/** A transition the maps cannot hold at any moment of any safe order: thrown by planOps, before anything is written. */
export class PlanCapacityError extends GitlbError {
  constructor(message: string) {
    super('CapacityExceeded', message, { errno: 'ENOSPC' });
    this.name = 'PlanCapacityError';
  }
}

/**
 * The lb plan. Make-before-break only where a packet could otherwise find a reference to something missing, and
 * removals first everywhere else, so a transition needs room for the bigger of the two revisions, not for both:
 *   1. settings;
 *   2. listeners and markers whose key the revision removes (a packet to a removed VIP:port stops being ours
 *      either way; deleting it first only moves that moment earlier, and nothing else refers to a listener);
 *   3. waves, until every service has its desired ring: delete the rings (and so the stats slots) of removed
 *      services no listener names any more, delete reals no live ring names and the revision drops, add the reals
 *      the next rings need, fill those rings, switch them in (one batch), then write the new and changed listeners
 *      (and their markers) whose services now have their desired rings. A ring switched in place (kept service)
 *      needs no room; a new service takes an lb_rings entry, a new real an lb_reals entry. Everything fits in one
 *      wave unless the old and new revisions together exceed a map: then each wave takes the services that fit
 *      in the room left, and the next wave first frees what they released.
 *   4. the desired reals no ring names (none in practice).
 * A transition no wave can progress in (every free entry taken and nothing freeable until a service that does
 * not fit is in) throws PlanCapacityError naming the map and the numbers, before any op exists.
 */
function planLb(live: LiveState, desired: DesiredState, cap: LbCapacity): Op[] {
  const ops: Op[] = [];
  const wantMarkers = desiredMarkers(desired);
  for (const [what, n, max, map] of [['services', desired.services.length, cap.services, 'lb_rings'],
    ['listeners + VIP addresses', desired.vips.length + wantMarkers.length, cap.vipEntries, 'lb_vips'],
    ['reals', desired.reals.length, cap.reals, 'lb_reals']] as const)
    if (n > max) throw new PlanCapacityError(`${map}: the revision needs ${n} ${what}, the map holds ${max}`);

  // 1. node settings (independent of the tables)
  const settings = desiredSettings(desired);
  if (!live.settings || !sameSettings(live.settings, settings)) ops.push({ op: 'settings.set', value: settings, before: live.settings });
  const snat = desiredSnat(desired);
  if (!live.snat || !sameSnat(live.snat, snat)) ops.push({ op: 'snat.set', value: snat, before: live.snat });

  // source ranges: the new prefixes now, before any listener that checks them is written (puts), the old ones at the
  // very end, after every listener that checked them is gone or checks no more (lateRangeDeletes)
  const lateRangeDeletes = planSourceRanges(live, desired, cap, ops);
  // QUIC server ids: the ones that go, and the ones whose real goes, now (before any real can be deleted), the new and
  // changed ones at the very end (after every real they name is in)
  const quicPuts = planQuicServers(live, desired, cap, ops);

  // 2. listeners, then markers, whose keys the revision removes (listeners first: a listener keeps its marker)
  const liveVips = new Map(live.vips.map((v) => [vipId(v), v]));
  const wantVipIds = new Set(desired.vips.map(vipId));
  const wantMarkerIds = new Set(wantMarkers.map(markerId));
  for (const [id, v] of liveVips) if (!wantVipIds.has(id)) ops.push({ op: 'vip.delete', vip: v });
  for (const m of live.markers) if (!wantMarkerIds.has(markerId(m))) ops.push({ op: 'marker.delete', marker: m });
  const markers = new Set(live.markers.map(markerId).filter((id) => wantMarkerIds.has(id)));

  const liveServices = new Map(live.services.map((s) => [s.id, s]));
  const wantServiceIds = new Set(desired.services.map((s) => s.id));
  const removed = live.services.filter((s) => !wantServiceIds.has(s.id));
  // How many kept listeners name each service now: a removed service's ring goes once none does (counted only
  // when a service is removed).
  const refs = new Map<number, number>();
  const ref = (id: number, d: number) => { if (removed.length) refs.set(id, (refs.get(id) ?? 0) + d); };
  if (removed.length) for (const [id, v] of liveVips) if (wantVipIds.has(id)) ref(v.serviceId, 1);
  let pendingVips = desired.vips.filter((v) => { const cur = liveVips.get(vipId(v)); return !cur || !sameVip(cur, v); });

  /** Services whose ring is the desired one now. */
  const ready = new Set<number>();
  let todo: DesiredState['services'] = [];
  for (const s of desired.services) {
    const cur = liveServices.get(s.id);
    if (cur && cur.tableSize === s.tableSize && cur.digest === s.digest) ready.add(s.id);
    else todo.push(s);
  }
  const inRings = new Set(liveServices.keys());
  /** Reals the live rings that are still to change or go may name (null: not known, so any live real). An
   * unchanged ring is the desired one, and a desired ring names only desired reals. */
  const oldRings = new Map<number, ReadonlySet<number> | null>();
  for (const s of live.services)
    if (!ready.has(s.id)) oldRings.set(s.id, s.reals ? new Set(s.reals) : s.ring ? new Set(ringRealIds(s.ring)) : null);

  const have = new Map(live.reals.map((r) => [r.id, r]));
  const wantReals = new Map(desired.reals.map((r) => [r.id, r]));
  // a real that keeps its id and changes address is updated in place (no room needed)
  for (const r of desired.reals) {
    const cur = have.get(r.id);
    if (cur && (cur.address !== r.address || cur.family !== r.family)) { ops.push({ op: 'real.put', real: r, before: cur }); have.set(r.id, r); }
  }
  const doomed = new Set(live.reals.filter((r) => !wantReals.has(r.id)).map((r) => r.id));

  const freeServices = () => {
    for (const s of removed) {
      if (!inRings.has(s.id) || (refs.get(s.id) ?? 0) > 0) continue;
      ops.push({ op: 'service.delete', serviceId: s.id, tableSize: s.tableSize, digest: s.digest });
      inRings.delete(s.id);
      oldRings.delete(s.id);
    }
  };
  const freeReals = () => {
    if (!doomed.size) return;
    const named = new Set<number>();
    for (const r of oldRings.values()) {
      if (r === null) return; // an old ring of unknown content may name any of them: they wait until it is gone
      for (const id of r) if (doomed.has(id)) named.add(id);
    }
    for (const id of [...doomed].sort((a, b) => a - b)) {
      if (named.has(id)) continue;
      ops.push({ op: 'real.delete', real: have.get(id)! });
      have.delete(id);
      doomed.delete(id);
    }
  };

  for (;;) { // at least once: a missing marker of unchanged listeners goes in the listener phase
    const before = ops.length;
    freeServices();
    freeReals();
    // the services that fit in the room left, with the reals their rings need
    let serviceRoom = cap.services - inRings.size;
    let realRoom = cap.reals - have.size;
    const take: Array<{ s: DesiredState['services'][number]; names: number[] }> = [];
    const rest: typeof todo = [];
    const adding = new Set<number>();
    let blocked: string | null = null;
    for (const s of todo) {
      const isNew = !inRings.has(s.id);
      // (a ring naming a real not in reals is left to validateDesired, which names the field)
      const names = desiredRingReals(s);
      const need = names.filter((id) => !have.has(id) && !adding.has(id) && wantReals.has(id));
      if ((isNew && serviceRoom < 1) || need.length > realRoom) {
        blocked ??= isNew && serviceRoom < 1
          ? `lb_rings: no free entry for new service ${s.name} (${s.id}): ${inRings.size} of ${cap.services} in use, ` +
            `${removed.filter((r) => inRings.has(r.id)).length} of them by services the revision removes whose listeners move to services not in yet`
          : `lb_reals: the new ring of service ${s.name} (${s.id}) needs ${need.length} reals the node does not hold, ` +
            `${realRoom} of ${cap.reals} entries are free (${have.size} in use, ${doomed.size} of them by reals the revision ` +
            'removes that live rings still name)';
        rest.push(s);
        continue;
      }
      if (isNew) serviceRoom--;
      realRoom -= need.length;
      for (const id of need) adding.add(id);
      take.push({ s, names });
    }
    for (const id of [...adding].sort((a, b) => a - b)) {
      const r = wantReals.get(id)!;
      ops.push({ op: 'real.put', real: r, before: null });
      have.set(id, r);
    }
    for (const { s, names } of take)
      ops.push({ op: 'ring.fill', serviceId: s.id, name: s.name, tableSize: s.tableSize, digest: s.digest, ring: s.ring, reals: names });
    for (const { s } of take) {
      const cur = liveServices.get(s.id);
      ops.push({ op: 'service.switch', serviceId: s.id, name: s.name, tableSize: s.tableSize, digest: s.digest,
        before: cur ? { tableSize: cur.tableSize, digest: cur.digest } : null });
      inRings.add(s.id);
      oldRings.delete(s.id);
      ready.add(s.id);
    }
    todo = rest;
    // listeners (new, or pointing at another service/mode/port) whose services have their desired rings, after
    // the markers of their addresses
    const now = pendingVips.filter((v) => ready.has(v.serviceId));
    pendingVips = pendingVips.filter((v) => !ready.has(v.serviceId));
    // a missing marker goes in with the first listener of its address, or at once if none of them changes
    if (markers.size < wantMarkerIds.size) {
      const later = new Set(pendingVips.map((v) => markerId({ address: v.vip, family: v.family })));
      const nowAt = new Set(now.map((v) => markerId({ address: v.vip, family: v.family })));
      for (const m of wantMarkers) {
        const id = markerId(m);
        if (!markers.has(id) && (nowAt.has(id) || !later.has(id))) { ops.push({ op: 'marker.put', marker: m }); markers.add(id); }
      }
    }
    for (const v of now) {
      const cur = liveVips.get(vipId(v)) ?? null;
      ops.push({ op: 'vip.put', vip: v, before: cur });
      if (cur) ref(cur.serviceId, -1); // a kept key: it names its old service no more
      ref(v.serviceId, 1);
    }
    if (!todo.length && !pendingVips.length) break;
    if (ops.length === before) throw new PlanCapacityError(`${blocked ?? 'no progress'} (docs/render.md "The plan engine")`);
  }
  // the rings and reals nothing names any more, then desired reals no ring names
  freeServices();
  freeReals();
  for (const r of desired.reals) if (!have.has(r.id)) { ops.push({ op: 'real.put', real: r, before: null }); have.set(r.id, r); }
  for (const range of lateRangeDeletes) ops.push({ op: 'source-range.delete', range });
  ops.push(...quicPuts);
  return ops;
}

/**
 * lb_quic_servers: appends to `ops` the deletes of the entries the revision drops and of the entries whose live real
 * the revision removes (so no entry ever names a real lb_reals no longer holds; the program would fall back to the
 * table on such an entry anyway, since it checks the real's slot), and returns the puts of the new and changed
 * entries, which go after every real is in. A changed entry (same server id, another real) is one update: a packet
 * finds the old real or the new one, never none. Deletes first, so the map holds at most the bigger revision.
 */
function planQuicServers(live: LiveState, desired: DesiredState, cap: LbCapacity, ops: Op[]): Op[] {
  const want = desiredQuicServers(desired);
  const max = cap.quicServers ?? DATAPLANE_LIMITS.lbQuicServers;
  if (want.length > max) throw new PlanCapacityError(`lb_quic_servers: the revision needs ${want.length} QUIC server ids, the map holds ${max}`);
  const wantById = new Map(want.map((e) => [quicServerId(e), e]));
  const wantReals = new Set(desired.reals.map((r) => r.id));
  const have = new Map<string, QuicServer>();
  for (const e of live.quicServers) {
    const w = wantById.get(quicServerId(e));
    if (!w || (w.realId !== e.realId && !wantReals.has(e.realId))) ops.push({ op: 'quic-server.delete', entry: e });
    else have.set(quicServerId(e), e);
  }
  const puts: Op[] = [];
  for (const e of want) {
    const cur = have.get(quicServerId(e)) ?? null;
    if (!cur || cur.realId !== e.realId) puts.push({ op: 'quic-server.put', entry: e, before: cur });
  }
  return puts;
}

/**
 * lb_source_ranges: appends to `ops` the deletes no listener can notice (entries of services no live listener
 * checks ranges for), then the puts of every missing desired entry; returns the other deletes, which go last.
 * A service whose ranges change is thus checked against old and new prefixes together for the moment of the apply,
 * never against neither (a service with ranges never drops its allowed clients during a change), and one that gains
 * ranges has them all before its listeners start checking. Old and new revisions fit side by side (the map holds
 * twice what validation allows one node); a live map fuller than that (an apply that failed half way, then another
 * revision) is refused here, before any write.
 */
function planSourceRanges(live: LiveState, desired: DesiredState, cap: LbCapacity, ops: Op[]): SourceRange[] {
  const want = desiredSourceRanges(desired);
  const wantIds = new Set(want.map(sourceRangeId));
  const haveIds = new Set(live.sourceRanges.map(sourceRangeId));
  const checked = new Set(live.vips.filter((v) => v.sourceRanges).map((v) => v.serviceId));
  const late: SourceRange[] = [];
  let held = live.sourceRanges.length;
  for (const r of live.sourceRanges) {
    if (wantIds.has(sourceRangeId(r))) continue;
    if (checked.has(r.serviceId)) late.push(r);
    else { ops.push({ op: 'source-range.delete', range: r }); held--; }
  }
  const puts = want.filter((r) => !haveIds.has(sourceRangeId(r)));
  const max = cap.sourceRanges ?? DATAPLANE_LIMITS.lbSourceRangeEntries;
  if (held + puts.length > max)
    throw new PlanCapacityError(`lb_source_ranges: ${held} entries listeners still check plus ${puts.length} new ones exceed the ${max} it holds`);
  for (const range of puts) ops.push({ op: 'source-range.put', range });
  return late;
}
