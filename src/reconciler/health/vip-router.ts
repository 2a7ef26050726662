// The lb daemon's VipProbeRouter: attaches the via: vip probe program (src/bpf/vip-probe.ts) to the node's
// interface the first time a revision asks for via: vip checks, and keeps its routes equal to what the checker
// reserved. Loaded lazily so nodes without such checks never load it. Calls are serialised by the checker.
import type { VipProbeRoute, VipProbePath } from '../../bpf/vip-probe.js';
import type { VipProbeRouter } from './checker.js';

export interface ClosableVipProbeRouter extends VipProbeRouter {
  close(): void;
}

export function vipProbeRouter(iface: () => string | undefined): ClosableVipProbeRouter {
  let path: VipProbePath | null = null;
  let closed = false;
  return {
    async set(routes: VipProbeRoute[]) {
      if (!path) {
        if (routes.length === 0) return;
        const ifname = iface();
        if (!ifname) throw new Error('the node has no interface to send probes from');
        const { VipProbePath } = await import('../../bpf/vip-probe.js');
        const attached = await VipProbePath.attach(ifname);
        if (closed) return attached.close();
        path = attached;
      }
      path.set(routes);
    },
    close() {
      closed = true;
      path?.close();
      path = null;
    },
  };
}
