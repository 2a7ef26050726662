// Reads the counters of a node's pinned data plane straight from bpffs: opened by path, summed over CPUs, closed
// again. No daemon state is needed, so `/metrics` (at scrape time) and `gitlb top` (another process) read the same
// numbers the kernel holds. Names of the counters: docs/datapath.md (lb) and docs/backend.md (backend).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap } from '../libbpf.js';
import { perCpuCounters, trafficAt, type Traffic } from '../counters.js';
import { u32 } from '../codec.js';
import { SYNC_COUNTER_NAMES, SYNC_MAPS } from './flow-events.js';
import { AFFINITY_COUNTER_NAMES, AFFINITY_MAPS, COUNTER_NAMES, QUIC_COUNTER_NAMES, QUIC_MAPS, MODE_NAME, PROTO_NAME, decodeReal, decodeVipKey, decodeVipValue, realSlotOf, type CounterName } from './codec.js';
import { SNAT_COUNTER_NAMES, SNAT_MAPS, decodeSnatConfig, decodeSnatRevKey } from './snat.js';
import { STAT_NAMES as BACKEND_STAT_NAMES } from '../backend/codec.js';

export type { Traffic };

export interface LbListener { vip: string; port: number; protocol: string; serviceId: number; mode: string }

export interface SnatAddressStats {
  address: string;
  family: 4 | 6;
  /** Translations (lb_snat_rev entries) of this address family. */
  translations: number;
  /** Size of the SNAT port range. */
  portRange: number;
  /** Ports in use by the busiest (real, real port, protocol): a new flow to it fails once this reaches portRange. */
  busiestPortsInUse: number;
}

export interface LbStats {
  counters: Record<CounterName, number>;
  services: Map<number, Traffic>;
  reals: Map<number, Traffic>;
  /** Real id -> address (lb_reals). */
  realAddresses: Map<number, string>;
  listeners: LbListener[];
  conntrack: { entries: number; max: number };
  snat: { counters: Record<string, number>; addresses: SnatAddressStats[]; max: number };
  /** Session affinity (lb_affinity): counters by name (affinity_hit, ...), remembered clients and capacity. */
  affinity: { counters: Record<string, number>; entries: number; max: number };
  /** QUIC connection-ID routing (lb_quic_stats): counters by name (quic_routed, ...). */
  quic: { counters: Record<string, number> };
  /** Connection-state sync's publishing (lb_sync_stats): counters by name (sync_lost). */
  sync: { counters: Record<string, number> };
}

/** Opens the map pinned as `dir`/`name`, runs `fn` on it and closes it; undefined when nothing is pinned there. */
export function withMap<T>(dir: string, name: string, fn: (m: BpfMap) => T): T | undefined {
  const path = join(dir, name);
  if (!existsSync(path)) return undefined;
  const m = BpfMap.open(path, name);
  try {
    return fn(m);
  } finally {
    m.close();
  }
}

/** Traffic of ids kept in a per-CPU array at dense slots (id -> slot). */
function trafficBySlot(m: BpfMap, slots: Iterable<readonly [number, number]>): Map<number, Traffic> {
  const out = new Map<number, Traffic>();
  for (const [id, slot] of slots) {
    const t = trafficAt(m, slot);
    if (t) out.set(id, t);
  }
  return out;
}

/** Entries in a hash map: one batched walk (the kernel keeps no count a reader can ask for). */
function countEntries(m: BpfMap): number {
  return m.lookupBatch(4096).count;
}

/** True when `dir` holds a pinned lb data plane. */
export function isLbPinRoot(dir: string): boolean {
  return existsSync(join(dir, 'lb_counters'));
}

/** True when `dir` holds a pinned backend data plane. */
export function isBackendPinRoot(dir: string): boolean {
  return existsSync(join(dir, 'be_stats'));
}

/** The lb node's counters under `dir` (its pin root), or null when nothing is pinned there. */
export function readLbStats(dir: string): LbStats | null {
  if (!isLbPinRoot(dir)) return null;
  const counters = withMap(dir, 'lb_counters', (m) => perCpuCounters(m, COUNTER_NAMES))!;
  // traffic sits in per-CPU arrays at dense slots: a real's is lb_real.slot, a service's the stats slot its
  // listeners carry (lb_vip_value.stats_slot)
  const realEntries = withMap(dir, 'lb_reals', (m) => m.entries()) ?? [];
  const realAddresses = new Map(realEntries.map(([k, v]) => [k.readUInt32LE(0), decodeReal(v).address] as const));
  const reals = withMap(dir, 'lb_real_stats', (m) => trafficBySlot(m,
    realEntries.map(([k, v]) => [k.readUInt32LE(0), realSlotOf(Buffer.from(v))] as const))) ?? new Map<number, Traffic>();
  const listeners: LbListener[] = [];
  const serviceSlots = new Map<number, number>();
  withMap(dir, 'lb_vips', (m) => {
    for (const [k, v] of m.entries()) {
      const key = decodeVipKey(k);
      if (key.port === 0 && key.proto === 0) continue; // address marker, not a listener
      const val = decodeVipValue(v);
      serviceSlots.set(val.serviceId, val.statsSlot ?? 0);
      listeners.push({ vip: key.addr, port: key.port, protocol: PROTO_NAME[key.proto] ?? String(key.proto),
        serviceId: val.serviceId, mode: MODE_NAME[val.mode] ?? String(val.mode) });
    }
  });
  const services = withMap(dir, 'lb_service_stats', (m) => trafficBySlot(m, serviceSlots)) ?? new Map<number, Traffic>();
  const conntrack = withMap(dir, 'lb_conntrack', (m) => ({ entries: countEntries(m), max: m.maxEntries })) ?? { entries: 0, max: 0 };
  const affinity = {
    counters: withMap(dir, AFFINITY_MAPS.stats, (m) => perCpuCounters(m, AFFINITY_COUNTER_NAMES)) ?? {},
    ...(withMap(dir, AFFINITY_MAPS.table, (m) => ({ entries: countEntries(m), max: m.maxEntries })) ?? { entries: 0, max: 0 }),
  };
  const quic = { counters: withMap(dir, QUIC_MAPS.stats, (m) => perCpuCounters(m, QUIC_COUNTER_NAMES)) ?? {} };
  const sync = { counters: withMap(dir, SYNC_MAPS.stats, (m) => perCpuCounters(m, SYNC_COUNTER_NAMES)) ?? {} };
  return { counters, services, reals, realAddresses, listeners, conntrack, snat: readSnat(dir), affinity, quic, sync };
}

function readSnat(dir: string): LbStats['snat'] {
  const counters = withMap(dir, SNAT_MAPS.stats, (m) => perCpuCounters(m, SNAT_COUNTER_NAMES)) ?? {};
  const cfg = withMap(dir, SNAT_MAPS.config, (m) => {
    const v = m.lookup(u32.encode(0));
    return v ? decodeSnatConfig(Buffer.from(v)) : null;
  });
  const perFamily = { 4: { n: 0, groups: new Map<string, number>() }, 6: { n: 0, groups: new Map<string, number>() } };
  const max = withMap(dir, SNAT_MAPS.rev, (m) => {
    const { keys, count } = m.lookupBatch(4096);
    for (let i = 0; i < count; i++) {
      const k = decodeSnatRevKey(keys.subarray(i * m.keySize, (i + 1) * m.keySize));
      const f = perFamily[k.family];
      f.n++;
      const g = `${k.real}|${k.realPort}|${k.proto}`;
      f.groups.set(g, (f.groups.get(g) ?? 0) + 1);
    }
    return m.maxEntries;
  }) ?? 0;
  const addresses: SnatAddressStats[] = [];
  if (cfg) {
    const portRange = cfg.portMax - cfg.portMin + 1;
    for (const [family, address] of [[4, cfg.addr4], [6, cfg.addr6]] as const) {
      if (!address) continue;
      const f = perFamily[family];
      addresses.push({ address, family, translations: f.n, portRange, busiestPortsInUse: Math.max(0, ...f.groups.values()) });
    }
  }
  return { counters, addresses, max };
}

export interface BackendStats { counters: Record<(typeof BACKEND_STAT_NAMES)[number], number> }

/** A backend node's decap/rewrite counters under `dir`, or null when nothing is pinned there. */
export function readBackendStats(dir: string): BackendStats | null {
  if (!isBackendPinRoot(dir)) return null;
  return { counters: withMap(dir, 'be_stats', (m) => perCpuCounters(m, BACKEND_STAT_NAMES))! };
}
