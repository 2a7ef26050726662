// Schema-valid, semantically checked documents -> the ConfigModel render consumes: canonical
// addresses, durations in milliseconds, health-check port filled in, lists sorted by name.
import type { BgpPeer, ClusterBgp, ClusterDoc, ConfigModel, NodeBgp, HealthCheckSpec, NodeDoc, ServiceDoc, SourcePos } from '../model.js';
import { canonicalCidr, canonicalIp, compareCidrs, compareIps } from '../ip.js';
import { DEFAULTS } from './limits.js';
import { effectiveVia } from './health-via.js';
import { durationMs, type Located, type RawCluster, type RawNode, type RawService } from './raw.js';

function source(l: Located<unknown>): SourcePos {
  return { file: l.doc.file, ...l.doc.locate([]) };
}

function ip(text: string): string {
  const c = canonicalIp(text);
  if (c === null) throw new Error(`internal: unvalidated address '${text}'`);
  return c;
}

function cidr(text: string): string {
  const c = canonicalCidr(text);
  if (c === null) throw new Error(`internal: unvalidated CIDR '${text}'`);
  return c;
}

function byName<T extends { metadata: { name: string } }>(a: T, b: T): number {
  return a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0;
}

export function buildCluster(l: Located<RawCluster>): ClusterDoc {
  const s = l.data.spec;
  return {
    apiVersion: 'gitlb/v1',
    kind: 'Cluster',
    metadata: { name: l.data.metadata.name },
    spec: {
      maglev: { tableSize: s.maglev.tableSize, seed: s.maglev.seed },
      conntrack: { maxEntries: s.conntrack.maxEntries, newFlowRate: s.conntrack.newFlowRate },
      status: { branch: s.status.branch },
      rollback: { policy: s.rollback.policy },
      ...(s.gue !== undefined ? { gue: { port: s.gue.port } } : {}),
      ...(s.health !== undefined
        ? { health: { mode: s.health.mode ?? 'local', ...(s.health.staleAfter !== undefined ? { staleAfterMs: durationMs(s.health.staleAfter) } : {}) } }
        : {}),
      ...(s.bgp !== undefined ? { bgp: buildClusterBgp(s.bgp) } : {}),
      ...(s.verification !== undefined
        ? {
            verification: {
              mode: s.verification.mode ?? 'off',
              formats: [...(s.verification.formats ?? ['ssh', 'openpgp'])].sort(),
              signersFile: s.verification.signersFile ?? 'trust/allowed_signers',
            },
          }
        : {}),
    },
    source: source(l),
  };
}

function buildClusterBgp(b: NonNullable<RawCluster['spec']['bgp']>): ClusterBgp {
  const communities = [...new Set(b.communities)]
    .map((c) => c.split(':').map(Number) as [number, number])
    .sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  return {
    localAsn: b.localAsn,
    holdTime: b.holdTime,
    keepaliveTime: b.keepaliveTime ?? Math.max(1, Math.floor(b.holdTime / 3)),
    communities,
    ...(b.med !== undefined ? { med: b.med } : {}),
  };
}

function buildNodeBgp(b: NonNullable<RawNode['spec']['bgp']>): NodeBgp {
  const peers: BgpPeer[] = b.peers.map((p) => ({ address: ip(p.address), asn: p.asn, ...(p.password !== undefined ? { password: p.password } : {}) }));
  return { routerId: ip(b.routerId), peers: peers.sort((x, y) => compareIps(x.address, y.address)) };
}

export function buildNode(l: Located<RawNode>): NodeDoc {
  const s = l.data.spec;
  return {
    apiVersion: 'gitlb/v1',
    kind: 'Node',
    metadata: { name: l.data.metadata.name },
    spec: {
      role: s.role,
      interface: s.interface,
      allowedVips: s.allowedVips.map(cidr),
      ...(s.snatAddress !== undefined ? { snatAddress: ip(s.snatAddress) } : {}),
      ...(s.peerKey !== undefined ? { peerKey: s.peerKey } : {}),
      ...(s.snatPorts !== undefined ? { snatPorts: { min: s.snatPorts.min, max: s.snatPorts.max } } : {}),
      addresses: s.addresses.map(ip),
      mtu: s.mtu,
      ...(s.state === 'drain' ? { state: 'drain' as const } : {}),
      ...(s.bgp !== undefined ? { bgp: buildNodeBgp(s.bgp) } : {}),
    },
    source: source(l),
  };
}

export function buildService(l: Located<RawService>): ServiceDoc {
  const s = l.data.spec;
  const hc = s.healthCheck;
  const firstPort = s.ports[0]!;
  const via = hc.type === 'none' ? 'real' : effectiveVia(s);
  const healthCheck: HealthCheckSpec = {
    type: hc.type,
    // via: vip probes the VIP's port as clients reach it; via: real the port the real serves
    ...(hc.type !== 'none' ? { port: hc.port ?? (via === 'vip' ? firstPort.port : firstPort.targetPort ?? firstPort.port) } : {}),
    ...(hc.type === 'http' ? { path: hc.path ?? DEFAULTS.healthCheck.httpPath } : {}),
    intervalMs: durationMs(hc.interval),
    timeoutMs: durationMs(hc.timeout),
    rise: hc.rise,
    fall: hc.fall,
    ...(hc.failMode !== undefined ? { failMode: hc.failMode } : {}),
    ...(hc.expectStatus !== undefined ? { expectStatus: { min: hc.expectStatus.min, max: hc.expectStatus.max } } : {}),
    // resolved here so render and plan show it: vip by default where it works (health-via.ts); absent means real
    ...(via === 'vip' ? { via: 'vip' as const } : {}),
  };
  return {
    apiVersion: 'gitlb/v1',
    kind: 'Service',
    metadata: { name: l.data.metadata.name },
    spec: {
      vip: ip(s.vip),
      ports: s.ports.map((p) => ({ port: p.port, protocol: p.protocol, ...(p.targetPort !== undefined ? { targetPort: p.targetPort } : {}) })),
      dispatch: { mode: s.dispatch.mode, ...(s.dispatch.encap !== undefined ? { encap: s.dispatch.encap } : {}) },
      hash: { sourcePort: s.hash.sourcePort },
      ...(s.sessionAffinity !== undefined && { sessionAffinity: { clientIP: { timeout: s.sessionAffinity.clientIP.timeout } } }),
      healthCheck,
      reals: s.reals.map((r) => ({ address: ip(r.address), weight: r.weight, state: r.state, ...(r.serverId !== undefined && { serverId: r.serverId }) })),
      ...(s.maglev?.tableSize !== undefined ? { maglev: { tableSize: s.maglev.tableSize } } : {}),
      // canonical and sorted, so file order and spelling never change the rendered state; empty = absent
      ...(s.sourceRanges?.length ? { sourceRanges: s.sourceRanges.map(cidr).sort(compareCidrs) } : {}),
      ...(s.quic?.connectionIdRouting ? { quic: { connectionIdRouting: true as const } } : {}),
    },
    source: source(l),
  };
}

export function buildModel(cluster: Located<RawCluster>, nodes: Located<RawNode>[], services: Located<RawService>[]): ConfigModel {
  return {
    cluster: buildCluster(cluster),
    nodes: nodes.map(buildNode).sort(byName),
    services: services.map(buildService).sort(byName),
  };
}
