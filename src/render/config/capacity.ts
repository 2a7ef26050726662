// What one lb node's data plane can never hold: its maps have fixed sizes (src/bpf/include/lb_consts.h), so a
// revision that gives one lb node more services, listeners, reals, source ranges or QUIC server ids than they hold is refused here, at validate,
// naming the node, rather than failing at apply on that node. Rings have no shared capacity (one map per
// service), so the table sizes are not limited here beyond the schema. Each revision is checked alone: the plan
// engine (src/render/ops-plan.ts) orders a transition so that it needs room for the bigger of the two revisions, not
// for both (removals first, waves when old and new together exceed a map), and refuses before any write the few
// transitions no order fits (docs/render.md "The plan engine"). The 8 IPv4 dsr-ipip sources of lb_config are
// checked with the node's addresses (semantic.ts).
import { DATAPLANE_LIMITS } from './limits.js';
import { canonicalIp, cidrContains, formatIp, parseCidr, parseIp } from '../ip.js';
import type { Located, RawNode, RawService } from './raw.js';
import type { Emit } from './semantic.js';

export function checkLbCapacity(emit: Emit, nodes: Located<RawNode>[], services: Located<RawService>[]): void {
  const parsed = services.map(({ data }) => ({ data, vip: parseIp(data.spec.vip), reals: enabledReals(data) }));
  for (const { doc, data } of nodes) {
    if (data.spec.role !== 'lb') continue;
    const allowed = data.spec.allowedVips.map(parseCidr).filter((c) => c !== null);
    const served = parsed.filter((s) => s.vip && allowed.some((c) => cidrContains(c, s.vip!)));
    const markers = new Set(served.map((s) => formatIp(s.vip!)));
    const listeners = served.reduce((n, s) => n + s.data.spec.ports.length, 0);
    const reals = new Set<string>();
    for (const s of served) for (const r of s.reals) reals.add(r);
    const over: string[] = [];
    if (served.length > DATAPLANE_LIMITS.lbServices)
      over.push(`${served.length} services (lb_rings holds ${DATAPLANE_LIMITS.lbServices})`);
    if (listeners + markers.size > DATAPLANE_LIMITS.lbVipEntries)
      over.push(`${listeners} listeners + ${markers.size} VIP addresses (lb_vips holds ${DATAPLANE_LIMITS.lbVipEntries})`);
    if (reals.size > DATAPLANE_LIMITS.lbReals) over.push(`${reals.size} reals (lb_reals holds ${DATAPLANE_LIMITS.lbReals})`);
    const ranges = served.reduce((n, s) => n + (s.data.spec.sourceRanges?.length ?? 0), 0);
    if (ranges > DATAPLANE_LIMITS.lbSourceRanges)
      over.push(`${ranges} sourceRanges entries (at most ${DATAPLANE_LIMITS.lbSourceRanges} per lb node)`);
    const quic = served.reduce((n, s) => n + quicServerIds(s.data), 0);
    if (quic > DATAPLANE_LIMITS.lbQuicServers)
      over.push(`${quic} QUIC server ids (lb_quic_servers holds ${DATAPLANE_LIMITS.lbQuicServers})`);
    if (over.length)
      emit('error', doc, ['spec', 'allowedVips'],
        `lb node '${data.metadata.name}' would serve ${over.join(', ')}: more than its data plane can ever hold; ` +
        'narrow spec.allowedVips or spread the services over more lb nodes');
  }
}

/** The lb_quic_servers entries a service can take: its enabled reals with a server id, when it routes by them. */
function quicServerIds(data: RawService): number {
  if (!data.spec.quic?.connectionIdRouting) return 0;
  let n = 0;
  for (const r of data.spec.reals) if (r.serverId !== undefined && r.state !== 'disabled') n++;
  return n;
}

/**
 * Canonical addresses of a service's reals that are not disabled, remembered per schema-valid document: documents
 * of an unchanged file are the same objects in the next revision (index.ts yamlMemo) and are not written
 * after their schema pass, so a revision changing one service recomputes one list of 1,000.
 */
const enabledMemo = new WeakMap<RawService, string[]>();

function enabledReals(data: RawService): string[] {
  let out = enabledMemo.get(data);
  if (!out) {
    out = [];
    for (const r of data.spec.reals) {
      const canonical = r.state !== 'disabled' ? canonicalIp(r.address) : null;
      if (canonical !== null) out.push(canonical);
    }
    enabledMemo.set(data, out);
  }
  return out;
}
