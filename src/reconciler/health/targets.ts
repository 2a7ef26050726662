// Which probes a config asks for: one per (service, real) with a check type other than `none` and a real that is
// not `disabled` (drained reals are still checked so status shows their health before they return). Pure.
import { DEFAULT_GUE_PORT, type ConfigModel, type ServiceDoc } from '../../render/model.js';
import type { Probe } from './probes.js';

export interface CheckTarget {
  /** `${service}\u0000${address}` — unique per target. */
  key: string;
  service: string;
  address: string;
  probe: Probe;
  intervalMs: number;
  rise: number;
  fall: number;
}

export const DEFAULT_EXPECT_STATUS = { min: 200, max: 399 } as const;

export function targetKey(service: string, address: string): string {
  return `${service}\u0000${address}`;
}

export function checkTargets(model: ConfigModel): CheckTarget[] {
  const out: CheckTarget[] = [];
  for (const svc of model.services) {
    const hc = svc.spec.healthCheck;
    if (hc.type === 'none') continue;
    const viaVip = hc.via === 'vip';
    const port = checkPort(svc);
    const encap = svc.spec.dispatch.encap ?? 'l2';
    // gue: tunnelled to the cluster's GUE port, as xdp_lb sends clients' packets (a port change is a changed check)
    const guePort = model.cluster.spec.gue?.port ?? DEFAULT_GUE_PORT;
    for (const real of svc.spec.reals) {
      if (real.state === 'disabled') continue;
      // via: vip probes VIP:port as clients reach it; validation admits it only for dsr services (ipopt: at a TCP
      // listener's targetPort, the option naming that listener's port; gue: tunnelled to the cluster's GUE port)
      const address = real.address;
      const vipPort = encap === 'ipopt' ? svc.spec.ports.find((p) => p.protocol === 'TCP' && (p.targetPort ?? p.port) === port)?.port : undefined;
      const via = viaVip ? { via: { vip: svc.spec.vip, encap, ...(vipPort !== undefined && { vipPort }), ...(encap === 'gue' && { guePort }) } } : {};
      const probe: Probe = hc.type === 'tcp'
        ? { type: 'tcp', address, port, timeoutMs: hc.timeoutMs, ...via }
        : {
            type: 'http',
            address,
            port,
            ...via,
            path: hc.path ?? '/',
            timeoutMs: hc.timeoutMs,
            expectStatus: hc.expectStatus ?? { ...DEFAULT_EXPECT_STATUS },
          };
      out.push({
        key: targetKey(svc.metadata.name, real.address),
        service: svc.metadata.name,
        address: real.address,
        probe,
        intervalMs: hc.intervalMs,
        rise: hc.rise,
        fall: hc.fall,
      });
    }
  }
  return out;
}

/** The health check port: explicit, else the first listener's target port (what the backend actually serves). */
function checkPort(svc: ServiceDoc): number {
  const hc = svc.spec.healthCheck;
  if (hc.port !== undefined) return hc.port;
  const first = svc.spec.ports[0];
  if (!first) throw new Error(`service ${svc.metadata.name}: healthCheck.port is required when the service has no ports`);
  return first.targetPort ?? first.port;
}

