// Where `healthCheck.via: vip` works: the TC egress program of src/bpf/vip-probe.ts steers probes by MAC (dsr l2),
// by an outer IP header (dsr ipip), by an outer IP + UDP header to the cluster's GUE port (dsr gue) or with the DSR
// option (dsr ipopt, at a TCP listener's targetPort). IPv4 and IPv6. One answer for validation (an explicit `vip`
// elsewhere is an error) and for the model builder (the default is `vip` for IPv4 l2 and ipip, `real` elsewhere:
// ipopt, gue and IPv6 take `vip` when asked for). Pure.
import type { RawService } from './raw.js';

/** Why this service cannot be probed through the VIP path, or null when it can. */
export function vipProbeUnsupported(spec: RawService['spec']): string | null {
  if (spec.healthCheck.type === 'none') return 'no check is run with type none';
  if (spec.dispatch.mode !== 'dsr') return `only dsr services are probed through the VIP (dispatch.mode is ${spec.dispatch.mode})`;
  const encap = spec.dispatch.encap ?? 'l2';
  if (encap === 'ipopt') {
    // the probe connects to the real's targetPort and its SYN names the listener of that targetPort
    const port = spec.healthCheck.port ?? spec.ports[0]?.targetPort ?? spec.ports[0]?.port;
    if (!spec.ports.some((p) => p.protocol === 'TCP' && (p.targetPort ?? p.port) === port))
      return `with encap ipopt the checked port (${port}) must be the targetPort of a TCP port of the service`;
  }
  return null;
}

/** The effective `via`: what the config says, else `vip` where supported (docs/health.md), else `real`. */
export function effectiveVia(spec: RawService['spec']): 'vip' | 'real' {
  // the default only where the path has been the default longest (IPv4 l2/ipip); ipopt, gue and IPv6 take vip when asked
  const encap = spec.dispatch.encap ?? 'l2';
  const tried = (encap === 'l2' || encap === 'ipip') && !spec.vip.includes(':');
  return spec.healthCheck.via ?? (tried && vipProbeUnsupported(spec) === null ? 'vip' : 'real');
}
