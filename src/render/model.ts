// The validated configuration model: what the config stage hands to render.
// Every value here has passed schema and semantic validation and has its defaults filled in.
// Pure data; no I/O. Field names mirror the YAML (see docs/config.md and schemas/).

export type Protocol = 'TCP' | 'UDP';
export type DispatchMode = 'dsr' | 'snat' | 'hybrid';
export type Encap = 'l2' | 'ipip' | 'ipopt' | 'gue';
/** The UDP destination port of dsr-gue when the Cluster names none (Katran's GUE_DPORT, the usual GUE port). */
export const DEFAULT_GUE_PORT = 6080;
export type RealState = 'active' | 'drain' | 'disabled';
export type NodeRole = 'lb' | 'backend';
/** lb nodes: `drain` withdraws every VIP by BGP and keeps forwarding what still arrives. */
export type NodeState = 'active' | 'drain';
export type HealthCheckType = 'tcp' | 'http' | 'none';
export type RollbackPolicy = 'manual' | 'auto';
export type VerificationMode = 'off' | 'warn' | 'enforce';
export type SignatureFormat = 'ssh' | 'openpgp';
/** What a service does when every active real fails its health check (docs/health.md). */
export type HealthFailMode = 'open' | 'closed';
/** `local`: act on this node's checks alone; `consensus`: a real leaves the tables only on a quorum of lb nodes. */
export type HealthAgreementMode = 'local' | 'consensus';

/** Where a document (or a field of it) came from, for error messages. 1-based line and column. */
export interface SourcePos {
  file: string;
  line: number;
  col: number;
}

export interface ClusterSpec {
  maglev: { tableSize: number; seed: string /* base64 of 12 bytes */ };
  conntrack: { maxEntries: number; newFlowRate: number };
  status: { branch: string };
  rollback: { policy: RollbackPolicy };
  /** dsr-gue: the UDP destination port lb nodes send GUE to and backends decapsulate at (Cluster spec.gue.port).
   * Absent: DEFAULT_GUE_PORT. */
  gue?: { port: number };
  /** Health agreement across lb nodes (docs/health.md). Optional; absent means { mode: 'local' }. */
  health?: { mode: HealthAgreementMode; staleAfterMs?: number };
  /** BGP announcement of the VIPs (docs/bgp.md). Absent: no BIRD configuration is rendered. */
  bgp?: ClusterBgp;
  /** Commit signature verification (docs/verification.md). Optional; absent means mode off (unless --trust). */
  verification?: { mode: VerificationMode; formats: SignatureFormat[]; signersFile: string };
}

export interface ClusterBgp {
  localAsn: number;
  holdTime: number; // seconds
  keepaliveTime: number; // seconds, below holdTime (default holdTime / 3, rounded down, at least 1)
  communities: [number, number][]; // sorted, unique
  med?: number;
}

export interface BgpPeer {
  address: string; // canonical
  asn: number;
  password?: string;
}

export interface NodeBgp {
  routerId: string;
  peers: BgpPeer[]; // sorted by address
}

export interface NodeSpec {
  role: NodeRole;
  interface: string;
  allowedVips: string[]; // CIDRs
  snatAddress?: string;
  /** lb nodes: the peer channel's public key, an `ssh-ed25519 AAAA…` line (docs/security.md, Peers). */
  peerKey?: string;
  /** SNAT source ports, inclusive, min >= 1024, min <= max. Absent: 32768..60999 (the data plane's default). */
  snatPorts?: { min: number; max: number };
  /** The node's own unicast addresses (canonical). A backend node serves the services that list one of
   * them as a real; an lb node uses them as the outer source of ipip. Optional; defaults to []. */
  addresses: string[];
  /** MTU of `interface`, used for the encapsulation MTU check. Default 1500. */
  mtu: number;
  /** Only lb nodes may drain. Absent means 'active' (the model sets it only for a draining node). */
  state?: NodeState;
  /** lb nodes: BGP sessions that announce the VIPs (needs ClusterSpec.bgp). */
  bgp?: NodeBgp;
}

export interface PortSpec {
  port: number;
  protocol: Protocol;
  targetPort?: number;
}

export interface HealthCheckSpec {
  type: HealthCheckType;
  port?: number;
  path?: string;
  intervalMs: number;
  timeoutMs: number;
  rise: number;
  fall: number;
  /** When every active real is down: 'open' keeps them all in the table (default), 'closed' drops new flows. */
  failMode?: HealthFailMode;
  /** http only: inclusive range of statuses that count as healthy. Default { min: 200, max: 399 }. */
  expectStatus?: { min: number; max: number };
  /** 'vip': probe VIP:port steered to each real as client packets are (dsr l2/ipip, IPv4; the default there). Absent: 'real', the real's own address (the default elsewhere). */
  via?: 'vip' | 'real';
}

export interface RealSpec {
  address: string; // canonical text form (IPv6 compressed, lower case)
  weight: number;
  state: RealState;
  /** QUIC server id the real puts into its connection IDs (u32 >= 1, unique within the service). Absent: none. */
  serverId?: number;
}

export interface ServiceSpec {
  vip: string; // canonical text form
  ports: PortSpec[];
  dispatch: { mode: DispatchMode; encap?: Encap };
  hash: { sourcePort: boolean };
  healthCheck: HealthCheckSpec;
  reals: RealSpec[];
  maglev?: { tableSize?: number };
  /** Client prefixes allowed to reach the VIP (canonical CIDRs of the VIP's family, sorted by compareCidrs, no
   * duplicates). Absent when the config lists none: every client may. */
  sourceRanges?: string[];
  /** Session affinity by client address (docs/config.md): timeout in seconds, 1..86400. Absent: none. */
  sessionAffinity?: { clientIP: { timeout: number } };
  /** QUIC connection-ID routing on the service's UDP listeners (docs/config.md). Absent: off. */
  quic?: { connectionIdRouting: true };
}

export interface Document<K extends string, S> {
  apiVersion: 'gitlb/v1';
  kind: K;
  metadata: { name: string };
  spec: S;
  source: SourcePos;
}

export type ClusterDoc = Document<'Cluster', ClusterSpec>;
export type NodeDoc = Document<'Node', NodeSpec>;
export type ServiceDoc = Document<'Service', ServiceSpec>;

/** A whole validated revision of the config repository. Lists are sorted by metadata.name. */
export interface ConfigModel {
  cluster: ClusterDoc;
  nodes: NodeDoc[];
  services: ServiceDoc[];
}
