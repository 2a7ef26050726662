// From a validated config revision and a node name, the node's complete desired data-plane state
// (src/render/state.ts, documented in docs/render.md). Pure: same model, node and health => same state, byte for byte.
import { GitlbError } from '../errors.js';
import { DEFAULT_GUE_PORT, type ConfigModel, type NodeDoc, type Protocol, type ServiceDoc } from './model.js';
import type { DesiredQuicServer, DesiredReal, DesiredService, DesiredServiceReal, DesiredState, DesiredVip, Forwarding } from './state.js';
import { assignStableIds } from './ids.js';
import { cidrTextContains, compareIps, ipFamily } from './ip.js';
import { decodeBase64Strict } from './maglev.js';
import { buildServiceTable, type HealthView } from './service-table.js';

export type { HealthView } from './service-table.js';

/** How a listener is forwarded: `hybrid` is DSR for TCP and SNAT for UDP. DSR without an encap means `l2`. */
export function resolveForwarding(svc: ServiceDoc, protocol: Protocol): Forwarding {
  const { mode, encap } = svc.spec.dispatch;
  const dsr: Forwarding = `dsr-${encap ?? 'l2'}`;
  if (mode === 'snat') return 'snat';
  if (mode === 'dsr') return dsr;
  return protocol === 'TCP' ? dsr : 'snat';
}

/** The data plane's flow-hash seed: bytes 4..7 of the decoded Cluster maglev.seed, big-endian (Cilium's jhash seed). */
export function hashSeedFromBase64(seed: string): number {
  const b = decodeBase64Strict(seed, 'maglev.seed');
  return ((b[4]! << 24) | (b[5]! << 16) | (b[6]! << 8) | b[7]!) >>> 0;
}

/** Stable ids of every service name and every real address in the revision (not only this node's). */
export function modelIds(model: ConfigModel): { serviceIds: Map<string, number>; realIds: Map<string, number> } {
  return {
    serviceIds: assignStableIds('service', model.services.map((s) => s.metadata.name)),
    realIds: assignStableIds('real', model.services.flatMap((s) => s.spec.reals.map((r) => r.address))),
  };
}

function servicesForNode(model: ConfigModel, node: NodeDoc): ServiceDoc[] {
  if (node.spec.role === 'lb') {
    return model.services.filter((s) => node.spec.allowedVips.some((cidr) => cidrTextContains(cidr, s.spec.vip)));
  }
  const own = new Set(node.spec.addresses);
  return model.services.filter((s) => s.spec.reals.some((r) => r.state !== 'disabled' && own.has(r.address)));
}

/** The addresses of every lb node: the only outer sources a backend decapsulates IP-in-IP from. */
function lbNodeAddresses(model: ConfigModel): string[] {
  return [...new Set(model.nodes.filter((n) => n.spec.role === 'lb').flatMap((n) => n.spec.addresses))].sort(compareIps);
}

function compareVips(a: DesiredVip, b: DesiredVip): number {
  return compareIps(a.vip, b.vip) || a.port - b.port || (a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0);
}

/**
 * The QUIC server ids a service routes by: those of its reals that are listed (not disabled) and healthy, drained
 * ones included (a drained real keeps its established connections, and a QUIC connection is established by its
 * connection ID, not its client address), sorted by server id.
 */
export function quicServers(spec: ServiceDoc['spec'], reals: readonly DesiredServiceReal[]): DesiredQuicServer[] {
  const ids = new Map<string, number>();
  for (const r of spec.reals) if (r.serverId !== undefined) ids.set(r.address, r.serverId);
  const out: DesiredQuicServer[] = [];
  for (const r of reals) {
    const serverId = ids.get(r.address);
    if (serverId !== undefined && r.healthy) out.push({ serverId, realId: r.realId });
  }
  return out.sort((a, b) => a.serverId - b.serverId);
}

/** One service of a desired state: its Maglev table under `health` and what the data plane needs of its spec. */
function renderService(cluster: ConfigModel['cluster']['spec'], svc: ServiceDoc, id: number, realIds: ReadonlyMap<string, number>,
  health: HealthView | undefined): DesiredService {
  const table = buildServiceTable(cluster, svc, realIds, health);
  const spec = svc.spec;
  return {
    id,
    name: svc.metadata.name,
    mode: spec.dispatch.mode,
    ...(spec.dispatch.mode !== 'snat' && { encap: spec.dispatch.encap ?? 'l2' }),
    tableSize: table.tableSize,
    ring: table.ring,
    digest: table.digest,
    reals: table.reals,
    healthCheck: spec.healthCheck,
    ...(spec.sourceRanges && { sourceRanges: [...spec.sourceRanges] }),
    ...(spec.sessionAffinity && { sessionAffinity: { timeoutS: spec.sessionAffinity.clientIP.timeout } }),
    ...(spec.quic && spec.dispatch.mode === 'dsr' && { quic: { servers: quicServers(spec, table.reals) } }),
  };
}

/**
 * `base`, a render of `model` for its node, with the services named in `names` rendered again under `health`. Health
 * changes only a service's table (which reals get entries, and their `healthy` flags): its reals, listeners and
 * every other service stay. So when only those services' health changed since `base` was rendered, this equals
 * renderDesiredState(model, base.node, health) without visiting the others (the health loop's re-render of the
 * services a HealthChange names; src/reconciler/loops/health-loop.ts).
 */
export function rerenderServices(model: ConfigModel, base: DesiredState, health: HealthView | undefined, names: ReadonlySet<string>): DesiredState {
  const docs = new Map(model.services.map((s) => [s.metadata.name, s]));
  const services = base.services.map((s) => {
    const svc = names.has(s.name) ? docs.get(s.name) : undefined;
    if (!svc) return s;
    // a table lists every real that is not disabled, healthy or not: the ids of the base's list are the ones it needs
    return renderService(model.cluster.spec, svc, s.id, new Map(s.reals.map((r) => [r.address, r.realId])), health);
  });
  return { ...base, services };
}

export function renderDesiredState(model: ConfigModel, nodeName: string, health?: HealthView): DesiredState {
  const node = model.nodes.find((n) => n.metadata.name === nodeName);
  if (!node) {
    const known = model.nodes.map((n) => n.metadata.name).join(', ') || 'none';
    throw new GitlbError('RenderFailed', `node '${nodeName}' is not defined in the config (known nodes: ${known})`, { field: 'node' });
  }
  const cluster = model.cluster.spec;
  const guePort = cluster.gue?.port ?? DEFAULT_GUE_PORT;
  const { serviceIds, realIds } = modelIds(model);

  const services: DesiredService[] = [];
  const vips: DesiredVip[] = [];
  const reals = new Map<number, DesiredReal>();
  const localVips = new Set<string>();
  for (const svc of servicesForNode(model, node)) {
    const id = serviceIds.get(svc.metadata.name)!;
    const service = renderService(cluster, svc, id, realIds, health);
    const spec = svc.spec;
    services.push(service);
    for (const r of service.reals) if (!reals.has(r.realId)) reals.set(r.realId, { id: r.realId, address: r.address, family: ipFamily(r.address) });
    for (const p of spec.ports) {
      const forwarding = resolveForwarding(svc, p.protocol);
      vips.push({
        vip: spec.vip,
        family: ipFamily(spec.vip),
        port: p.port,
        protocol: p.protocol,
        targetPort: p.targetPort ?? p.port,
        ...(forwarding === 'dsr-gue' && { guePort }),
        serviceId: id,
        forwarding,
        hashSourcePort: spec.hash.sourcePort,
        ...(spec.sourceRanges && { sourceRanges: true as const }),
        ...(spec.sessionAffinity && { affinityTimeoutS: spec.sessionAffinity.clientIP.timeout }),
        ...(spec.quic && forwarding !== 'snat' && p.protocol === 'UDP' && { quic: true as const }),
      });
      // A backend terminates l2, ipip and gue DSR traffic addressed to the VIP itself, so it must own the VIP. It
      // owns it for ipopt too: lb nodes may still (or already) send another encap while an encap change rolls out.
      if (forwarding !== 'snat') localVips.add(spec.vip);
    }
  }

  return {
    node: node.metadata.name,
    role: node.spec.role,
    interface: node.spec.interface,
    mtu: node.spec.mtu,
    ...(node.spec.snatAddress !== undefined && { snatAddress: node.spec.snatAddress }),
    ...(node.spec.snatPorts !== undefined && { snatPorts: { ...node.spec.snatPorts } }),
    // The node's own addresses (outer source of dsr-ipip on lb nodes), sorted so YAML order does not matter.
    ...(node.spec.addresses.length > 0 && { addresses: [...node.spec.addresses].sort(compareIps) }),
    ...(node.spec.role === 'backend' && { guePort, lbAddresses: lbNodeAddresses(model) }),
    hashSeed: hashSeedFromBase64(cluster.maglev.seed),
    conntrackMaxEntries: cluster.conntrack.maxEntries,
    ...(cluster.conntrack.newFlowRate > 0 && { conntrackNewFlowRate: cluster.conntrack.newFlowRate }),
    reals: [...reals.values()].sort((a, b) => a.id - b.id),
    services: services.sort((a, b) => a.id - b.id),
    vips: vips.sort(compareVips),
    localVips: node.spec.role === 'backend' ? [...localVips].sort(compareIps) : [],
  };
}

/** JSON value with object keys sorted at every level, undefined members dropped; typed arrays become number arrays. */
export function sortedJsonValue(value: unknown): unknown {
  if (value instanceof Uint32Array) return Array.from(value);
  if (Array.isArray(value)) return value.map(sortedJsonValue);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[key];
      if (v !== undefined) out[key] = sortedJsonValue(v);
    }
    return out;
  }
  return value;
}

/**
 * Stable JSON of a desired state: keys sorted at every level, two-space indent, trailing newline. Rings are
 * included (as number arrays) only with `tables: true`; their digests always are.
 */
export function desiredStateToJson(s: DesiredState, opts: { tables?: boolean } = {}): string {
  const shaped = {
    ...s,
    services: s.services.map((svc) => {
      if (opts.tables) return svc;
      const { ring: _ring, ...rest } = svc;
      return rest;
    }),
  };
  return JSON.stringify(sortedJsonValue(shaped), null, 2) + '\n';
}

/** Inverse of desiredStateToJson for states written with `tables: true` (used by tools and tests). */
export function desiredStateFromJson(text: string): DesiredState {
  const raw = JSON.parse(text) as DesiredState & { services: (Omit<DesiredService, 'ring'> & { ring?: number[] })[] };
  return {
    ...raw,
    services: raw.services.map((svc) => {
      if (!svc.ring) throw new Error(`service ${svc.name}: JSON has no ring (render with tables)`);
      return { ...svc, ring: Uint32Array.from(svc.ring) };
    }),
  };
}
