// Ops as text and JSON: one line per op naming the map it writes (logs, `gitlb plan`, status), counts by kind. Pure.
import type { DesiredVip } from './state.js';
import { type BackendTunnelAddr, type BackendVip, type LbSettings, type Op, type OpKind, type QuicServer, type SnatSettings, type SourceRange } from './ops.js';

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
