// Byte layouts of the LB program's map keys and values (src/bpf/include/lb_structs.h), and the
// numbers of lb_consts.h. The only TS file that knows these layouts; checked against BTF at load.
import { DATAPLANE_LIMITS } from '../../render/config/limits.js';
import { formatCidr, formatIp, ipFamily, parseCidr, requireIp } from '../../render/ip.js';
import type { Forwarding } from '../../render/state.js';
import type { Protocol } from '../../render/model.js';
import { u32 } from '../codec.js';

export const MODE: Record<Forwarding, number> = { 'dsr-l2': 1, 'dsr-ipip': 2, 'dsr-ipopt': 3, snat: 4, 'dsr-gue': 5 };
export const MODE_NAME: Record<number, Forwarding> = { 1: 'dsr-l2', 2: 'dsr-ipip', 3: 'dsr-ipopt', 4: 'snat', 5: 'dsr-gue' };
export const VIP_F_HASH_SRC_PORT = 1;
export const VIP_F_SOURCE_RANGES = 2; // LB_VIP_F_SOURCE_RANGES: check lb_source_ranges
export const VIP_F_QUIC = 4; // LB_VIP_F_QUIC: route by the QUIC connection ID's server id (lb_quic.h)
export const PROTO_NUMBER: Record<Protocol, number> = { TCP: 6, UDP: 17 };
export const PROTO_NAME: Record<number, Protocol> = { 6: 'TCP', 17: 'UDP' };
export const MAX_SRC4 = DATAPLANE_LIMITS.lbSrc4; // LB_MAX_SRC4 (lb_consts.h)

/** lb_counters indexes, in enum lb_counter order (lb_consts.h). */
export const COUNTER_NAMES = [
  'pass_not_ip', 'pass_short_header', 'pass_not_vip', 'pass_snat',
  'drop_malformed_l3', 'drop_truncated_l3', 'drop_truncated_l4', 'drop_malformed_l4', 'drop_fragment',
  'drop_no_service', 'drop_no_real', 'drop_real_missing', 'drop_fib', 'drop_fib_no_neigh',
  'drop_ipopt_no_room', 'drop_unsupported', 'drop_adjust',
  'ct_hit', 'ct_miss', 'icmp_sent', 'tx', 'redirect', 'ct_rate_limited',
  'drop_martian', 'drop_l2_not_unicast', 'drop_bad_ip_csum', 'icmp_echo_reply', 'drop_source_range',
] as const;
export type CounterName = (typeof COUNTER_NAMES)[number];

/** Expected BTF layouts: struct name -> size and member offsets. */
export const LAYOUTS: Record<string, { size: number; members: Record<string, number> }> = {
  lb_vip_key: { size: 20, members: { addr: 0, port: 16, proto: 18, family: 19 } },
  lb_vip_value: { size: 16, members: { service_id: 0, target_port: 4, mode: 6, flags: 7, stats_slot: 8, affinity_s: 12 } },
  lb_real: { size: 20, members: { addr: 0, family: 16, flags: 17, slot: 18 } },
  lb_real_slot: { size: 24, members: { real_id: 0, real: 4 } },
  lb_flow_key: { size: 40, members: { src: 0, dst: 16, sport: 32, dport: 34, proto: 36, family: 37 } },
  lb_flow_value: { size: 24, members: { real_id: 0, service_id: 4, real_slot: 8, last_seen: 12, chosen_ns: 16 } },
  lb_config: { size: 72, members: { hash_seed: 0, mtu: 4, src4_count: 8, src6_set: 12, src4: 16, src6: 48, new_flow_rate: 64, flags: 68 } },
  lb_traffic: { size: 24, members: { packets: 0, bytes: 8, new_flows: 16 } },
  lb_real_traffic: { size: 40, members: { packets: 0, bytes: 8, new_flows: 16, tcp_packets: 24, tcp_syns: 32 } },
  lb_src_range_key: { size: 28, members: { prefixlen: 0, service_id: 4, family: 8, addr: 12 } },
  lb_affinity_key: { size: 24, members: { client: 0, service_id: 16, family: 20 } },
  lb_affinity_value: { size: 16, members: { last_ns: 0, real_id: 8, real_slot: 12 } },
  lb_quic_server_key: { size: 8, members: { service_id: 0, server_id: 4 } },
  lb_quic_server: { size: 8, members: { real_id: 0, real_slot: 4 } },
};

/** Session affinity (lb_affinity.h): the LRU table of remembered clients and its counters, in enum
 * lb_affinity_counter order. */
export const AFFINITY_MAPS = { table: 'lb_affinity', stats: 'lb_affinity_stats' } as const;
export const AFFINITY_COUNTER_NAMES = ['affinity_hit', 'affinity_miss', 'affinity_expired', 'affinity_real_gone'] as const;

/** QUIC connection-ID routing (lb_quic.h): server id -> real per service, and its counters in enum lb_quic_counter
 * order. */
export const QUIC_MAPS = { servers: 'lb_quic_servers', stats: 'lb_quic_stats' } as const;
export const QUIC_COUNTER_NAMES = ['quic_routed', 'quic_initial', 'quic_no_id', 'quic_unknown_id', 'quic_malformed'] as const;

// ------------------------------------------------------------------ addresses

// Parsing and canonical formatting live in src/render/ip.ts (one implementation for the whole project); these
// adapt it to the 16-byte address fields of the BPF structs.

/** Address text -> 16 bytes (IPv4 in the first 4). */
export function addr16(addr: string): Buffer {
  const out = Buffer.alloc(16);
  out.set(requireIp(addr).bytes, 0);
  return out;
}

/** 16 bytes + family -> canonical text (IPv6 compressed, RFC 5952). */
export function addrText(b: Buffer, family: number): string {
  if (family !== 4 && family !== 6) throw new Error(`bad address family ${family}`);
  return formatIp({ family, bytes: b.subarray(0, family === 4 ? 4 : 16) });
}

export function familyOf(addr: string): 4 | 6 {
  return ipFamily(addr);
}

// ------------------------------------------------------------------ keys and values

export interface VipKey { addr: string; family: 4 | 6; port: number; proto: number }
/** statsSlot: the service's index in lb_service_stats, chosen by the loader (0 when decoding ignores it). */
/** affinityS: the service's session affinity timeout in seconds (0 or absent: none). */
export interface VipValue { serviceId: number; targetPort: number; mode: number; flags: number; statsSlot?: number; affinityS?: number }

/** Bytes of an lb_vip_value (and of the all-zero value of an address marker). */
export const VIP_VALUE_SIZE = 16;

export function encodeVipKey(k: VipKey): Buffer {
  const b = Buffer.alloc(20);
  addr16(k.addr).copy(b, 0);
  b.writeUInt16BE(k.port, 16);
  b[18] = k.proto;
  b[19] = k.family;
  return b;
}

export function decodeVipKey(b: Buffer): VipKey {
  const family = b[19] === 6 ? 6 : 4;
  return { addr: addrText(b.subarray(0, 16), family), family, port: b.readUInt16BE(16), proto: b[18]! };
}

export function encodeVipValue(v: VipValue): Buffer {
  const b = Buffer.alloc(VIP_VALUE_SIZE);
  b.writeUInt32LE(v.serviceId, 0);
  b.writeUInt16BE(v.targetPort, 4);
  b[6] = v.mode;
  b[7] = v.flags;
  b.writeUInt32LE(v.statsSlot ?? 0, 8);
  b.writeUInt32LE(v.affinityS ?? 0, 12);
  return b;
}

/** An lb_vips key with port 0 and proto 0: a VIP address marker, not a listener. */
export const isMarkerKey = (k: Buffer): boolean => k.readUInt16BE(16) === 0 && k[18] === 0;

export function decodeVipValue(b: Buffer): VipValue {
  return { serviceId: b.readUInt32LE(0), targetPort: b.readUInt16BE(4), mode: b[6]!, flags: b[7]!, statsSlot: b.readUInt32LE(8),
    affinityS: b.length >= 16 ? b.readUInt32LE(12) : 0 };
}

export const encodeU32 = u32.encode;

/** lb_real; `slot` is the real's dense index (lb_real_slots, lb_real_stats), chosen by the loader. */
export function encodeReal(address: string, family: 4 | 6, slot = 0): Buffer {
  const b = Buffer.alloc(20);
  addr16(address).copy(b, 0);
  b[16] = family;
  b.writeUInt16LE(slot, 18);
  return b;
}

export const realSlotOf = (lbReal: Buffer): number => lbReal.readUInt16LE(18);

/** lb_real_slot: the real's id and lb_real value, stored at its slot. */
export function encodeRealSlot(realId: number, lbReal: Buffer): Buffer {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(realId, 0);
  lbReal.copy(b, 4);
  return b;
}

export function decodeReal(b: Buffer): { address: string; family: 4 | 6 } {
  const family = b[16] === 6 ? 6 : 4;
  return { address: addrText(b.subarray(0, 16), family), family };
}

export interface ConfigValue {
  hashSeed: number; mtu: number; src4: string[]; src6?: string;
  /** New-flow rate guard: connection-table inserts per second per CPU; 0 or absent = off. */
  newFlowRate?: number;
}

/** lb_config.flags (lb_sync.h LB_CFG_F_*): not part of the planned settings; the flow sync sets them, and a settings
 * write keeps what the map holds (configFlags). */
export const CONFIG_FLAGS = { syncPublish: 1 } as const;
export const CONFIG_BYTES = 72;
const CONFIG_FLAGS_OFFSET = 68;

/** The flags of an lb_config value (0 for a value of an older layout without them). */
export function configFlags(b: Uint8Array | null | undefined): number {
  return b && b.length >= CONFIG_FLAGS_OFFSET + 4 ? Buffer.from(b.buffer, b.byteOffset, b.length).readUInt32LE(CONFIG_FLAGS_OFFSET) : 0;
}

export function encodeConfig(c: ConfigValue, flags = 0): Buffer {
  const b = Buffer.alloc(CONFIG_BYTES);
  b.writeUInt32LE(flags >>> 0, CONFIG_FLAGS_OFFSET);
  b.writeUInt32LE(c.hashSeed >>> 0, 0);
  b.writeUInt32LE(c.mtu, 4);
  const src4 = c.src4.slice(0, MAX_SRC4);
  b.writeUInt32LE(src4.length, 8);
  b.writeUInt32LE(c.src6 ? 1 : 0, 12);
  src4.forEach((a, i) => addr16(a).copy(b, 16 + i * 4, 0, 4));
  if (c.src6) addr16(c.src6).copy(b, 48);
  b.writeUInt32LE(c.newFlowRate ?? 0, 64);
  return b;
}

export function decodeConfig(b: Buffer): ConfigValue {
  const n = Math.min(b.readUInt32LE(8), MAX_SRC4);
  const src4 = Array.from({ length: n }, (_, i) => addrText(b.subarray(16 + i * 4, 20 + i * 4), 4));
  return { hashSeed: b.readUInt32LE(0), mtu: b.readUInt32LE(4), src4, src6: b.readUInt32LE(12) ? addrText(b.subarray(48, 64), 6) : undefined,
    newFlowRate: b.readUInt32LE(64) };
}

export interface FlowKey { src: string; dst: string; sport: number; dport: number; proto: number; family: 4 | 6 }

export function encodeFlowKey(k: FlowKey): Buffer {
  const b = Buffer.alloc(40);
  addr16(k.src).copy(b, 0);
  addr16(k.dst).copy(b, 16);
  b.writeUInt16BE(k.sport, 32);
  b.writeUInt16BE(k.dport, 34);
  b[36] = k.proto;
  b[37] = k.family;
  return b;
}

export function decodeFlowKey(b: Buffer): FlowKey {
  const family = b[37] === 6 ? 6 : 4;
  return { src: addrText(b.subarray(0, 16), family), dst: addrText(b.subarray(16, 32), family),
    sport: b.readUInt16BE(32), dport: b.readUInt16BE(34), proto: b[36]!, family };
}

/** lb_flow_value: the real a flow was given, and when (`chosenNs`, CLOCK_MONOTONIC of this node; 0n = unknown). */
export interface FlowValue { realId: number; serviceId: number; realSlot: number; lastSeen: number; chosenNs: bigint }

export const FLOW_VALUE_BYTES = 24;

export function encodeFlowValue(v: FlowValue): Buffer {
  const b = Buffer.alloc(FLOW_VALUE_BYTES);
  b.writeUInt32LE(v.realId, 0);
  b.writeUInt32LE(v.serviceId, 4);
  b.writeUInt32LE(v.realSlot, 8);
  b.writeUInt32LE(v.lastSeen, 12);
  b.writeBigUInt64LE(v.chosenNs, 16);
  return b;
}

export function decodeFlowValue(b: Buffer): FlowValue {
  return { realId: b.readUInt32LE(0), serviceId: b.readUInt32LE(4), realSlot: b.readUInt32LE(8), lastSeen: b.readUInt32LE(12),
    chosenNs: b.readBigUInt64LE(16) };
}

/** lb_flow_value.last_seen's unit: CLOCK_MONOTONIC >> 30 (1.07 s). */
export const FLOW_LAST_SEEN_SHIFT = 30n;

// ------------------------------------------------------------------ source ranges (lb_source_ranges.h)

/** LB_SRC_RANGE_FIXED_BITS: service id and family, matched whole before the client prefix. */
const SRC_RANGE_FIXED_BITS = 64;
/** An lb_source_ranges value: the trie's answer is the entry itself; the value says only "allowed". */
export const SOURCE_RANGE_ALLOW = Buffer.from([1, 0, 0, 0]);

/** lb_src_range_key of (service, canonical prefix). */
export function encodeSourceRangeKey(serviceId: number, prefix: string): Buffer {
  const c = parseCidr(prefix);
  if (!c) throw new Error(`'${prefix}' is not an address prefix`);
  const b = Buffer.alloc(28);
  b.writeUInt32LE(SRC_RANGE_FIXED_BITS + c.prefix, 0);
  b.writeUInt32LE(serviceId, 4);
  b[8] = c.family;
  b.set(c.bytes, 12);
  return b;
}

/** lb_src_range_key -> (service, canonical prefix); host bits beyond the prefix (never written by us) are cleared. */
export function decodeSourceRangeKey(b: Buffer): { serviceId: number; prefix: string } {
  const family = b[8] === 6 ? 6 : 4;
  const len = Math.max(0, Math.min(b.readUInt32LE(0) - SRC_RANGE_FIXED_BITS, family === 4 ? 32 : 128));
  const c = parseCidr(`${addrText(b.subarray(12, 28), family)}/${len}`)!;
  return { serviceId: b.readUInt32LE(4), prefix: formatCidr(c) };
}

/** lb_affinity key: a client address within a service. */
export interface AffinityKey { client: string; family: 4 | 6; serviceId: number }
export interface AffinityValue { lastNs: bigint; realId: number; realSlot: number }

export function encodeAffinityKey(k: AffinityKey): Buffer {
  const b = Buffer.alloc(24);
  addr16(k.client).copy(b, 0);
  b.writeUInt32LE(k.serviceId, 16);
  b[20] = k.family;
  return b;
}

export function decodeAffinityKey(b: Buffer): AffinityKey {
  const family = b[20] === 6 ? 6 : 4;
  return { client: addrText(b.subarray(0, 16), family), family, serviceId: b.readUInt32LE(16) };
}

export function encodeAffinityValue(v: AffinityValue): Buffer {
  const b = Buffer.alloc(16);
  b.writeBigUInt64LE(v.lastNs, 0);
  b.writeUInt32LE(v.realId, 8);
  b.writeUInt32LE(v.realSlot, 12);
  return b;
}

export function decodeAffinityValue(b: Buffer): AffinityValue {
  return { lastNs: b.readBigUInt64LE(0), realId: b.readUInt32LE(8), realSlot: b.readUInt32LE(12) };
}

/** lb_quic_server_key: a server id of a service. */
export function encodeQuicServerKey(serviceId: number, serverId: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32LE(serviceId, 0);
  b.writeUInt32LE(serverId, 4);
  return b;
}

/** lb_quic_server: the real (its id, and its slot on this node). */
export function encodeQuicServer(realId: number, realSlot: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32LE(realId, 0);
  b.writeUInt32LE(realSlot, 4);
  return b;
}

export function decodeQuicServer(key: Buffer, value: Buffer): { serviceId: number; serverId: number; realId: number; realSlot: number } {
  return { serviceId: key.readUInt32LE(0), serverId: key.readUInt32LE(4), realId: value.readUInt32LE(0), realSlot: value.readUInt32LE(4) };
}
