// The desired data-plane state of one node: what render produces and what the bpf layer applies.
// Pure data, JSON-serialisable except `ring` (a Uint32Array; JSON form is a number array).
// Identical input => identical state on every node (see docs/maglev.md, docs/render.md).
import type { DispatchMode, Encap, Protocol, RealState, NodeRole, HealthCheckSpec } from './model.js';

/** How one VIP:port:protocol is forwarded, after resolving `hybrid` (TCP -> dsr, UDP -> snat). */
export type Forwarding = 'dsr-l2' | 'dsr-ipip' | 'dsr-ipopt' | 'dsr-gue' | 'snat';

/** A backend known to the data plane. `id` is stable across revisions for the same address. */
export interface DesiredReal {
  id: number; // u32, >= 1 (0 means "no real" in the ring and maps)
  address: string; // canonical IPv4 or IPv6 text
  family: 4 | 6;
}

/** One listener: a VIP, port and protocol; several can share one service (and its ring). */
export interface DesiredVip {
  vip: string;
  family: 4 | 6;
  port: number;
  protocol: Protocol;
  targetPort: number; // = port when not overridden
  /** dsr-gue listeners only: the UDP destination port of the tunnel (Cluster spec.gue.port), what the data plane
   * keeps in lb_vip_value.target_port for this mode (targetPort equals port here, as with ipip). */
  guePort?: number;
  serviceId: number; // index into DesiredState.services by `id`
  forwarding: Forwarding;
  hashSourcePort: boolean;
  /** Present (true) when the service has sourceRanges: the data plane then checks each packet's source against
   * them (lb_vip_value flag LB_VIP_F_SOURCE_RANGES); absent, no check and no lookup. */
  sourceRanges?: true;
  /** The service's session affinity timeout in seconds (Service spec.sessionAffinity.clientIP.timeout), the same
   * in each of its listeners (lb_vip_value.affinity_s). Absent: no session affinity. */
  affinityTimeoutS?: number;
  /** Present (true) on the UDP listeners of a service with QUIC connection-ID routing (lb_vip_value flag
   * LB_VIP_F_QUIC): the data plane reads the server id in each packet's connection ID first. Absent: it never looks. */
  quic?: true;
}

/** A QUIC server id of a service and the real that owns it (Service spec.reals[].serverId). */
export interface DesiredQuicServer {
  serverId: number;
  realId: number;
}

/** A service's reals as the data plane sees them, with the table share each got. */
export interface DesiredServiceReal {
  realId: number;
  address: string;
  weight: number;
  state: RealState; // 'disabled' reals are not listed at all
  healthy: boolean;
  entries: number; // entries of the ring pointing at this real
}

export interface DesiredService {
  id: number; // u32 >= 1, stable across revisions for the same service name
  name: string;
  mode: DispatchMode;
  encap?: Encap;
  tableSize: number; // prime
  ring: Uint32Array; // length tableSize; each entry a real id (0 = empty service: drop new flows)
  digest: string; // hex SHA-256 of the ring as little-endian u32s (docs/maglev.md)
  reals: DesiredServiceReal[]; // sorted by realId
  healthCheck: HealthCheckSpec;
  /** Client prefixes allowed to reach the service (canonical CIDRs, sorted; docs/config.md). Absent: every client. */
  sourceRanges?: string[];
  /** Session affinity (Service spec.sessionAffinity): a client's new connections keep the real of its last one for
   * `timeoutS` seconds after it, while the table names that real. Absent: none. */
  sessionAffinity?: { timeoutS: number };
  /** QUIC connection-ID routing (Service spec.quic.connectionIdRouting): the server ids of the service's healthy reals
   * (active or drain; an unhealthy real's id is left out, so its packets go by the table), sorted by serverId. */
  quic?: { servers: DesiredQuicServer[] };
}

export interface DesiredState {
  node: string;
  role: NodeRole;
  interface: string;
  mtu: number;
  snatAddress?: string;
  /** SNAT source ports (Node.spec.snatPorts, inclusive); the data plane defaults to 32768..60999 when absent. */
  snatPorts?: { min: number; max: number };
  /** The node's own addresses (Node.spec.addresses, canonical). An lb node uses them as the outer source of
   * dsr-ipip (see docs/datapath.md); when absent the kernel's source choice for the route is used. */
  addresses?: string[];
  /** Backend nodes: the UDP port GUE tunnels arrive at (Cluster spec.gue.port), decapsulated for every DSR VIP the
   * node serves (its be_vips address entries carry it). Absent: no GUE is decapsulated. */
  guePort?: number;
  /** Backend nodes: every lb node's addresses (Node.spec.addresses of role lb, canonical, sorted). IP-in-IP is
   * decapsulated only from these (see docs/backend.md). */
  lbAddresses?: string[];
  /** u32 seed of the flow hash in the data plane, derived from Cluster.spec.maglev.seed. */
  hashSeed: number;
  conntrackMaxEntries: number;
  /** New-flow rate guard (Cluster.spec.conntrack.newFlowRate): connection-table inserts per second per CPU of
   * an lb node; flows over it are forwarded without an entry. 0 or absent: off. */
  conntrackNewFlowRate?: number;
  reals: DesiredReal[]; // sorted by id
  services: DesiredService[]; // sorted by id
  vips: DesiredVip[]; // sorted by (vip, port, protocol)
  /** For backend nodes: VIPs this node must own locally (every dsr encap, see desired.ts) — canonical, sorted. */
  localVips: string[];
}
