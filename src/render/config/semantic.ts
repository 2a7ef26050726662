// Rules that span fields or documents and that JSON Schema cannot express. Each rule reports at the
// YAML node a person has to change. Runs only on documents that passed their schema.
import { DATAPLANE_LIMITS, LIMITS } from './limits.js';
import { checkLbCapacity } from './capacity.js';
import { DEFAULT_SNAT_PORTS } from '../ops.js';
import { DEFAULT_GUE_PORT } from '../model.js';
import { vipProbeUnsupported } from './health-via.js';
import { type AddressFacts, type Family, type IpAddress, type IpCidr, addressFacts, cidrContains, cidrHasHostBits, formatIp, parseCidr, parseIp, unusableAddressReason } from '../ip.js';
import { durationMs, type Located, type RawCluster, type RawNode, type RawService } from './raw.js';
import type { PathSegment, YamlDocument } from './yaml-source.js';
import type { Severity } from './diagnostics.js';

export type Emit = (
  severity: Severity,
  doc: YamlDocument,
  path: PathSegment[],
  message: string,
  part?: 'key' | 'value',
) => void;

export interface SemanticInput {
  cluster: Located<RawCluster> | null; // the one schema-valid Cluster, if there is exactly one
  nodes: Located<RawNode>[];
  services: Located<RawService>[];
}

const where = (d: YamlDocument, path: PathSegment[] = ['metadata', 'name']): string => {
  const p = d.locate(path);
  return `${d.file}:${p.line}:${p.col}`;
};

export function isPrime(n: number): boolean {
  if (!Number.isInteger(n) || n < 2) return false;
  for (let d = 2; d * d <= n; d++) if (n % d === 0) return false;
  return true;
}

function primeNear(n: number, step: 1 | -1): number {
  let p = n + step;
  while (p > 2 && !isPrime(p)) p += step;
  return p;
}

function checkTableSize(emit: Emit, doc: YamlDocument, path: PathSegment[], size: number): void {
  if (!isPrime(size)) {
    emit('error', doc, path, `${path.join('.')}: ${size} is not a prime (nearest primes: ${primeNear(size, -1)}, ${primeNear(size, 1)})`);
  }
}

function fam(f: Family): string {
  return f === 4 ? 'IPv4' : 'IPv6';
}

/** Reports duplicate metadata.name among documents of one kind. */
function checkUniqueNames<T extends { metadata: { name: string } }>(emit: Emit, kind: string, docs: Located<T>[]): void {
  const first = new Map<string, YamlDocument>();
  for (const { doc, data } of docs) {
    const prev = first.get(data.metadata.name);
    if (prev) emit('error', doc, ['metadata', 'name'], `duplicate ${kind} name '${data.metadata.name}' (first defined at ${where(prev)})`);
    else first.set(data.metadata.name, doc);
  }
}

function checkCount(emit: Emit, kind: string, docs: Located<unknown>[], max: number): void {
  if (docs.length > max) emit('error', docs[max]!.doc, ['kind'], `more than ${max} ${kind} documents; refused`);
}

interface LbNode {
  name: string;
  allowed: IpCidr[];
  snat: IpAddress | null;
  /** spec.addresses given: backends accept IP-in-IP only from lb node addresses (docs/backend.md) */
  hasAddresses: boolean;
}

export function checkSemantics(input: SemanticInput, emit: Emit): void {
  const { cluster, nodes, services } = input;
  if (cluster) checkTableSize(emit, cluster.doc, ['spec', 'maglev', 'tableSize'], cluster.data.spec.maglev.tableSize);
  if (cluster) checkVerification(emit, cluster);

  checkCount(emit, 'Node', nodes, LIMITS.maxNodes);
  checkCount(emit, 'Service', services, LIMITS.maxServices);
  checkUniqueNames(emit, 'Node', nodes);
  checkUniqueNames(emit, 'Service', services);

  const nodeAddressOwner = new Map<string, string>(); // canonical address -> node name
  const backendAddresses = new Set<string>();
  const lbNodes: LbNode[] = [];
  for (const { doc, data } of nodes) checkNode(emit, doc, data, nodeAddressOwner, backendAddresses, lbNodes);

  const listeners = new Map<string, { service: string; doc: YamlDocument; index: number }>();
  const vipOwner = new Map<string, string>(); // canonical VIP -> first service using it
  for (const { doc, data } of services) {
    checkService(emit, doc, data, { cluster, lbNodes, nodeAddressOwner, backendAddresses, listeners, vipOwner });
  }
  checkBgp(emit, cluster, nodes);
  if (services.length <= LIMITS.maxServices) checkLbCapacity(emit, nodes, services); // else already refused
  // A SNAT address that is also a VIP would make replies and new flows indistinguishable.
  for (const { doc, data } of nodes) {
    const snat = data.spec.snatAddress ? parseIp(data.spec.snatAddress) : null;
    const owner = snat ? vipOwner.get(formatIp(snat)) : undefined;
    if (owner) emit('error', doc, ['spec', 'snatAddress'], `spec.snatAddress: ${formatIp(snat!)} is also the VIP of service '${owner}'`);
    // Another node's address: this node would translate with it, and a survivor taking this node's SNAT address
    // over when it is lost would draw that node's traffic (its own address is fine: it is this node's to use).
    const node = snat ? nodeAddressOwner.get(formatIp(snat)) : undefined;
    if (node && node !== data.metadata.name)
      emit('error', doc, ['spec', 'snatAddress'], `spec.snatAddress: ${formatIp(snat!)} is an address of node '${node}'; give lb node '${data.metadata.name}' a SNAT address of its own`);
  }
  checkSharedSnat(emit, nodes);
  checkPeerKeys(emit, nodes);
}

/** A peer key names one node: shared, either node could sign as the other; on a backend it would serve nothing. */
function checkPeerKeys(emit: Emit, nodes: Located<RawNode>[]): void {
  const owner = new Map<string, string>(); // key blob -> node name
  for (const { doc, data } of nodes) {
    const key = data.spec.peerKey?.split(' ')[1];
    if (!key) continue;
    if (data.spec.role !== 'lb') emit('error', doc, ['spec', 'peerKey'], 'spec.peerKey: only lb nodes talk on the peer channel');
    const first = owner.get(key);
    if (first) emit('error', doc, ['spec', 'peerKey'], `spec.peerKey: the same key as node '${first}' (each lb node needs its own)`);
    else owner.set(key, data.metadata.name);
  }
}

/**
 * lb nodes that share a SNAT address allocate its ports each on its own: overlapping ranges would give two client
 * flows one (address, port) towards the same real.
 */
function checkSharedSnat(emit: Emit, nodes: Located<RawNode>[]): void {
  const seen = new Map<string, Array<{ name: string; min: number; max: number }>>();
  for (const { doc, data } of nodes) {
    const ip = data.spec.role === 'lb' && data.spec.snatAddress ? parseIp(data.spec.snatAddress) : null;
    if (!ip) continue;
    const addr = formatIp(ip);
    const min = data.spec.snatPorts?.min ?? DEFAULT_SNAT_PORTS.min;
    const max = data.spec.snatPorts?.max ?? DEFAULT_SNAT_PORTS.max;
    const others = seen.get(addr) ?? [];
    const clash = others.find((o) => min <= o.max && o.min <= max);
    if (clash) {
      emit('error', doc, ['spec', data.spec.snatPorts ? 'snatPorts' : 'snatAddress'],
        `spec.snatPorts: ${min}..${max} overlaps ${clash.min}..${clash.max} of lb node '${clash.name}', which has the same snatAddress ${addr}: nodes sharing a SNAT address need disjoint snatPorts`);
    }
    others.push({ name: data.metadata.name, min, max });
    seen.set(addr, others);
  }
}

/** AS_TRANS (RFC 6793) stands in for a 4-byte ASN on 2-byte speakers; no session may use it as its own. */
const AS_TRANS = 23456;

/** BGP settings: only lb nodes announce, a node's sessions need the Cluster's ASN, peers are unique and usable. */
function checkBgp(emit: Emit, cluster: Located<RawCluster> | null, nodes: Located<RawNode>[]): void {
  const cb = cluster?.data.spec.bgp;
  if (cluster && cb) {
    if (cb.localAsn === AS_TRANS) emit('error', cluster.doc, ['spec', 'bgp', 'localAsn'], `spec.bgp.localAsn: ${AS_TRANS} is AS_TRANS, not an AS number a speaker may use`);
    if (cb.keepaliveTime !== undefined && cb.keepaliveTime >= cb.holdTime)
      emit('error', cluster.doc, ['spec', 'bgp', 'keepaliveTime'], `spec.bgp.keepaliveTime: ${cb.keepaliveTime}s must be below spec.bgp.holdTime (${cb.holdTime}s)`);
    cb.communities.forEach((c, i) => {
      if (c.split(':').some((part) => Number(part) > 65535))
        emit('error', cluster.doc, ['spec', 'bgp', 'communities', i], `spec.bgp.communities[${i}]: '${c}' has a part above 65535`);
    });
  }
  const routerIds = new Map<string, string>();
  for (const { doc, data } of nodes) {
    const { spec } = data;
    if (spec.state === 'drain' && spec.role !== 'lb')
      emit('error', doc, ['spec', 'state'], `spec.state: only lb nodes can drain (this node's role is ${spec.role})`);
    const nb = spec.bgp;
    if (!nb) continue;
    if (spec.role !== 'lb') {
      emit('error', doc, ['spec', 'bgp'], `spec.bgp: only lb nodes announce VIPs (this node's role is ${spec.role})`, 'key');
      continue;
    }
    if (cluster && !cb) emit('error', doc, ['spec', 'bgp'], `spec.bgp: the Cluster has no spec.bgp (local AS number), so this node cannot speak BGP (${where(cluster.doc)})`, 'key');
    const rid = parseIp(nb.routerId);
    if (rid) {
      const owner = routerIds.get(formatIp(rid));
      if (owner) emit('error', doc, ['spec', 'bgp', 'routerId'], `spec.bgp.routerId: ${formatIp(rid)} is already the router id of node '${owner}'`);
      else routerIds.set(formatIp(rid), data.metadata.name);
      const why = unusableAddressReason(rid);
      if (why) emit('error', doc, ['spec', 'bgp', 'routerId'], `spec.bgp.routerId: ${nb.routerId} ${why}`);
    }
    const own = new Set(spec.addresses.map((a) => canonicalOrSelf(a)));
    const seen = new Map<string, number>();
    nb.peers.forEach((p, i) => {
      const path: PathSegment[] = ['spec', 'bgp', 'peers', i];
      const a = checkAddress(emit, doc, [...path, 'address'], p.address);
      if (p.asn === AS_TRANS) emit('error', doc, [...path, 'asn'], `${label([...path, 'asn'])}: ${AS_TRANS} is AS_TRANS, not a peer's AS number`);
      if (!a) return;
      const canon = formatIp(a);
      const first = seen.get(canon);
      if (first !== undefined) emit('error', doc, [...path, 'address'], `${label([...path, 'address'])}: ${canon} is already spec.bgp.peers[${first}]`);
      else seen.set(canon, i);
      if (own.has(canon)) emit('error', doc, [...path, 'address'], `${label([...path, 'address'])}: ${canon} is one of this node's own addresses`);
      if (!spec.addresses.some((x) => parseIp(x)?.family === a.family))
        emit('warning', doc, [...path, 'address'], `${label([...path, 'address'])}: the node has no ${fam(a.family)} address in spec.addresses to reach this peer from`);
      if (spec.allowedVips.every((c) => parseCidr(c)?.family !== a.family))
        emit('warning', doc, [...path, 'address'], `${label([...path, 'address'])}: no ${fam(a.family)} range in spec.allowedVips, so nothing is announced to this peer`);
    });
  }
}

function canonicalOrSelf(text: string): string {
  const a = parseIp(text);
  return a ? formatIp(a) : text;
}

/** The signers list is read as a key list, never as config, and never from the nodes' own status files. */
function checkVerification(emit: Emit, cluster: Located<RawCluster>): void {
  const file = cluster.data.spec.verification?.signersFile;
  if (file === undefined) return;
  const path: PathSegment[] = ['spec', 'verification', 'signersFile'];
  // The schema pattern already rules out absolute paths, '..' and hidden parts.
  if (/\.ya?ml$/.test(file)) emit('error', cluster.doc, path, `${label(path)}: '${file}' is a YAML path and would be read as config; use a name such as trust/allowed_signers`);
  else if (file.split('/')[0] === 'status') emit('error', cluster.doc, path, `${label(path)}: '${file}' is under status/, which nodes write`);
}

function checkAddress(emit: Emit, doc: YamlDocument, path: PathSegment[], text: string): IpAddress | null {
  return checkAddressFacts(emit, doc, path, text) ? parseIp(text) : null;
}

/** checkAddress for callers that need only the family and canonical text (the reals: 100,000 at scale). */
function checkAddressFacts(emit: Emit, doc: YamlDocument, path: PathSegment[], text: string): AddressFacts | null {
  const a = addressFacts(text);
  if (!a) {
    emit('error', doc, path, `${label(path)}: '${text}' is not an IPv4 or IPv6 address`);
    return null;
  }
  if (a.unusable) {
    emit('error', doc, path, `${label(path)}: ${text} ${a.unusable}`);
    return null;
  }
  return a;
}

function label(path: PathSegment[]): string {
  let s = '';
  for (const seg of path) s += typeof seg === 'number' ? `[${seg}]` : s === '' ? seg : `.${seg}`;
  return s;
}

function checkNode(
  emit: Emit,
  doc: YamlDocument,
  node: RawNode,
  nodeAddressOwner: Map<string, string>,
  backendAddresses: Set<string>,
  lbNodes: LbNode[],
): void {
  const { spec } = node;
  const name = node.metadata.name;
  const allowed: IpCidr[] = [];
  spec.allowedVips.forEach((text, i) => {
    const c = parseCidr(text);
    if (!c) return; // the schema format already reported it
    if (cidrHasHostBits(text)) {
      emit('warning', doc, ['spec', 'allowedVips', i], `spec.allowedVips[${i}]: ${text} has host bits set; it is read as ${formatIp(c)}/${c.prefix}`);
    }
    allowed.push(c);
  });
  const own = new Set<string>();
  let v4 = 0;
  spec.addresses.forEach((text, i) => {
    const a = checkAddress(emit, doc, ['spec', 'addresses', i], text);
    if (!a) return;
    const canon = formatIp(a);
    // An lb node's addresses are the outer sources of dsr-ipip, and lb_config holds 8 IPv4 ones: a 9th could
    // never be applied (the node would report it as a difference after every apply), so it is refused here.
    if (spec.role === 'lb' && a.family === 4 && ++v4 === DATAPLANE_LIMITS.lbSrc4 + 1)
      emit('error', doc, ['spec', 'addresses', i], `spec.addresses[${i}]: ${canon} is the ${v4}th IPv4 address of lb node '${name}'; ` +
        `an lb node uses at most ${DATAPLANE_LIMITS.lbSrc4} (the dsr-ipip outer sources, lb_config holds ${DATAPLANE_LIMITS.lbSrc4})`);
    const owner = nodeAddressOwner.get(canon);
    if (own.has(canon)) emit('error', doc, ['spec', 'addresses', i], `spec.addresses[${i}]: ${canon} is listed twice`);
    else if (owner) emit('error', doc, ['spec', 'addresses', i], `spec.addresses[${i}]: ${canon} is already an address of node '${owner}'`);
    own.add(canon);
    nodeAddressOwner.set(canon, owner ?? name);
    if (spec.role === 'backend') backendAddresses.add(canon);
  });
  let snat: IpAddress | null = null;
  if (spec.snatAddress !== undefined) {
    snat = checkAddress(emit, doc, ['spec', 'snatAddress'], spec.snatAddress);
    if (spec.role !== 'lb') emit('error', doc, ['spec', 'snatAddress'], `spec.snatAddress: only lb nodes use a SNAT address (this node's role is ${spec.role})`, 'key');
  }
  if (spec.snatPorts !== undefined && spec.snatPorts.min > spec.snatPorts.max)
    emit('error', doc, ['spec', 'snatPorts'], `spec.snatPorts: min ${spec.snatPorts.min} is above max ${spec.snatPorts.max}`);
  if (spec.role === 'lb') {
    if (spec.allowedVips.length === 0) emit('warning', doc, ['spec', 'role'], `lb node '${name}' has no spec.allowedVips, so it serves no VIP`);
    lbNodes.push({ name, allowed, snat, hasAddresses: spec.addresses.length > 0 });
  }
}

/**
 * spec.sourceRanges: prefixes of the VIP's family (a client of the other family can never reach the VIP, so such an
 * entry is a mistake), without host bits (refused, not masked: 192.0.2.1/24 may as well have meant /32, and a silent
 * /24 would let 255 more clients in), listed once. The count is capped by the schema (maxItems).
 */
function checkSourceRanges(emit: Emit, doc: YamlDocument, ranges: string[], vip: IpAddress | null): void {
  const seen = new Map<string, number>();
  ranges.forEach((text, i) => {
    const path: PathSegment[] = ['spec', 'sourceRanges', i];
    const c = parseCidr(text);
    if (!c) return; // the schema format already reported it
    const canon = `${formatIp(c)}/${c.prefix}`;
    if (cidrHasHostBits(text)) {
      emit('error', doc, path, `${label(path)}: ${text} has host bits set; write the network ${canon}, or a /${c.family === 4 ? 32 : 128} for one client`);
      return;
    }
    if (vip && c.family !== vip.family) {
      emit('error', doc, path, `${label(path)}: ${text} is ${fam(c.family)}, but the VIP ${formatIp(vip)} is ${fam(vip.family)}; only ${fam(vip.family)} clients reach it`);
      return;
    }
    const first = seen.get(canon);
    if (first !== undefined) emit('error', doc, path, `${label(path)}: ${canon} is already spec.sourceRanges[${first}]`);
    else seen.set(canon, i);
  });
}

/**
 * QUIC connection-ID routing: it routes the DSR listeners' UDP packets, so a service that translates its UDP (snat,
 * hybrid) cannot have it; a server id names one real of the service, so it is listed once. Server ids without the
 * routing, or the routing without a UDP port or a server id, do nothing: warnings.
 */
function checkQuic(emit: Emit, doc: YamlDocument, spec: RawService['spec']): void {
  const routing = spec.quic?.connectionIdRouting === true;
  const seen = new Map<number, number>();
  spec.reals.forEach((r, i) => {
    if (r.serverId === undefined) return;
    const path: PathSegment[] = ['spec', 'reals', i, 'serverId'];
    const first = seen.get(r.serverId);
    if (first !== undefined) emit('error', doc, path, `${label(path)}: server id ${r.serverId} is already spec.reals[${first}].serverId (a server id names one real of the service)`);
    else seen.set(r.serverId, i);
  });
  const path: PathSegment[] = ['spec', 'quic', 'connectionIdRouting'];
  if (!routing) {
    const i = spec.reals.findIndex((r) => r.serverId !== undefined);
    if (i >= 0) emit('warning', doc, ['spec', 'reals', i, 'serverId'], `spec.reals[${i}].serverId: has no effect without spec.quic.connectionIdRouting: true`);
    return;
  }
  if (spec.dispatch.mode !== 'dsr') {
    emit('error', doc, path, `${label(path)}: needs dispatch mode dsr (mode ${spec.dispatch.mode} translates UDP per client address and port, which a migrated QUIC connection changes)`);
    return;
  }
  if (!spec.ports.some((p) => p.protocol === 'UDP')) emit('warning', doc, path, `${label(path)}: the service has no UDP port, so no packet is routed by connection ID`);
  else if (seen.size === 0) emit('warning', doc, path, `${label(path)}: no real has a spec.reals[].serverId, so no packet is routed by connection ID`);
}

interface ServiceContext {
  cluster: Located<RawCluster> | null;
  lbNodes: LbNode[];
  nodeAddressOwner: Map<string, string>;
  backendAddresses: Set<string>;
  listeners: Map<string, { service: string; doc: YamlDocument; index: number }>;
  vipOwner: Map<string, string>;
}

/** Service documents written without `healthCheck` (noted before the schema's defaults fill it in as type none). */
const withoutHealthCheck = new WeakSet<object>();

/**
 * Without a health check a dead real keeps its share of new connections until someone edits the config: each such
 * service is a warning (an explicit `type: none` is a choice and is not). Called for configs without errors.
 */
export function warnMissingHealthChecks(services: readonly Located<RawService>[], emit: Emit): void {
  for (const { doc } of services) {
    if (withoutHealthCheck.has(doc.data as object))
      emit('warning', doc, ['spec'], `spec.healthCheck: none given, so no real of this service is checked and a dead one keeps receiving new connections; add healthCheck: { type: tcp } (a TCP connect to the target port every 2s) or say type: none`, 'key');
  }
}

export function noteMissingHealthCheck(kind: string, data: unknown): void {
  if (kind !== 'Service' || typeof data !== 'object' || data === null) return;
  const spec = (data as { spec?: unknown }).spec;
  if (typeof spec === 'object' && spec !== null && (spec as { healthCheck?: unknown }).healthCheck === undefined) withoutHealthCheck.add(data);
}

function checkService(emit: Emit, doc: YamlDocument, svc: RawService, ctx: ServiceContext): void {
  const { spec } = svc;
  const name = svc.metadata.name;
  const { mode, encap } = spec.dispatch;
  const vip = checkAddress(emit, doc, ['spec', 'vip'], spec.vip);

  // Dispatch: encap belongs to the DSR part of a service.
  if ((mode === 'dsr' || mode === 'hybrid') && encap === undefined) {
    emit('error', doc, ['spec', 'dispatch'], `spec.dispatch: mode ${mode} needs spec.dispatch.encap (l2, ipip, ipopt or gue)`, 'key');
  }
  if (mode === 'snat' && encap !== undefined) {
    emit('error', doc, ['spec', 'dispatch', 'encap'], `spec.dispatch.encap: not allowed with mode snat (the LB rewrites addresses; nothing is encapsulated)`, 'key');
  }

  // Listeners: VIP + port + protocol is unique across the whole config.
  spec.ports.forEach((p, i) => {
    const dsrPort = mode === 'dsr' || (mode === 'hybrid' && p.protocol === 'TCP');
    if (dsrPort && (encap === 'l2' || encap === 'ipip' || encap === 'gue') && p.targetPort !== undefined && p.targetPort !== p.port) {
      emit(
        'error',
        doc,
        ['spec', 'ports', i, 'targetPort'],
        `spec.ports[${i}].targetPort: dsr with encap ${encap} delivers the client's packet unchanged, so targetPort (${p.targetPort}) must equal port (${p.port}); use encap ipopt or mode snat to change ports`,
      );
    }
    if (!vip) return;
    const key = `${formatIp(vip)}|${p.port}|${p.protocol}`;
    const prev = ctx.listeners.get(key);
    if (prev) {
      const what = `${fam(vip.family) === 'IPv6' ? `[${formatIp(vip)}]` : formatIp(vip)}:${p.port}/${p.protocol}`;
      const other = prev.service === name ? 'this service' : `service '${prev.service}'`;
      emit('error', doc, ['spec', 'ports', i], `spec.ports[${i}]: ${what} is already served by ${other} (${where(prev.doc, ['spec', 'ports', prev.index])})`);
      // Which claim is the new one cannot be told from one tree (files are read in name order, not in the order they
      // were added), so both places get the error: a pull request's annotation lands on the file it adds or edits,
      // whichever of the two that is, and neither claimant is blamed alone.
      const here = prev.service === name ? 'this service' : `service '${name}'`;
      emit('error', prev.doc, ['spec', 'ports', prev.index], `spec.ports[${prev.index}]: ${what} is also claimed by ${here} (${where(doc, ['spec', 'ports', i])})`);
    } else {
      ctx.listeners.set(key, { service: name, doc, index: i });
    }
  });

  if (vip) {
    const canon = formatIp(vip);
    if (!ctx.vipOwner.has(canon)) ctx.vipOwner.set(canon, name);
    const owner = ctx.nodeAddressOwner.get(canon);
    if (owner) emit('error', doc, ['spec', 'vip'], `spec.vip: ${canon} is an address of node '${owner}', not a free virtual IP`);
    const servingLbs = ctx.lbNodes.filter((n) => n.allowed.some((c) => cidrContains(c, vip)));
    if (servingLbs.length === 0) {
      emit('error', doc, ['spec', 'vip'], `spec.vip: ${canon} is outside spec.allowedVips of every lb node, so no node would serve it`);
    }
    if (mode !== 'snat' && (encap === 'ipip' || encap === 'gue')) {
      const what = encap === 'ipip' ? 'IP-in-IP' : 'GUE';
      for (const n of servingLbs.filter((x) => !x.hasAddresses))
        emit('warning', doc, ['spec', 'dispatch', 'encap'], `spec.dispatch.encap: lb node '${n.name}' may serve ${canon} but has no spec.addresses; backends decapsulate ${what} only from lb node addresses, so its tunnels will be refused`);
    }
    // backends take UDP at the cluster's GUE port as tunnels (docs/backend.md): a UDP service on it could have a
    // datagram that looks like GUE decapsulated or refused on its way to the real
    const guePort = ctx.cluster?.data.spec.gue?.port ?? DEFAULT_GUE_PORT;
    spec.ports.forEach((p, i) => {
      if (p.protocol === 'UDP' && (p.port === guePort || p.targetPort === guePort))
        emit('error', doc, ['spec', 'ports', i], `spec.ports[${i}]: UDP port ${guePort} is the cluster's GUE port (Cluster spec.gue.port), which backends decapsulate; use another port or move spec.gue.port`);
    });
    if ((mode === 'snat' || mode === 'hybrid') && servingLbs.length > 0) {
      const withSnat = servingLbs.filter((n) => n.snat?.family === vip.family);
      if (withSnat.length === 0) {
        emit(
          'error',
          doc,
          ['spec', 'dispatch', 'mode'],
          `spec.dispatch.mode: ${mode} needs an ${fam(vip.family)} spec.snatAddress on the lb nodes serving ${canon} (${servingLbs.map((n) => n.name).join(', ')}), and none has one`,
        );
      } else {
        for (const n of servingLbs.filter((x) => !withSnat.includes(x))) {
          emit('warning', doc, ['spec', 'dispatch', 'mode'], `spec.dispatch.mode: lb node '${n.name}' may serve ${canon} but has no ${fam(vip.family)} snatAddress; it will not forward this service's ${mode === 'snat' ? '' : 'UDP '}traffic`);
        }
      }
    }
  }

  // Reals.
  const seen = new Map<string, number>();
  const vipCanon = vip ? formatIp(vip) : null;
  let usable = 0;
  spec.reals.forEach((r, i) => {
    const path: PathSegment[] = ['spec', 'reals', i, 'address'];
    const a = checkAddressFacts(emit, doc, path, r.address);
    if (r.state !== 'disabled') usable++;
    if (!a) return;
    const canon = a.canonical;
    const first = seen.get(canon);
    if (first !== undefined) {
      emit('error', doc, path, `spec.reals[${i}].address: ${canon} is already listed as spec.reals[${first}]`);
      return;
    }
    seen.set(canon, i);
    if (vip && canon === vipCanon) emit('error', doc, path, `spec.reals[${i}].address: a real cannot be the VIP itself`);
    if (vip && a.family !== vip.family) {
      const how = mode === 'snat' ? 'snat (no NAT46/NAT64)' : `${mode} with encap ${encap ?? '?'}`;
      emit('error', doc, path, `spec.reals[${i}].address: ${fam(a.family)} real behind an ${fam(vip.family)} VIP; ${how} cannot carry mixed address families`);
    }
    if (mode !== 'snat' && ctx.backendAddresses.size > 0 && !ctx.backendAddresses.has(canon)) {
      emit('warning', doc, path, `spec.reals[${i}].address: ${canon} is not an address of any backend Node, so gitlb will not set up the DSR side (VIP, decapsulation) on it`);
    }
  });
  if (spec.reals.length === 0) {
    emit('warning', doc, ['spec', 'reals'], `spec.reals: the service has no reals; new flows to it are dropped`, 'key');
  } else if (usable === 0) {
    emit('warning', doc, ['spec', 'reals'], `spec.reals: all reals are disabled; new flows to this service are dropped`, 'key');
  }

  if (spec.sourceRanges?.length) checkSourceRanges(emit, doc, spec.sourceRanges, vip);
  checkQuic(emit, doc, spec);

  // Maglev table.
  const override = spec.maglev?.tableSize;
  if (override !== undefined) checkTableSize(emit, doc, ['spec', 'maglev', 'tableSize'], override);
  const tableSize = override ?? ctx.cluster?.data.spec.maglev.tableSize;
  if (tableSize !== undefined && usable > 0) {
    const path: PathSegment[] = override !== undefined ? ['spec', 'maglev', 'tableSize'] : ['spec', 'reals'];
    const part = override !== undefined ? 'value' : 'key';
    const source = override !== undefined ? 'spec.maglev.tableSize' : 'the Cluster table size';
    if (usable > tableSize) {
      emit('error', doc, path, `${source} ${tableSize} is smaller than the ${usable} reals of this service`, part);
    } else if (tableSize < 100 * usable) {
      emit(
        'warning',
        doc,
        path,
        `${source} ${tableSize} is below 100 x ${usable} reals (${100 * usable}); balance between reals degrades — set spec.maglev.tableSize to a prime of at least ${100 * usable}`,
        part,
      );
    }
  }

  // Health check.
  const hc = spec.healthCheck;
  if (hc.type !== 'http' && hc.path !== undefined) {
    emit('error', doc, ['spec', 'healthCheck', 'path'], `spec.healthCheck.path: only applies to type http (type is ${hc.type})`, 'key');
  }
  if (hc.type === 'none' && hc.port !== undefined) {
    emit('error', doc, ['spec', 'healthCheck', 'port'], `spec.healthCheck.port: no check is run with type none; set type tcp or http`, 'key');
  }
  if (hc.via === 'vip') {
    const why = vipProbeUnsupported(spec);
    if (why) emit('error', doc, ['spec', 'healthCheck', 'via'], `spec.healthCheck.via: vip: ${why}`);
  }
  const interval = durationMs(hc.interval);
  const timeout = durationMs(hc.timeout);
  if (interval < 100 || interval > 600_000) {
    emit('error', doc, ['spec', 'healthCheck', 'interval'], `spec.healthCheck.interval: must be between 100ms and 10m (got ${hc.interval})`);
  }
  if (timeout < 10 || timeout > 60_000) {
    emit('error', doc, ['spec', 'healthCheck', 'timeout'], `spec.healthCheck.timeout: must be between 10ms and 60s (got ${hc.timeout})`);
  } else if (timeout > interval) {
    emit('error', doc, ['spec', 'healthCheck', 'timeout'], `spec.healthCheck.timeout: ${hc.timeout} is longer than the interval ${hc.interval}`);
  }
}
