// Documents as they stand after schema validation (schema defaults filled in, addresses not yet
// canonical, durations still text). Only semantic checks and the model builder see these.
import type { DispatchMode, Encap, HealthAgreementMode, HealthCheckType, HealthFailMode, NodeRole, NodeState, Protocol, RealState, RollbackPolicy, SignatureFormat, VerificationMode } from '../model.js';
import type { YamlDocument } from './yaml-source.js';

interface RawDocument<K extends string, S> {
  apiVersion: 'gitlb/v1';
  kind: K;
  metadata: { name: string };
  spec: S;
}

export type RawCluster = RawDocument<
  'Cluster',
  {
    maglev: { tableSize: number; seed: string };
    conntrack: { maxEntries: number; newFlowRate: number };
    status: { branch: string };
    rollback: { policy: RollbackPolicy };
    gue?: { port: number };
    health?: { mode?: HealthAgreementMode; staleAfter?: string };
    bgp?: { localAsn: number; holdTime: number; keepaliveTime?: number; communities: string[]; med?: number };
    verification?: { mode?: VerificationMode; formats?: SignatureFormat[]; signersFile?: string };
  }
>;

export type RawNode = RawDocument<
  'Node',
  {
    role: NodeRole;
    interface: string;
    allowedVips: string[];
    snatAddress?: string;
    peerKey?: string;
    snatPorts?: { min: number; max: number };
    addresses: string[];
    mtu: number;
    state: NodeState;
    bgp?: { routerId: string; peers: { address: string; asn: number; password?: string }[] };
  }
>;

export type RawService = RawDocument<
  'Service',
  {
    vip: string;
    ports: { port: number; protocol: Protocol; targetPort?: number }[];
    dispatch: { mode: DispatchMode; encap?: Encap };
    hash: { sourcePort: boolean };
    sessionAffinity?: { clientIP: { timeout: number } };
    healthCheck: { type: HealthCheckType; port?: number; path?: string; interval: string; timeout: string; rise: number; fall: number;
      failMode?: HealthFailMode; expectStatus?: { min: number; max: number }; via?: 'vip' | 'real' };
    reals: { address: string; weight: number; state: RealState; serverId?: number }[];
    maglev?: { tableSize?: number };
    sourceRanges?: string[];
    quic?: { connectionIdRouting: boolean };
  }
>;

/** A schema-valid document together with its source, for positions in messages. */
export interface Located<T> {
  doc: YamlDocument;
  data: T;
}

/** "2s" -> 2000; the schema pattern guarantees the shape. */
export function durationMs(text: string): number {
  const m = /^(\d+)(ms|s|m)$/.exec(text);
  if (!m) throw new Error(`internal: unvalidated duration '${text}'`);
  const n = Number(m[1]);
  return m[2] === 'ms' ? n : m[2] === 's' ? n * 1000 : n * 60_000;
}
