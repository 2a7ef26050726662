// The map operations of a node's data plane (Op[]) and the states they go between: what the kernel holds (LiveState)
// and the views of a revision's DesiredState that a plan compares with it, map by map. Pure. The planner that
// orders them is ops-plan.ts, their text ops-text.ts, their effect on a LiveState without a kernel ops-apply.ts;
// the lb and backend data planes execute them (src/bpf/dataplane, src/bpf/backend).

import type { DesiredReal, DesiredState, DesiredVip } from './state.js';
import { compareCidrs, compareIps, ipFamily } from './ip.js';

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
  // the length of Linux's TIME_WAIT (TCP_TIMEWAIT_LEN, 60 s): a backend that closed first holds the 4-tuple
  // (snatAddress, SNAT port, real) that long, and refuses a SYN on it whose TCP timestamp is older than the last
  // one it saw (PAWS); clients randomise timestamps per 4-tuple, so a port given to another client flow sooner
  // stalls about one connection in two that lands on it by the client's 1 s SYN retransmission
  // (bench/e2e/two-arm-run, docs/datapath.md "Timeouts"). nftables' conntrack waits 120 s.
  tcpClosingS: 60,
  udpS: 120, // RFC 4787 REQ-5: at least 2 min
} as const;

/** A be_vips entry of a backend node: an `address` entry (IP-in-IP, and GUE at its targetPort, to this VIP) or a
 * `listener` (ipopt). */
export interface BackendVip {
  kind: 'address' | 'listener';
  address: string;
  family: 4 | 6;
  port: number; // 0 for an address entry
  protocol: 'TCP' | 'UDP' | null; // null for an address entry
  targetPort: number; // listener: the ipopt port (0 = not checked); address: the GUE port (0 = no GUE)
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
 * service names now: an address entry (decapsulate IP-in-IP to the VIP, and GUE at the cluster's GUE port) and a
 * listener entry (trust the ipopt option naming it). lb nodes and backends apply an encap change (l2, ipip, ipopt,
 * gue) at different moments, so a
 * backend must take every form until and after its own apply (docs/backend.md). snat traffic arrives as ordinary
 * packets and needs no entry. Sorted by identity, duplicates merged.
 */
export function desiredBackendVips(d: Pick<DesiredState, 'vips' | 'guePort'>): BackendVip[] {
  const byId = new Map<string, BackendVip>();
  for (const v of d.vips) {
    if (v.forwarding === 'snat') continue;
    const address: BackendVip = { kind: 'address', address: v.vip, family: v.family, port: 0, protocol: null, targetPort: d.guePort ?? 0 };
    const listener: BackendVip = { kind: 'listener', address: v.vip, family: v.family, port: v.port, protocol: v.protocol, targetPort: v.targetPort };
    for (const e of [address, listener]) byId.set(backendVipId(e), e);
  }
  return [...byId.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, e]) => e);
}

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
export function desiredRingReals(s: DesiredState['services'][number]): number[] {
  let sum = 0;
  const out: number[] = [];
  for (const r of s.reals) {
    sum += r.entries;
    if (r.entries > 0) out.push(r.realId); // s.reals is sorted by real id
  }
  return sum === s.ring.length ? out : ringRealIds(s.ring);
}
