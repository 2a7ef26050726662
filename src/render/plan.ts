// What a change of config does to traffic: a pure diff of two validated revisions (docs/render.md, `gitlb plan`).
// Tables are compared as every node would build them, all reals assumed healthy: the share of table entries whose
// backend changes is the share of new connections that will land on a different real.
import type { ConfigModel, ServiceDoc, NodeDoc } from './model.js';
import type { Forwarding } from './state.js';
import { modelIds, resolveForwarding } from './desired.js';
import { buildServiceTable, identityPort, serviceTableSize, type ServiceTable } from './service-table.js';
import { cidrContains, parseCidr } from './ip.js';

/** Same shape as src/render/config's Diagnostic (kept structural so plan does not depend on the parser). */
export interface PlanDiagnostic {
  severity: 'error' | 'warning' | 'note';
  file: string;
  line: number;
  col: number;
  message: string;
}

export type ChangeKind = 'added' | 'removed' | 'changed' | 'unchanged';

export interface FieldChange {
  field: string;
  before: string;
  after: string;
}

export interface RealPlan {
  address: string;
  change: ChangeKind;
  before?: { weight: number; state: string };
  after?: { weight: number; state: string };
  /** Table entries owned before / after, and the corresponding shares of the table (0..1). */
  entriesBefore: number;
  entriesAfter: number;
  shareBefore: number;
  shareAfter: number;
}

export interface ServicePlan {
  name: string;
  change: ChangeKind;
  vip: string; // head's VIP, or base's when removed
  fields: FieldChange[]; // vip, ports, dispatch, hash, session affinity, health check, table size, identity port
  reals: RealPlan[]; // every real of either revision, sorted by address; `unchanged` ones included
  tableSizeBefore?: number;
  tableSizeAfter?: number;
  digestBefore?: string;
  digestAfter?: string;
  /** Entries whose backend differs (by address) between the two tables; all of them when the size changes. */
  movedEntries: number;
  /** movedEntries / table size (of the head, or the base when removed): share of new flows that move. */
  movedShare: number;
  /** Sentences saying why flows move when the reason is not visible in the reals (e.g. a new identity port). */
  explanations: string[];
  /** Risks of the rollout itself that no share shows: dispatch mode and encap changes (see dispatchWarnings). */
  warnings: string[];
}

export interface NodePlan {
  name: string;
  change: ChangeKind;
  fields: FieldChange[];
}

export interface Plan {
  /** false when the head revision does not validate: then only `diagnostics` is meaningful. */
  headValid: boolean;
  baseValid: boolean;
  /** Diagnostics (errors and warnings) of the head revision. */
  diagnostics: PlanDiagnostic[];
  cluster: FieldChange[];
  nodes: NodePlan[]; // changed/added/removed only
  services: ServicePlan[]; // changed/added/removed only, sorted by name
  unchangedServices: number;
  changed: boolean;
}

const show = (v: unknown): string => (v === undefined ? '-' : typeof v === 'string' ? v : JSON.stringify(v));

function diffFields(pairs: [string, unknown, unknown][]): FieldChange[] {
  const out: FieldChange[] = [];
  for (const [field, before, after] of pairs) {
    const b = show(before);
    const a = show(after);
    if (b !== a) out.push({ field, before: b, after: a });
  }
  return out;
}

/** Leaves of a plain object as dotted paths (lists are one leaf): a nested change reads as one field. */
function leaves(prefix: string, value: unknown, out: Map<string, unknown>): Map<string, unknown> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) leaves(`${prefix}.${k}`, v, out);
  } else if (value !== undefined) {
    out.set(prefix, value);
  }
  return out;
}

/** [field, before, after] for every leaf of either object, sorted by path; the whole object when one side lacks it. */
function leafPairs(prefix: string, before: unknown, after: unknown): [string, unknown, unknown][] {
  if (before === undefined || after === undefined) return [[prefix, before, after]];
  const b = leaves(prefix, before, new Map());
  const a = leaves(prefix, after, new Map());
  return [...new Set([...b.keys(), ...a.keys()])].sort().map((k) => [k, b.get(k), a.get(k)]);
}

const portsText = (s: ServiceDoc) =>
  [...s.spec.ports]
    .map((p) => `${p.port}/${p.protocol}${p.targetPort !== undefined && p.targetPort !== p.port ? `->${p.targetPort}` : ''}`)
    .sort()
    .join(',');

const rangesText = (s: ServiceDoc) => s.spec.sourceRanges?.join(',') ?? 'any client';
/** The QUIC server ids of a service's reals, by address. */
const serverIds = (s: ServiceDoc): Map<string, number> =>
  new Map(s.spec.reals.filter((r) => r.serverId !== undefined).map((r) => [r.address, r.serverId!]));
const serverIdsText = (s: ServiceDoc) =>
  [...serverIds(s)].map(([a, id]) => `${a}=${id}`).sort().join(',') || 'none';

/** Whether every client `base` lets in is in one of `head`'s prefixes (absent: every client). */
function rangesCover(head: string[] | undefined, base: string[] | undefined): boolean {
  if (!head) return true;
  if (!base) return false;
  const outer = head.map((c) => parseCidr(c)!);
  return base.every((text) => {
    const c = parseCidr(text)!;
    return outer.some((o) => o.prefix <= c.prefix && cidrContains(o, c));
  });
}

function serviceFields(base: ServiceDoc, head: ServiceDoc, baseModel: ConfigModel, headModel: ConfigModel): FieldChange[] {
  const b = base.spec;
  const h = head.spec;
  const idPort = (s: ServiceDoc) => {
    const p = identityPort(s.spec.ports);
    return `${p.port}/${p.protocol}`;
  };
  return diffFields([
    ['vip', b.vip, h.vip],
    ['ports', portsText(base), portsText(head)],
    ['dispatch.mode', b.dispatch.mode, h.dispatch.mode],
    ['dispatch.encap', b.dispatch.encap, h.dispatch.encap],
    ['hash.sourcePort', b.hash.sourcePort, h.hash.sourcePort],
    ['sourceRanges', rangesText(base), rangesText(head)],
    ['sessionAffinity.clientIP.timeout', b.sessionAffinity?.clientIP.timeout, h.sessionAffinity?.clientIP.timeout],
    ['quic.connectionIdRouting', b.quic?.connectionIdRouting ?? false, h.quic?.connectionIdRouting ?? false],
    ['reals[].serverId', serverIdsText(base), serverIdsText(head)],
    ...leafPairs('healthCheck', b.healthCheck, h.healthCheck),
    ['maglev.tableSize', serviceTableSize(baseModel.cluster.spec, base), serviceTableSize(headModel.cluster.spec, head)],
    ['maglev identity port', idPort(base), idPort(head)],
  ]);
}

function addressOf(table: ServiceTable): Map<number, string> {
  return new Map(table.reals.map((r) => [r.realId, r.address]));
}

function movedEntries(before: ServiceTable, after: ServiceTable): number {
  if (before.tableSize !== after.tableSize) return after.tableSize;
  const ba = addressOf(before);
  const aa = addressOf(after);
  let moved = 0;
  for (let j = 0; j < after.tableSize; j++) {
    const x = before.ring[j]!;
    const y = after.ring[j]!;
    if ((x === 0 ? '' : ba.get(x)) !== (y === 0 ? '' : aa.get(y))) moved++;
  }
  return moved;
}

function realPlans(base: ServiceDoc | undefined, head: ServiceDoc | undefined, bt?: ServiceTable, ht?: ServiceTable): RealPlan[] {
  const entries = (t: ServiceTable | undefined, address: string) => t?.reals.find((r) => r.address === address)?.entries ?? 0;
  const before = new Map((base?.spec.reals ?? []).map((r) => [r.address, r]));
  const after = new Map((head?.spec.reals ?? []).map((r) => [r.address, r]));
  const addresses = [...new Set([...before.keys(), ...after.keys()])].sort();
  return addresses.map((address) => {
    const b = before.get(address);
    const a = after.get(address);
    const eb = entries(bt, address);
    const ea = entries(ht, address);
    const change: ChangeKind = !b ? 'added' : !a ? 'removed' : b.weight !== a.weight || b.state !== a.state ? 'changed' : 'unchanged';
    return {
      address,
      change,
      ...(b && { before: { weight: b.weight, state: b.state } }),
      ...(a && { after: { weight: a.weight, state: a.state } }),
      entriesBefore: eb,
      entriesAfter: ea,
      shareBefore: bt ? eb / bt.tableSize : 0,
      shareAfter: ht ? ea / ht.tableSize : 0,
    };
  });
}

function planService(
  name: string,
  base: ServiceDoc | undefined,
  head: ServiceDoc | undefined,
  baseModel: ConfigModel | null,
  headModel: ConfigModel,
  baseIds: Map<string, number>,
  headIds: Map<string, number>,
): ServicePlan {
  const bt = base && baseModel ? buildServiceTable(baseModel.cluster.spec, base, baseIds) : undefined;
  const ht = head ? buildServiceTable(headModel.cluster.spec, head, headIds) : undefined;
  const fields = base && head && baseModel ? serviceFields(base, head, baseModel, headModel) : [];
  const reals = realPlans(base, head, bt, ht);
  let moved = 0;
  let size = 0;
  if (bt && ht) {
    moved = movedEntries(bt, ht);
    size = ht.tableSize;
  } else if (bt) {
    moved = bt.ring.some((v) => v !== 0) ? bt.tableSize : 0;
    size = bt.tableSize;
  } else if (ht) {
    size = ht.tableSize;
  }
  const change: ChangeKind = !base
    ? 'added'
    : !head
      ? 'removed'
      : fields.length > 0 || reals.some((r) => r.change !== 'unchanged') || bt?.digest !== ht?.digest
        ? 'changed'
        : 'unchanged';
  return {
    name,
    change,
    vip: (head ?? base)!.spec.vip,
    fields,
    reals,
    ...(bt && { tableSizeBefore: bt.tableSize, digestBefore: bt.digest }),
    ...(ht && { tableSizeAfter: ht.tableSize, digestAfter: ht.digest }),
    movedEntries: moved,
    movedShare: size > 0 ? moved / size : 0,
    explanations: explain(fields, moved, size),
    warnings: base && head ? dispatchWarnings(base, head) : [],
  };
}

/**
 * What a dispatch change does while lb nodes and backends apply it one by one. Backends take l2, ipip and ipopt
 * for every DSR VIP they serve (docs/backend.md), so an encap change drops no new connection in any apply order;
 * a change between DSR and SNAT does, and connections open at the switch break when the socket they reach changes
 * (l2/ipip arrive at VIP:port, ipopt and snat at real:targetPort).
 */
function dispatchWarnings(base: ServiceDoc, head: ServiceDoc): string[] {
  const out: string[] = [];
  const before = new Map(base.spec.ports.map((p) => [`${p.port}/${p.protocol}`, resolveForwarding(base, p.protocol)]));
  const changed = head.spec.ports
    .map((p) => ({ port: `${p.port}/${p.protocol}`, from: before.get(`${p.port}/${p.protocol}`), to: resolveForwarding(head, p.protocol) }))
    .filter((c): c is { port: string; from: Forwarding; to: Forwarding } => c.from !== undefined && c.from !== c.to);
  const modeFlips = changed.filter((c) => (c.from === 'snat') !== (c.to === 'snat'));
  const encapFlips = changed.filter((c) => c.from !== 'snat' && c.to !== 'snat');
  if (modeFlips.length > 0) {
    out.push(
      `dispatch ${modeFlips.map((c) => `${c.port} ${c.from} -> ${c.to}`).join(', ')}: between DSR and SNAT the backends ` +
        `must own the VIP exactly while an lb node still sends (or already sends) DSR packets; lb nodes and backends ` +
        `apply one by one, so new connections to these ports can fail until every node has applied, and open ` +
        `connections break. Change it when the service is drained, or move it to another VIP.`,
    );
  }
  // ipopt backends trust an option only at the listener's targetPort, and after a change at the previous one too
  // (while lb nodes still send it): a backend ahead of the lb nodes is fine, one behind them refuses the new port's
  // options, and the replies leave from the real's own address.
  const target = (s: ServiceDoc, key: string) => {
    const p = s.spec.ports.find((x) => `${x.port}/${x.protocol}` === key);
    return p ? (p.targetPort ?? p.port) : undefined;
  };
  const retargeted = head.spec.ports
    .map((p) => `${p.port}/${p.protocol}`)
    .filter((k) => before.has(k) && target(base, k) !== target(head, k) &&
      (before.get(k) === 'dsr-ipopt' || resolveForwarding(head, k.endsWith('/UDP') ? 'UDP' : 'TCP') === 'dsr-ipopt'));
  if (retargeted.length > 0) {
    out.push(
      `targetPort of ${retargeted.map((k) => `${k} ${target(base, k)} -> ${target(head, k)}`).join(', ')} with ipopt: a backend ` +
        `keeps trusting the old targetPort after it applies (lb nodes that have not, or refuse the revision, go on ` +
        `working), but trusts the new one only once it has applied: new connections that an lb node sends to the new ` +
        `port fail on a backend that has not applied yet.`,
    );
  }
  // sourceRanges are checked on every packet (docs/datapath.md "Source ranges"), not only on new connections
  if (!rangesCover(head.spec.sourceRanges, base.spec.sourceRanges)) {
    out.push(`sourceRanges ${rangesText(base)} -> ${rangesText(head)}: clients outside the new ranges are dropped from ` +
      `the moment each lb node applies, their open connections included.`);
  }
  // QUIC connections are routed by the server id their connection IDs carry (docs/datapath.md "QUIC connection IDs")
  if (base.spec.quic?.connectionIdRouting) {
    const was = serverIds(base);
    const now = head.spec.quic?.connectionIdRouting ? serverIds(head) : new Map<string, number>();
    const lost = [...was].filter(([a, id]) => now.get(a) !== id && head.spec.reals.some((r) => r.address === a && r.state !== 'disabled'));
    if (lost.length > 0)
      out.push(`QUIC server ids ${lost.map(([a, id]) => `${a}=${id}`).join(', ')} no longer route: packets of open QUIC ` +
        `connections whose connection IDs carry them go by the connection table and the Maglev table from each lb node's ` +
        `apply, so a connection that migrates or whose 5-tuple the table moves reaches another real.`);
  }
  if (encapFlips.length > 0) {
    const socketMoves = encapFlips.filter((c) => (c.from === 'dsr-ipopt') !== (c.to === 'dsr-ipopt'));
    out.push(
      `dispatch ${encapFlips.map((c) => `${c.port} ${c.from} -> ${c.to}`).join(', ')}: backends accept l2, ipip, gue ` +
        `and ipopt for every DSR VIP they serve, so lb nodes and backends may apply this in any order without failing new ` +
        `connections` +
        (socketMoves.length > 0
          ? `; connections open at the switch break, because with ipopt the real answers on its own address and ` +
            `targetPort and with l2/ipip/gue on the VIP.`
          : '; open connections keep working (the real sees the same packet).'),
    );
  }
  return out;
}

/** Why flows move when no real was added or removed: the causes a reader cannot see in the reals' lines. */
function explain(fields: FieldChange[], moved: number, size: number): string[] {
  const out: string[] = [];
  const share = size > 0 ? `${((100 * moved) / size).toFixed(1)}%` : '0%';
  const identity = fields.find((f) => f.field === 'maglev identity port');
  if (identity && moved > 0) {
    out.push(
      `The Maglev identity port changed (${identity.before} -> ${identity.after}): a real's place in the table is ` +
        `derived from its address and this port (the service's lowest target port), so every real gets a new ` +
        `preference order and ${share} of new connections land on a different real, although the set of reals is the same.`,
    );
  }
  if (fields.some((f) => f.field === 'maglev.tableSize')) {
    out.push('The table size changed: every entry is recomputed, so every new connection may land on a different real.');
  }
  return out;
}

function planNodes(base: NodeDoc[], head: NodeDoc[]): NodePlan[] {
  const b = new Map(base.map((n) => [n.metadata.name, n]));
  const h = new Map(head.map((n) => [n.metadata.name, n]));
  const names = [...new Set([...b.keys(), ...h.keys()])].sort();
  const out: NodePlan[] = [];
  for (const name of names) {
    const x = b.get(name);
    const y = h.get(name);
    if (!x || !y) {
      out.push({ name, change: x ? 'removed' : 'added', fields: [] });
      continue;
    }
    const fields = diffFields(
      (['role', 'interface', 'allowedVips', 'addresses', 'snatAddress', 'snatPorts', 'mtu'] as const).map((k) => [k, x.spec[k], y.spec[k]]),
    );
    if (fields.length > 0) out.push({ name, change: 'changed', fields });
  }
  return out;
}

/**
 * Diff of two validated revisions. `base` is null when the base revision has no valid config (everything in the
 * head then counts as added). `diagnostics` are the head's (warnings are reported, errors belong to invalidHeadPlan).
 */
export function planChanges(base: ConfigModel | null, head: ConfigModel, diagnostics: PlanDiagnostic[] = []): Plan {
  const baseIds = base ? modelIds(base).realIds : new Map<string, number>();
  const headIds = modelIds(head).realIds;
  const bServices = new Map((base?.services ?? []).map((s) => [s.metadata.name, s]));
  const hServices = new Map(head.services.map((s) => [s.metadata.name, s]));
  const names = [...new Set([...bServices.keys(), ...hServices.keys()])].sort();
  const all = names.map((n) => planService(n, bServices.get(n), hServices.get(n), base, head, baseIds, headIds));
  const services = all.filter((s) => s.change !== 'unchanged');
  const bc = base?.cluster.spec;
  const hc = head.cluster.spec;
  const cluster = bc
    ? diffFields([
        ['maglev.tableSize', bc.maglev.tableSize, hc.maglev.tableSize],
        ['maglev.seed', bc.maglev.seed, hc.maglev.seed],
        ['conntrack.maxEntries', bc.conntrack.maxEntries, hc.conntrack.maxEntries],
        ['conntrack.newFlowRate', bc.conntrack.newFlowRate, hc.conntrack.newFlowRate],
        ['status.branch', bc.status.branch, hc.status.branch],
        ['rollback.policy', bc.rollback.policy, hc.rollback.policy],
        ['health', bc.health, hc.health],
      ])
    : [];
  const nodes = planNodes(base?.nodes ?? [], head.nodes);
  return {
    headValid: true,
    baseValid: base !== null,
    diagnostics: [...diagnostics, ...healthPortWarnings(bServices, head.services)],
    cluster,
    nodes,
    services,
    unchangedServices: all.length - services.length,
    changed: services.length > 0 || nodes.length > 0 || cluster.length > 0 || base === null,
  };
}

/**
 * A targetPort change the health check cannot see: the check probes an explicit healthCheck.port that stayed at
 * the old targetPort, so it stays green whether or not the reals serve the new one (docs/health.md). A health port
 * that differs from the old targetPort (a separate health endpoint), one that follows the change, and a defaulted
 * one (it follows the first port's targetPort) do not warn; nor do `via: vip` checks, which probe the VIP's port.
 */
function healthPortWarnings(base: Map<string, ServiceDoc>, head: ServiceDoc[]): PlanDiagnostic[] {
  const out: PlanDiagnostic[] = [];
  for (const h of head) {
    const b = base.get(h.metadata.name);
    const probe = h.spec.healthCheck.port;
    if (!b || probe === undefined || h.spec.healthCheck.type === 'none' || h.spec.healthCheck.via === 'vip') continue;
    if (b.spec.healthCheck.port !== probe) continue;
    h.spec.ports.forEach((p, i) => {
      const was = b.spec.ports.find((x) => x.port === p.port && x.protocol === p.protocol);
      if (!was) return;
      const from = was.targetPort ?? was.port;
      const to = p.targetPort ?? p.port;
      if (from === to || probe !== from) return;
      out.push({ severity: 'warning', file: h.source.file, line: h.source.line, col: h.source.col,
        message: `service '${h.metadata.name}' spec.ports[${i}].targetPort ${from} -> ${to} (${p.port}/${p.protocol}): spec.healthCheck.port is ` +
          `still ${probe}: the health check still probes port ${probe}; it will not see whether the reals serve the new targetPort ${to}. ` +
          `Change spec.healthCheck.port with it unless port ${probe} is a separate health endpoint.` });
    });
  }
  return out;
}

/** The plan of a head revision that does not validate: its diagnostics, nothing else. */
export function invalidHeadPlan(diagnostics: PlanDiagnostic[], baseValid = true): Plan {
  return { headValid: false, baseValid, diagnostics, cluster: [], nodes: [], services: [], unchangedServices: 0, changed: false };
}
