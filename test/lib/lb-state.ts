// Builds DesiredState values for data-plane tests and benches from a compact description.
import type { DesiredState, Forwarding } from '../../src/render/state.js';
import { compareVips, ringDigest } from '../../src/bpf/dataplane/index.js';
import { familyOf } from '../../src/bpf/dataplane/codec.js';
import { compareCidrs } from '../../src/render/ip.js';
import { DEFAULT_GUE_PORT } from '../../src/render/model.js';

export interface SvcSpec {
  id: number;
  vip: string;
  forwarding: Forwarding;
  ports?: Array<{ port: number; protocol: 'TCP' | 'UDP'; targetPort?: number }>;
  ring: number[] | Uint32Array;
  hashSourcePort?: boolean;
  /** Service sourceRanges (canonical CIDRs, as render sorts them); absent: every client. */
  sourceRanges?: string[];
  /** Session affinity timeout in seconds (absent: none). */
  affinityTimeoutS?: number;
  /** QUIC connection-ID routing: server id -> real id (absent: off). Its UDP listeners get the flag. */
  quic?: Record<number, number>;
  /** dsr-gue: the tunnel's UDP port (absent: DEFAULT_GUE_PORT). */
  guePort?: number;
}

export function makeState(opts: {
  reals: Record<number, string>;
  services: SvcSpec[];
  addresses?: string[];
  mtu?: number;
  hashSeed?: number;
  conntrackMaxEntries?: number;
}): DesiredState {
  const reals = Object.entries(opts.reals).map(([id, address]) => ({ id: Number(id), address, family: familyOf(address) }))
    .sort((a, b) => a.id - b.id);
  const services = opts.services.map((s) => {
    const ring = Uint32Array.from(s.ring);
    const counts = new Map<number, number>();
    for (const r of ring) if (r) counts.set(r, (counts.get(r) ?? 0) + 1);
    // a real with a QUIC server id but no ring entries (drained) is still a real of the service
    for (const id of Object.values(s.quic ?? {})) if (!counts.has(id)) counts.set(id, 0);
    return {
      id: s.id, name: `svc-${s.id}`, mode: (s.forwarding === 'snat' ? 'snat' : 'dsr') as 'snat' | 'dsr',
      encap: s.forwarding.startsWith('dsr-') ? (s.forwarding.slice(4) as 'l2' | 'ipip' | 'ipopt' | 'gue') : undefined,
      tableSize: ring.length, ring, digest: ringDigest(ring),
      reals: [...counts].sort((a, b) => a[0] - b[0]).map(([realId, entries]) => ({ realId,
        address: opts.reals[realId]!, weight: 1, state: 'active' as const, healthy: true, entries })),
      healthCheck: { type: 'none' as const, intervalMs: 1000, timeoutMs: 500, rise: 1, fall: 1 },
      ...(s.sourceRanges?.length ? { sourceRanges: [...s.sourceRanges].sort(compareCidrs) } : {}),
      ...(s.affinityTimeoutS !== undefined && { sessionAffinity: { timeoutS: s.affinityTimeoutS } }),
      ...(s.quic && { quic: { servers: Object.entries(s.quic).map(([serverId, realId]) => ({ serverId: Number(serverId), realId }))
        .sort((a, b) => a.serverId - b.serverId) } }),
    };
  }).sort((a, b) => a.id - b.id);
  const vips = opts.services.flatMap((s) => (s.ports ?? [{ port: 80, protocol: 'TCP' as const }]).map((p) => ({
    vip: s.vip, family: familyOf(s.vip), port: p.port, protocol: p.protocol, targetPort: p.targetPort ?? p.port,
    ...(s.forwarding === 'dsr-gue' && { guePort: s.guePort ?? DEFAULT_GUE_PORT }),
    serviceId: s.id, forwarding: s.forwarding, hashSourcePort: s.hashSourcePort ?? true,
    ...(s.sourceRanges?.length ? { sourceRanges: true as const } : {}),
    ...(s.affinityTimeoutS !== undefined && { affinityTimeoutS: s.affinityTimeoutS }),
    ...(s.quic && p.protocol === 'UDP' && s.forwarding !== 'snat' && { quic: true as const }),
  }))).sort(compareVips);
  return {
    node: 'lb-test', role: 'lb', interface: 'lbA', mtu: opts.mtu ?? 1500, hashSeed: opts.hashSeed ?? 0x12345678,
    conntrackMaxEntries: opts.conntrackMaxEntries ?? 4096, reals, services, vips, localVips: [],
    ...(opts.addresses ? { addresses: opts.addresses } : {}),
  };
}
