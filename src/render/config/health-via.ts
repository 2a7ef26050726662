// Where `healthCheck.via: vip` works: the TC egress program of src/bpf/vip-probe.ts steers IPv4 probes by MAC
// (dsr l2) or by an outer IPv4 header (dsr ipip). One answer for validation (an explicit `vip` elsewhere is an
// error) and for the model builder (the default is `vip` exactly where it works, `real` elsewhere). Pure.
import type { RawService } from './raw.js';

/** Why this service cannot be probed through the VIP path, or null when it can. */
export function vipProbeUnsupported(spec: RawService['spec']): string | null {
  if (spec.healthCheck.type === 'none') return 'no check is run with type none';
  if (spec.dispatch.mode !== 'dsr') return `only dsr services are probed through the VIP (dispatch.mode is ${spec.dispatch.mode})`;
  const encap = spec.dispatch.encap ?? 'l2';
  if (encap === 'ipopt' || encap === 'gue') return `dispatch.encap ${encap} is not supported yet; use via: real`;
  if (spec.vip.includes(':')) return 'IPv6 VIPs are not supported yet; use via: real';
  return null;
}

/** The effective `via`: what the config says, else `vip` where supported (docs/health.md), else `real`. */
export function effectiveVia(spec: RawService['spec']): 'vip' | 'real' {
  return spec.healthCheck.via ?? (vipProbeUnsupported(spec) === null ? 'vip' : 'real');
}
