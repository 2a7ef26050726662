// The backend TC programs (build/bpf/tc_backend.o) loaded for BPF_PROG_TEST_RUN, set up the way the backend unit
// tests share: layouts checked, be_tunnel_addrs as a backend whose own address and lb node are given per family.
import { BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { STAT_NAMES, VIP_FLAG_IPIP, VIP_FLAG_IPOPT, desiredTunnelAddrs, encodeAddrKey, encodeAddrValue, encodeVipKey, encodeVipValue, type StatName } from '../../src/bpf/backend/codec.js';
import { checkBackendLayouts } from '../../src/bpf/backend/index.js';
import { perCpuCounters } from '../../src/bpf/counters.js';

export interface BackendAddrs { lb: string; real: string }

export interface BackendProgs { obj: BpfObject; ingress: BpfProgram; egress: BpfProgram }

/** Loads tc_backend.o; tunnelled packets are accepted from `v4.lb`/`v6.lb` to `v4.real`/`v6.real`. */
export async function loadBackendProgs(v4: BackendAddrs, v6: BackendAddrs): Promise<BackendProgs> {
  const obj = await BpfObject.load('tc_backend');
  checkBackendLayouts(obj);
  for (const e of desiredTunnelAddrs({ addresses: [v4.real, v6.real], lbAddresses: [v4.lb, v6.lb] }))
    obj.map('be_tunnel_addrs').update(encodeAddrKey(e), encodeAddrValue(e));
  return { obj, ingress: obj.program('backend_ingress'), egress: obj.program('backend_egress') };
}

/**
 * be_vips with one IP-in-IP VIP (any port; GUE too at `guePort` when given) and one ipopt VIP (`vipPort`, TCP and
 * UDP, delivered to `targetPort`) per family.
 */
export function addTunnelVips(obj: BpfObject, vips: { v4: { ipipVip: string; optVip: string }; v6: { ipipVip: string; optVip: string } }, vipPort: number, targetPort: number,
  guePort = 0): void {
  const m = obj.map('be_vips');
  for (const [a, family] of [[vips.v4, 4], [vips.v6, 6]] as const) {
    m.update(encodeVipKey({ address: a.ipipVip, family, port: 0, protocol: null }), encodeVipValue({ flags: VIP_FLAG_IPIP, targetPort: guePort }));
    for (const protocol of ['TCP', 'UDP'] as const)
      m.update(encodeVipKey({ address: a.optVip, family, port: vipPort, protocol }), encodeVipValue({ flags: VIP_FLAG_IPOPT, targetPort }));
  }
}

/** be_stats summed over CPUs, by name: the same reading the data plane's counters() gives. */
export function backendStats(obj: BpfObject): Record<StatName, number> {
  return perCpuCounters(obj.map('be_stats'), STAT_NAMES);
}
