// Human-readable form of a DesiredState (`gitlb render --format text`). The JSON form is desiredStateToJson.
import type { DesiredService, DesiredState } from './state.js';

/** Run-length encoding of a ring: `id(count),...`, the notation of Cilium's maglev tests. */
export function runLengthRing(ring: Uint32Array): string {
  if (ring.length === 0) return '';
  const runs: string[] = [];
  let current = ring[0]!;
  let count = 0;
  for (let j = 0; j < ring.length; j++) {
    if (ring[j] === current) count++;
    else {
      runs.push(`${current}(${count})`);
      current = ring[j]!;
      count = 1;
    }
  }
  runs.push(`${current}(${count})`);
  return runs.join(',');
}

const hex32 = (n: number) => '0x' + n.toString(16).padStart(8, '0');

/** The service's health check as the health loop runs it, with the resolved `via` (absent in the model means
 * real), so the text form answers "how is this real probed" as the JSON form and `gitlb plan` do. */
export function healthCheckText(hc: DesiredService['healthCheck']): string {
  if (hc.type === 'none') return 'check none';
  return `check ${hc.type} :${hc.port}${hc.type === 'http' ? (hc.path ?? '') : ''} via ${hc.via ?? 'real'}`;
}

export function formatDesiredStateText(s: DesiredState, opts: { tables?: boolean } = {}): string {
  const out: string[] = [];
  const snat = s.snatAddress ? `  snat ${s.snatAddress}${s.snatPorts ? ` ports ${s.snatPorts.min}-${s.snatPorts.max}` : ''}` : '';
  out.push(`node ${s.node} (${s.role})  interface ${s.interface}  mtu ${s.mtu}${snat}`);
  if (s.addresses?.length) out.push(`addresses ${s.addresses.join(' ')}`);
  out.push(`hashSeed ${hex32(s.hashSeed)}  conntrack ${s.conntrackMaxEntries} entries`);
  out.push('');
  out.push(`listeners (${s.vips.length}):`);
  const name = new Map(s.services.map((x) => [x.id, x.name]));
  for (const v of s.vips) {
    const target = v.targetPort !== v.port ? ` -> :${v.targetPort}` : '';
    const host = v.family === 6 ? `[${v.vip}]` : v.vip;
    out.push(`  ${host}:${v.port}/${v.protocol}${target}  ${name.get(v.serviceId)}  ${v.forwarding}${v.hashSourcePort ? '' : '  (no source port in hash)'}` +
      (v.affinityTimeoutS ? `  (client affinity ${v.affinityTimeoutS} s)` : '') + (v.quic ? '  (QUIC connection IDs)' : ''));
  }
  out.push('');
  out.push(`services (${s.services.length}):`);
  for (const svc of s.services) {
    const mode = svc.encap ? `${svc.mode}/${svc.encap}` : svc.mode;
    out.push(`  ${svc.name}  id ${svc.id}  ${mode}  M=${svc.tableSize}  digest ${svc.digest}  ${healthCheckText(svc.healthCheck)}` +
      (svc.sessionAffinity ? `  affinity clientIP ${svc.sessionAffinity.timeoutS} s` : ''));
    if (svc.sourceRanges) out.push(`    source ranges (only these clients): ${svc.sourceRanges.join(' ')}`);
    if (svc.quic) {
      const address = new Map(svc.reals.map((r) => [r.realId, r.address]));
      const ids = svc.quic.servers.map((q) => `${q.serverId}=${address.get(q.realId) ?? q.realId}`).join(' ');
      out.push(`    QUIC server ids (healthy reals): ${ids || 'none'}`);
    }
    for (const r of svc.reals) {
      const share = ((r.entries / svc.tableSize) * 100).toFixed(2);
      const flags = [r.state, r.healthy ? 'healthy' : 'UNHEALTHY'].join(' ');
      out.push(`    ${r.address.padEnd(16)} id ${String(r.realId).padEnd(10)} weight ${String(r.weight).padEnd(4)} ${flags.padEnd(18)} ${r.entries} entries (${share}%)`);
    }
    if (opts.tables) out.push(`    ring: ${runLengthRing(svc.ring)}`);
  }
  if (s.role === 'backend') {
    out.push('');
    out.push(`local VIPs (${s.localVips.length}): ${s.localVips.join(' ') || '-'}`);
  }
  out.push('');
  out.push(`reals known to the data plane (${s.reals.length}):`);
  for (const r of s.reals) out.push(`  ${String(r.id).padEnd(10)} ${r.address}`);
  return out.join('\n') + '\n';
}
