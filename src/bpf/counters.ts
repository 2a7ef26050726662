// Counters the BPF programs keep in per-CPU arrays: every reader (the data plane handles, the pinned-stats reader
// of /metrics and `gitlb top`) sums them over CPUs the same way, here.
import type { BpfMap } from './libbpf.js';
import { u32 } from './codec.js';

/** A per-CPU array whose slot i is the counter names[i], summed over CPUs, by name (0 for a missing slot). */
export function perCpuCounters<N extends string>(m: BpfMap, names: readonly N[]): Record<N, number> {
  const out = {} as Record<N, number>;
  names.forEach((name, i) => {
    out[name] = Number(m.lookupPerCpuSum(u32.encode(i))?.[0] ?? 0n);
  });
  return out;
}

/** Per-CPU traffic of a service or real slot (struct lb_traffic: packets, bytes, new flows), summed over CPUs. */
// A type, not an interface: counters() files it under a string-indexed record.
export type Traffic = { packets: number; bytes: number; newFlows: number };

export const trafficOf = (s: bigint[]): Traffic => ({ packets: Number(s[0]), bytes: Number(s[1]), newFlows: Number(s[2]) });

/** A real's TCP part (struct lb_real_traffic after its lb_traffic fields): TCP packets, and SYNs (ACK clear) among them. */
export type RealTcp = { tcpPackets: number; tcpSyns: number };

/** The TCP part of lb_real_stats at `slot`, summed over CPUs, or null when the slot is out of range. */
export function realTcpAt(m: BpfMap, slot: number): RealTcp | null {
  const s = m.lookupPerCpuSum(u32.encode(slot));
  return s && { tcpPackets: Number(s[3] ?? 0n), tcpSyns: Number(s[4] ?? 0n) };
}

/** The traffic at `slot` of a per-CPU traffic array, or null when the slot is out of range. */
export function trafficAt(m: BpfMap, slot: number): Traffic | null {
  const s = m.lookupPerCpuSum(u32.encode(slot));
  return s && trafficOf(s);
}
