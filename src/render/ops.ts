// The one plan engine: what a node's data plane must do to turn what the kernel holds (LiveState) into what a
// revision wants (DesiredState), as an ordered list of map operations (Op[]). Pure. The lb and backend data
// planes execute these ops (src/bpf/dataplane, src/bpf/backend); the reconciler uses an empty plan as its
// read-back and drift check; `gitlb plan --live` prints them. Order (docs/render.md, planLb below): settings;
// listeners and markers the revision removes; then waves of (rings of removed services no listener names, reals
// no live ring names, new reals, ring fills, service switches, markers and listeners of the switched services),
// so that no packet finds a reference to something missing and no map ever holds more than its capacity.
import type { DesiredReal, DesiredState, DesiredVip } from './state.js';
import { compareCidrs, compareIps, ipFamily } from './ip.js';
import { DATAPLANE_LIMITS } from './config/limits.js';
import { GitlbError } from '../errors.js';

/** lb_config: the flow-hash seed, the MTU, the outer sources of dsr-ipip and the new-flow rate guard (absent: off). */
export interface LbSettings { hashSeed: number; mtu: number; src4: string[]; src6?: string; newFlowRate?: number }

/** SNAT settings of an lb node (lb_snat_config). Timeouts are whole seconds. */
export interface SnatSettings {
  addr4?: string;
  addr6?: string;
  portMin: number;
  portMax: number;
  tcpEstablishedS: number;
  tcpClosingS: number;
  udpS: number;
}

/** Node.spec.snatPorts default: Linux's default ephemeral range. */
export const DEFAULT_SNAT_PORTS = { min: 32768, max: 60999 } as const;
/** Idle timeouts of a SNAT translation (seconds). */
export const SNAT_TIMEOUTS_S = {
  tcpEstablishedS: 7_440, // RFC 5382 REQ-5: at least 2 h 4 min
  tcpClosingS: 10,
  udpS: 120, // RFC 4787 REQ-5: at least 2 min
} as const;

/** A be_vips entry of a backend node: an `address` entry (IP-in-IP to this VIP) or a `listener` (ipopt). */
export interface BackendVip {
  kind: 'address' | 'listener';
  address: string;
  family: 4 | 6;
  port: number; // 0 for an address entry
  protocol: 'TCP' | 'UDP' | null; // null for an address entry
  targetPort: number; // 0 = not checked
  /**
   * Listener entries only: the targetPort the entry had before this change (put ops), or that it still trusts
   * (live reads, while its grace lasts). Never desired by a revision: the planner carries it over from the live
   * entry, because lb nodes apply on their own schedule and keep sending the old port meanwhile (docs/backend.md).
   */
  previousTargetPort?: number;
}

/** A be_tunnel_addrs entry of a backend node: an address IP-in-IP may come from (an lb node) and/or go to (this node). */
export interface BackendTunnelAddr {
  address: string;
  family: 4 | 6;
  lbSource: boolean;
  local: boolean;
}

/** A service's ring as the kernel holds it. `ring` is present only when the reader was asked for tables. */
export interface LiveService {
  id: number;
  tableSize: number;
  digest: string;
  /** The distinct real ids the ring names, ascending, when the reader knows them (the planner then deletes a
   * real this ring names only once the ring is switched or gone; unknown: every live real waits for it). */
  reals?: readonly number[];
  /** Kernel id of the inner map holding the ring (identity: a new table is a new map). */
  mapId?: number;
  ring?: Uint32Array;
}

export interface LiveVipMarker { address: string; family: 4 | 6 }

/** An lb_source_ranges entry: clients in `prefix` (canonical CIDR) may reach service `serviceId`. */
export interface SourceRange { serviceId: number; prefix: string }

/** An lb_quic_servers entry: QUIC server id `serverId` of service `serviceId` names real `realId`. */
export interface QuicServer { serviceId: number; serverId: number; realId: number }

/** What a node's maps hold, decoded. An lb node fills the lb fields, a backend node `backendVips`. */
export interface LiveState {
  settings: LbSettings | null;
  snat: SnatSettings | null;
  reals: DesiredReal[];
  services: LiveService[];
  vips: DesiredVip[];
  markers: LiveVipMarker[];
  /** lb_source_ranges, sorted by sourceRangeOrder. */
  sourceRanges: SourceRange[];
  /** lb_quic_servers, sorted by compareQuicServers. */
  quicServers: QuicServer[];
  backendVips: BackendVip[];
  backendTunnels: BackendTunnelAddr[];
}

export const EMPTY_LIVE: LiveState = {
  settings: null, snat: null, reals: [], services: [], vips: [], markers: [], sourceRanges: [], quicServers: [], backendVips: [], backendTunnels: [],
};

export type Op =
  | { op: 'settings.set'; value: LbSettings; before: LbSettings | null }
  | { op: 'snat.set'; value: SnatSettings; before: SnatSettings | null }
  | { op: 'real.put'; real: DesiredReal; before: DesiredReal | null }
  /** Builds a new ring for a service (not yet visible to packets); `reals`: the distinct real ids it names. */
  | { op: 'ring.fill'; serviceId: number; name: string; tableSize: number; digest: string; ring: Uint32Array; reals?: readonly number[] }
  /** Points the service at the ring filled by the ring.fill before it: one map update. */
  | { op: 'service.switch'; serviceId: number; name: string; tableSize: number; digest: string; before: { tableSize: number; digest: string } | null }
  | { op: 'vip.put'; vip: DesiredVip; before: DesiredVip | null }
  | { op: 'marker.put'; marker: LiveVipMarker }
  | { op: 'vip.delete'; vip: DesiredVip }
  | { op: 'marker.delete'; marker: LiveVipMarker }
  | { op: 'service.delete'; serviceId: number; tableSize: number; digest: string }
  | { op: 'real.delete'; real: DesiredReal }
  /** Lets clients in `prefix` reach the service (its listeners check only once their flag is set). */
  | { op: 'source-range.put'; range: SourceRange }
  | { op: 'source-range.delete'; range: SourceRange }
  /** Sends the packets whose connection ID carries the server id to the real (created or replaced in one update). */
  | { op: 'quic-server.put'; entry: QuicServer; before: QuicServer | null }
  | { op: 'quic-server.delete'; entry: QuicServer }
  | { op: 'backend-vip.put'; entry: BackendVip; before: BackendVip | null }
  | { op: 'backend-vip.delete'; entry: BackendVip }
  | { op: 'backend-tunnel.put'; entry: BackendTunnelAddr; before: BackendTunnelAddr | null }
  | { op: 'backend-tunnel.delete'; entry: BackendTunnelAddr }
  /** A table sized by Cluster.spec.conntrack.maxEntries gets a new size: planned by the lb data plane from its map
   * sizes (src/bpf/dataplane/resize.ts), executed before every other op; no packet-path outage, no flow lost. */
  | { op: 'table.resize'; map: string; from: number; to: number };

export type OpKind = Op['op'];

// ------------------------------------------------------------------ desired views

export function desiredSettings(d: DesiredState): LbSettings {
  const own = d.addresses ?? [];
  const src4 = own.filter((a) => !a.includes(':'));
  const src6 = own.find((a) => a.includes(':'));
  return { hashSeed: d.hashSeed, mtu: d.mtu, src4, ...(src6 !== undefined && { src6 }),
    ...(d.conntrackNewFlowRate ? { newFlowRate: d.conntrackNewFlowRate } : {}) };
}

export function desiredSnat(d: DesiredState): SnatSettings {
  const ports = d.snatPorts ?? DEFAULT_SNAT_PORTS;
  const out: SnatSettings = { portMin: ports.min, portMax: ports.max, ...SNAT_TIMEOUTS_S };
  if (d.snatAddress !== undefined) {
    if (d.snatAddress.includes(':')) out.addr6 = d.snatAddress;
    else out.addr4 = d.snatAddress;
  }
  return out;
}

export const markerId = (m: LiveVipMarker): string => `${m.family}|${m.address}`;
export const sourceRangeId = (r: SourceRange): string => `${r.serviceId}|${r.prefix}`;
/** The order of LiveState.sourceRanges: service id, then prefix (family, network, length). */
export const compareSourceRanges = (a: SourceRange, b: SourceRange): number => a.serviceId - b.serviceId || compareCidrs(a.prefix, b.prefix);

/** The lb_source_ranges entries a node needs: every prefix of every service that has sourceRanges. */
export function desiredSourceRanges(d: Pick<DesiredState, 'services'>): SourceRange[] {
  return d.services.flatMap((s) => (s.sourceRanges ?? []).map((prefix) => ({ serviceId: s.id, prefix })));
}
export const quicServerId = (e: Pick<QuicServer, 'serviceId' | 'serverId'>): string => `${e.serviceId}|${e.serverId}`;
/** The order of LiveState.quicServers: service id, then server id. */
export const compareQuicServers = (a: QuicServer, b: QuicServer): number => a.serviceId - b.serviceId || a.serverId - b.serverId;

/** The lb_quic_servers entries a node needs: the server ids of every service with QUIC connection-ID routing. */
export function desiredQuicServers(d: Pick<DesiredState, 'services'>): QuicServer[] {
  return d.services.flatMap((s) => (s.quic?.servers ?? []).map((q) => ({ serviceId: s.id, serverId: q.serverId, realId: q.realId })));
}
export const vipId = (v: Pick<DesiredVip, 'vip' | 'port' | 'protocol'>): string => `${v.vip}|${v.port}|${v.protocol}`;
export const backendVipId = (e: Pick<BackendVip, 'address' | 'family' | 'port' | 'protocol'>): string =>
  `${e.family}|${e.address}|${e.port}|${e.protocol ?? '*'}`;

/** Every VIP address of an lb node gets a marker entry, so damaged packets to it are dropped, not passed. */
export function desiredMarkers(d: DesiredState): LiveVipMarker[] {
  const byId = new Map<string, LiveVipMarker>();
  for (const v of d.vips) byId.set(markerId({ address: v.vip, family: v.family }), { address: v.vip, family: v.family });
  return [...byId.values()];
}

/**
 * The be_vips entries a backend node needs. Every DSR VIP:port:protocol gets both kinds, whatever encap the
 * service names now: an address entry (decapsulate IP-in-IP to the VIP) and a listener entry (trust the ipopt
 * option naming it). lb nodes and backends apply an encap change (l2, ipip, ipopt) at different moments, so a
 * backend must take every form until and after its own apply (docs/backend.md). snat traffic arrives as ordinary
 * packets and needs no entry. Sorted by identity, duplicates merged.
 */
export function desiredBackendVips(d: Pick<DesiredState, 'vips'>): BackendVip[] {
  const byId = new Map<string, BackendVip>();
  for (const v of d.vips) {
    if (v.forwarding === 'snat') continue;
    const address: BackendVip = { kind: 'address', address: v.vip, family: v.family, port: 0, protocol: null, targetPort: 0 };
    const listener: BackendVip = { kind: 'listener', address: v.vip, family: v.family, port: v.port, protocol: v.protocol, targetPort: v.targetPort };
    for (const e of [address, listener]) byId.set(backendVipId(e), e);
  }
  return [...byId.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, e]) => e);
}

// ------------------------------------------------------------------ planner

const sameJson = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

function sameVip(a: DesiredVip, b: DesiredVip): boolean {
  return a.vip === b.vip && a.family === b.family && a.port === b.port && a.protocol === b.protocol &&
    a.targetPort === b.targetPort && a.serviceId === b.serviceId && a.forwarding === b.forwarding &&
    a.hashSourcePort === b.hashSourcePort && !!a.sourceRanges === !!b.sourceRanges &&
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
export const backendTunnelId = (e: Pick<BackendTunnelAddr, 'address' | 'family'>): string => `${e.family}|${e.address}`;

/**
 * The be_tunnel_addrs entries of a backend node: its own addresses (allowed outer destinations of IP-in-IP) and
 * every lb node's address (allowed outer sources), one entry per address, sorted. Without them no tunnel is
 * decapsulated (docs/backend.md).
 */
export function desiredBackendTunnels(d: Pick<DesiredState, 'addresses' | 'lbAddresses'>): BackendTunnelAddr[] {
  const byAddr = new Map<string, BackendTunnelAddr>();
  const entry = (a: string) => byAddr.get(a) ?? byAddr.set(a, { address: a, family: ipFamily(a), lbSource: false, local: false }).get(a)!;
  for (const a of d.addresses ?? []) entry(a).local = true;
  for (const a of d.lbAddresses ?? []) entry(a).lbSource = true;
  return [...byAddr.values()].sort((a, b) => a.family - b.family || compareIps(a.address, b.address));
}

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

/** The distinct non-zero real ids of a ring, ascending. A Maglev ring interleaves its reals entry by entry, so a
 * small direct-mapped memo of ids already seen spares the set insert of almost every entry (a collision only costs
 * an insert, which is idempotent). */
export function ringRealIds(ring: ArrayLike<number>): number[] {
  const out = new Set<number>();
  const seen = new Uint32Array(1024); // 0 = empty slot (real ids are >= 1)
  for (let i = 0; i < ring.length; i++) {
    const id = ring[i]!;
    if (id === 0) continue;
    const h = (id ^ (id >>> 10) ^ (id >>> 20)) & 1023;
    if (seen[h] === id) continue;
    seen[h] = id;
    out.add(id);
  }
  return [...out].sort((a, b) => a - b);
}

/** The distinct real ids of a desired ring: render lists each real with the entries it got (service-table.ts), so
 * when those entries add up to the whole ring they name exactly its reals and no entry needs reading. */
function desiredRingReals(s: DesiredState['services'][number]): number[] {
  let sum = 0;
  const out: number[] = [];
  for (const r of s.reals) {
    sum += r.entries;
    if (r.entries > 0) out.push(r.realId); // s.reals is sorted by real id
  }
  return sum === s.ring.length ? out : ringRealIds(s.ring);
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

// ------------------------------------------------------------------ text

const vipText = (v: DesiredVip) => `${v.vip.includes(':') ? `[${v.vip}]` : v.vip}:${v.port}/${v.protocol}`;
const vipValueText = (v: DesiredVip) =>
  `service ${v.serviceId}, ${v.forwarding}, target ${v.targetPort}${v.hashSourcePort ? ', sport-hash' : ''}${v.sourceRanges ? ', source ranges' : ''}` +
  (v.affinityTimeoutS ? `, affinity ${v.affinityTimeoutS} s` : '') + (v.quic ? ', quic' : '');
const settingsText = (s: LbSettings) =>
  `seed ${s.hashSeed}, mtu ${s.mtu}, src4 [${s.src4.join(' ')}]${s.src6 ? `, src6 ${s.src6}` : ''}${s.newFlowRate ? `, new flows ${s.newFlowRate}/s/CPU` : ''}`;
const snatText = (s: SnatSettings) =>
  `addr4 ${s.addr4 ?? '-'}, addr6 ${s.addr6 ?? '-'}, ports ${s.portMin}-${s.portMax}, timeouts ${s.tcpEstablishedS}/${s.tcpClosingS}/${s.udpS} s`;
const beText = (e: BackendVip) => `${e.kind} ${e.address}${e.port ? `:${e.port}/${e.protocol}` : ''}${e.targetPort ? ` target ${e.targetPort}` : ''}` +
  (e.previousTargetPort ? `, still trusting ${e.previousTargetPort}` : '');

const rangeText = (r: SourceRange) => `service ${r.serviceId}, ${r.prefix}`;
const quicKeyText = (e: QuicServer) => `service ${e.serviceId}, server id ${e.serverId}`;
const tunnelText = (e: BackendTunnelAddr) => `${e.address}${e.lbSource ? ' lb-source' : ''}${e.local ? ' local' : ''}`;

/** One line per op, naming the map it writes (docs/datapath.md, docs/backend.md). */
export function describeOp(o: Op): string {
  switch (o.op) {
    case 'settings.set': return `lb_config[0] = {${settingsText(o.value)}}${o.before ? ` (was {${settingsText(o.before)}})` : ''}`;
    case 'snat.set': return `lb_snat_config[0] = {${snatText(o.value)}}${o.before ? ` (was {${snatText(o.before)}})` : ''}`;
    case 'real.put': return `lb_reals[${o.real.id}] = ${o.real.address}${o.before ? ` (was ${o.before.address})` : ''}`;
    case 'ring.fill': return `new ring for service ${o.name} (${o.serviceId}): ${o.tableSize} entries, digest ${o.digest.slice(0, 12)}`;
    case 'service.switch':
      return `lb_rings[${o.serviceId}] = ring ${o.digest.slice(0, 12)}` +
        (o.before ? ` (was ${o.before.digest.slice(0, 12)}${o.before.tableSize !== o.tableSize ? `, ${o.before.tableSize} entries` : ''})` : ' (new service)');
    case 'vip.put': return `lb_vips[${vipText(o.vip)}] = {${vipValueText(o.vip)}}${o.before ? ` (was {${vipValueText(o.before)}})` : ''}`;
    case 'marker.put': return `lb_vips[${o.marker.address} marker] = {}`;
    case 'vip.delete': return `delete lb_vips[${vipText(o.vip)}] ({${vipValueText(o.vip)}})`;
    case 'marker.delete': return `delete lb_vips[${o.marker.address} marker]`;
    case 'service.delete': return `delete lb_rings[${o.serviceId}] (ring ${o.digest.slice(0, 12)}, ${o.tableSize} entries)`;
    case 'real.delete': return `delete lb_reals[${o.real.id}] (${o.real.address})`;
    case 'source-range.put': return `lb_source_ranges[${rangeText(o.range)}] = allow`;
    case 'source-range.delete': return `delete lb_source_ranges[${rangeText(o.range)}]`;
    case 'quic-server.put': return `lb_quic_servers[${quicKeyText(o.entry)}] = real ${o.entry.realId}${o.before ? ` (was real ${o.before.realId})` : ''}`;
    case 'quic-server.delete': return `delete lb_quic_servers[${quicKeyText(o.entry)}] (real ${o.entry.realId})`;
    case 'backend-vip.put': return `be_vips[${beText(o.entry)}]${o.before ? ` (was ${beText(o.before)})` : ''}`;
    case 'backend-vip.delete': return `delete be_vips[${beText(o.entry)}]`;
    case 'backend-tunnel.put': return `be_tunnel_addrs[${tunnelText(o.entry)}]${o.before ? ` (was ${tunnelText(o.before)})` : ''}`;
    case 'backend-tunnel.delete': return `delete be_tunnel_addrs[${tunnelText(o.entry)}]`;
    case 'table.resize': return `resize ${o.map}: ${o.from} -> ${o.to} entries (entries copied, program swapped in its link)`;
  }
}

/** An op as plain JSON: rings are summarised (size and digest), not listed. */
export function opToJson(o: Op): Record<string, unknown> {
  if (o.op !== 'ring.fill') return { ...o, describe: describeOp(o) };
  const { ring: _ring, reals: _reals, ...rest } = o;
  return { ...rest, describe: describeOp(o) };
}

/** Counts of ops by kind, for logs and status. */
export function summarizeOps(ops: Op[]): Partial<Record<OpKind, number>> {
  const out: Partial<Record<OpKind, number>> = {};
  for (const o of ops) out[o.op] = (out[o.op] ?? 0) + 1;
  return out;
}

// ------------------------------------------------------------------ simulation

/** The LiveState a data plane holds once it has applied `desired` exactly (what an empty plan means). */
export function liveOf(desired: DesiredState): LiveState {
  if (desired.role === 'backend')
    return { ...EMPTY_LIVE, backendVips: desiredBackendVips(desired), backendTunnels: desiredBackendTunnels(desired) };
  return {
    settings: desiredSettings(desired),
    snat: desiredSnat(desired),
    reals: desired.reals.map((r) => ({ ...r })),
    services: desired.services.map((s) => ({ id: s.id, tableSize: s.tableSize, digest: s.digest, reals: desiredRingReals(s) })),
    vips: desired.vips.map((v) => ({ ...v })),
    markers: desiredMarkers(desired),
    sourceRanges: desiredSourceRanges(desired),
    quicServers: desiredQuicServers(desired),
    backendVips: [],
    backendTunnels: [],
  };
}

/**
 * What `ops` do to `live`, computed without a kernel (the in-memory data plane and the planner's tests use it).
 * Throws, like a data plane would, on a switch without its fill.
 */
export function applyOps(live: LiveState, ops: Op[]): LiveState {
  const reals = new Map(live.reals.map((r) => [r.id, r]));
  const services = new Map(live.services.map((s) => [s.id, s]));
  const vips = new Map(live.vips.map((v) => [vipId(v), v]));
  const markers = new Map(live.markers.map((m) => [markerId(m), m]));
  const be = new Map(live.backendVips.map((e) => [backendVipId(e), e]));
  const tunnels = new Map(live.backendTunnels.map((e) => [backendTunnelId(e), e]));
  const ranges = new Map(live.sourceRanges.map((r) => [sourceRangeId(r), r]));
  const quic = new Map(live.quicServers.map((e) => [quicServerId(e), e]));
  const filled = new Map<number, LiveService>();
  let { settings, snat } = live;
  for (const o of ops) {
    switch (o.op) {
      case 'settings.set': settings = o.value; break;
      case 'snat.set': snat = o.value; break;
      case 'real.put': reals.set(o.real.id, o.real); break;
      case 'ring.fill': filled.set(o.serviceId, { id: o.serviceId, tableSize: o.tableSize, digest: o.digest, ring: o.ring, ...(o.reals && { reals: o.reals }) }); break;
      case 'service.switch': {
        const s = filled.get(o.serviceId);
        if (!s) throw new Error(`service.switch of service ${o.serviceId} without a ring.fill before it`);
        services.set(o.serviceId, s);
        break;
      }
      case 'vip.put': vips.set(vipId(o.vip), o.vip); break;
      case 'marker.put': markers.set(markerId(o.marker), o.marker); break;
      case 'vip.delete': vips.delete(vipId(o.vip)); break;
      case 'marker.delete': markers.delete(markerId(o.marker)); break;
      case 'service.delete': services.delete(o.serviceId); break;
      case 'real.delete': reals.delete(o.real.id); break;
      case 'source-range.put': ranges.set(sourceRangeId(o.range), o.range); break;
      case 'source-range.delete': ranges.delete(sourceRangeId(o.range)); break;
      case 'quic-server.put': quic.set(quicServerId(o.entry), o.entry); break;
      case 'quic-server.delete': quic.delete(quicServerId(o.entry)); break;
      case 'backend-vip.put': be.set(backendVipId(o.entry), o.entry); break;
      case 'backend-vip.delete': be.delete(backendVipId(o.entry)); break;
      case 'backend-tunnel.put': tunnels.set(backendTunnelId(o.entry), o.entry); break;
      case 'backend-tunnel.delete': tunnels.delete(backendTunnelId(o.entry)); break;
      case 'table.resize': break; // table sizes are not part of LiveState
    }
  }
  return {
    settings, snat,
    reals: [...reals.values()].sort((a, b) => a.id - b.id),
    services: [...services.values()].sort((a, b) => a.id - b.id),
    vips: [...vips.values()],
    markers: [...markers.values()],
    sourceRanges: [...ranges.values()].sort(compareSourceRanges),
    quicServers: [...quic.values()].sort(compareQuicServers),
    backendVips: [...be.values()],
    backendTunnels: [...tunnels.values()],
  };
}
