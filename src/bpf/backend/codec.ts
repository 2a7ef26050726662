// Byte layouts of the backend TC programs' maps (src/bpf/include/backend_structs.h), and the pure mapping from
// the desired state of a backend node to the entries of be_vips. The layouts are checked against the
// object's BTF at load (see BTF_LAYOUTS), so a change on one side without the other fails loudly.
import type { DesiredState } from '../../render/state.js';
import { desiredBackendTunnels, desiredBackendVips, type BackendTunnelAddr, type BackendVip } from '../../render/ops.js';
import type { Protocol } from '../../render/model.js';
import { formatIp, requireIp } from '../../render/ip.js';

export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;

/** be_vip_value.flags (BE_VIP_F_* in backend_consts.h). */
export const VIP_FLAG_IPIP = 0x01;
export const VIP_FLAG_IPOPT = 0x02;

/** be_addr_value.flags (BE_ADDR_F_* in backend_consts.h). */
export const ADDR_FLAG_LB_SOURCE = 0x01;
export const ADDR_FLAG_LOCAL = 0x02;

/** Names of the per-CPU counters, in the order of `enum be_stat` (backend_consts.h). */
export const STAT_NAMES = [
  'rx_packets',
  'decap_ipip4',
  'decap_ipip6',
  'decap_4in6',
  'decap_6in4',
  'ipip_not_vip',
  'ipopt4',
  'ipopt6',
  'ipopt_not_vip',
  'conn_update_fail',
  'adjust_fail',
  'tx_packets',
  'reply4_rewrite',
  'reply6_rewrite',
  'icmp4_rewrite',
  'icmp6_rewrite',
  'rewrite_fail',
  'fragment',
  'bad_ip_csum',
  'decap_bad_outer',
  'decap_not_allowed',
  'ipopt_prev_target',
  'decap_gue4',
  'decap_gue6',
] as const;
export type StatName = (typeof STAT_NAMES)[number];

/** Expected layouts, for checkBtfLayout(obj, structName, expected). Offsets in bytes. */
export const BTF_LAYOUTS = {
  be_vip_key: { size: 20, members: { addr: 0, port: 16, proto: 18, family: 19 } },
  be_vip_value: { size: 16, members: { target_port: 0, flags: 2, pad: 3, prev_target_port: 4, pad2: 6, prev_seen_ns: 8 } },
  be_conn_key: {
    size: 40,
    members: { client: 0, local: 16, client_port: 32, local_port: 34, proto: 36, family: 37, pad: 38 },
  },
  be_conn_value: { size: 32, members: { vip: 0, vip_port: 16, pad: 18, last_seen_ns: 24 } },
  be_addr_key: { size: 20, members: { addr: 0, family: 16, pad: 17 } },
  be_addr_value: { size: 4, members: { flags: 0, pad: 1 } },
} as const;

export const VIP_KEY_SIZE = BTF_LAYOUTS.be_vip_key.size;
export const VIP_VALUE_SIZE = BTF_LAYOUTS.be_vip_value.size;
/** be_vip_value as pins of before the previous targetPort was kept: target_port, flags, pad (the same first bytes). */
export const OLD_VIP_VALUE_SIZE = 4;

/** BE_PREV_TARGET_GRACE_NS (backend_consts.h): how long a previous targetPort stays trusted after its last use. */
export const PREV_TARGET_GRACE_NS = 300_000_000_000n;

/** The clock of bpf_ktime_get_ns(): CLOCK_MONOTONIC, which process.hrtime reads on Linux. */
export const monotonicNs = (): bigint => process.hrtime.bigint();
export const CONN_KEY_SIZE = BTF_LAYOUTS.be_conn_key.size;
export const CONN_VALUE_SIZE = BTF_LAYOUTS.be_conn_value.size;

/** A be_vips entry. Address entries (ipip) have port 0 and protocol null. */
export interface VipEntry {
  address: string;
  family: 4 | 6;
  port: number; // 0 for an address entry
  protocol: Protocol | null; // null for an address entry
  flags: number;
  targetPort: number; // 0 = not checked
  /** Listener entries: the targetPort before the last change, still trusted within the grace (absent: none). */
  previousTargetPort?: number;
  /** CLOCK_MONOTONIC ns of the change, renewed by the program at each option accepted at the previous port. */
  previousSeenNs?: bigint;
}

/** A be_conns entry: one ipopt flow and the VIP:port its replies must come from. */
export interface ConnEntry {
  family: 4 | 6;
  protocol: Protocol;
  client: string;
  clientPort: number;
  local: string;
  localPort: number;
  vip: string;
  vipPort: number;
  lastSeenNs: bigint;
}

function protoNumber(p: Protocol | null): number {
  if (p === null) return 0;
  return p === 'TCP' ? IPPROTO_TCP : IPPROTO_UDP;
}

function protoName(n: number): Protocol | null {
  if (n === 0) return null;
  if (n === IPPROTO_TCP) return 'TCP';
  if (n === IPPROTO_UDP) return 'UDP';
  throw new Error(`be_vips/be_conns: unexpected IP protocol ${n}`);
}

/** Writes an address into a 16-byte field (IPv4 in the first 4 bytes, rest zero). */
function writeAddr(buf: Buffer, offset: number, address: string, family: 4 | 6): void {
  const ip = requireIp(address);
  if (ip.family !== family) throw new Error(`address ${address} is not IPv${family}`);
  buf.set(ip.bytes, offset);
}

/** Canonical text of an address (RFC 5952 for IPv6), the same text render uses. */
export function formatAddr(bytes: Uint8Array, family: 4 | 6): string {
  return formatIp({ family, bytes: bytes.subarray(0, family === 4 ? 4 : 16) });
}

function readFamily(n: number, what: string): 4 | 6 {
  if (n !== 4 && n !== 6) throw new Error(`${what}: bad family byte ${n}`);
  return n;
}

export function encodeVipKey(e: Pick<VipEntry, 'address' | 'family' | 'port' | 'protocol'>): Buffer {
  const b = Buffer.alloc(VIP_KEY_SIZE);
  writeAddr(b, 0, e.address, e.family);
  b.writeUInt16BE(e.port, 16);
  b.writeUInt8(protoNumber(e.protocol), 18);
  b.writeUInt8(e.family, 19);
  return b;
}

export function encodeVipValue(e: Pick<VipEntry, 'flags' | 'targetPort' | 'previousTargetPort' | 'previousSeenNs'>): Buffer {
  const b = Buffer.alloc(VIP_VALUE_SIZE);
  b.writeUInt16BE(e.targetPort, 0);
  b.writeUInt8(e.flags, 2);
  if (e.previousTargetPort) {
    b.writeUInt16BE(e.previousTargetPort, 4);
    b.writeBigUInt64LE(e.previousSeenNs ?? 0n, 8);
  }
  return b;
}

/** Decodes a be_vips entry; a 4-byte value (a pin of the older layout) has no previous targetPort. */
export function decodeVipEntry(key: Buffer, value: Buffer): VipEntry {
  const family = readFamily(key.readUInt8(19), 'be_vips key');
  const e: VipEntry = {
    address: formatAddr(key.subarray(0, 16), family),
    family,
    port: key.readUInt16BE(16),
    protocol: protoName(key.readUInt8(18)),
    targetPort: value.readUInt16BE(0),
    flags: value.readUInt8(2),
  };
  const prev = value.length >= VIP_VALUE_SIZE ? value.readUInt16BE(4) : 0;
  if (prev) {
    e.previousTargetPort = prev;
    e.previousSeenNs = value.readBigUInt64LE(8);
  }
  return e;
}

/** Whether an entry's previous targetPort is still trusted at `nowNs` (the program's own test). */
export function previousTargetLive(e: Pick<VipEntry, 'previousTargetPort' | 'previousSeenNs'>, nowNs: bigint = monotonicNs()): boolean {
  return !!e.previousTargetPort && e.previousSeenNs !== undefined && nowNs >= e.previousSeenNs &&
    nowNs - e.previousSeenNs < PREV_TARGET_GRACE_NS;
}

export function encodeConnKey(
  e: Pick<ConnEntry, 'family' | 'protocol' | 'client' | 'clientPort' | 'local' | 'localPort'>,
): Buffer {
  const b = Buffer.alloc(CONN_KEY_SIZE);
  writeAddr(b, 0, e.client, e.family);
  writeAddr(b, 16, e.local, e.family);
  b.writeUInt16BE(e.clientPort, 32);
  b.writeUInt16BE(e.localPort, 34);
  b.writeUInt8(protoNumber(e.protocol), 36);
  b.writeUInt8(e.family, 37);
  return b;
}

export function encodeConnValue(e: Pick<ConnEntry, 'family' | 'vip' | 'vipPort' | 'lastSeenNs'>): Buffer {
  const b = Buffer.alloc(CONN_VALUE_SIZE);
  writeAddr(b, 0, e.vip, e.family);
  b.writeUInt16BE(e.vipPort, 16);
  b.writeBigUInt64LE(e.lastSeenNs, 24);
  return b;
}

export function decodeConnEntry(key: Buffer, value: Buffer): ConnEntry {
  const family = readFamily(key.readUInt8(37), 'be_conns key');
  const protocol = protoName(key.readUInt8(36));
  if (protocol === null) throw new Error('be_conns key: protocol 0');
  return {
    family,
    protocol,
    client: formatAddr(key.subarray(0, 16), family),
    clientPort: key.readUInt16BE(32),
    local: formatAddr(key.subarray(16, 32), family),
    localPort: key.readUInt16BE(34),
    vip: formatAddr(value.subarray(0, 16), family),
    vipPort: value.readUInt16BE(16),
    lastSeenNs: value.readBigUInt64LE(24),
  };
}

/** Identity of a be_vips entry (its key), for diffing desired against live. */
export function vipEntryId(e: Pick<VipEntry, 'address' | 'family' | 'port' | 'protocol'>): string {
  return `${e.family}|${e.address}|${e.port}|${e.protocol ?? '*'}`;
}

/** The be_vips entries a backend node needs (pure; the planner's desiredBackendVips as be_vips entries). */
export function desiredVipEntries(desired: Pick<DesiredState, 'vips' | 'guePort'>): VipEntry[] {
  return desiredBackendVips(desired).map((b) => vipEntryOf(b));
}

/** The planner's BackendVip as a be_vips entry (the kind becomes the flag). A previous targetPort is stamped
 * `nowNs` (the moment of the write starts its grace). */
export function vipEntryOf(b: BackendVip, nowNs?: bigint): VipEntry {
  const e: VipEntry = { address: b.address, family: b.family, port: b.port, protocol: b.protocol,
    flags: b.kind === 'listener' ? VIP_FLAG_IPOPT : VIP_FLAG_IPIP, targetPort: b.targetPort };
  if (b.kind === 'listener' && b.previousTargetPort) {
    e.previousTargetPort = b.previousTargetPort;
    e.previousSeenNs = nowNs ?? monotonicNs();
  }
  return e;
}

/** A be_tunnel_addrs entry: an address IP-in-IP may come from (an lb node) and/or go to (this node). */
export interface TunnelAddrEntry {
  address: string;
  family: 4 | 6;
  flags: number;
}

/** The be_tunnel_addrs entries a backend node needs (pure; the planner's desiredBackendTunnels as map entries). */
export function desiredTunnelAddrs(desired: Pick<DesiredState, 'addresses' | 'lbAddresses'>): TunnelAddrEntry[] {
  return desiredBackendTunnels(desired).map(tunnelEntryOf);
}

export function tunnelEntryOf(b: BackendTunnelAddr): TunnelAddrEntry {
  return { address: b.address, family: b.family, flags: (b.lbSource ? ADDR_FLAG_LB_SOURCE : 0) | (b.local ? ADDR_FLAG_LOCAL : 0) };
}

export function asBackendTunnel(e: TunnelAddrEntry): BackendTunnelAddr {
  return { address: e.address, family: e.family, lbSource: (e.flags & ADDR_FLAG_LB_SOURCE) !== 0, local: (e.flags & ADDR_FLAG_LOCAL) !== 0 };
}

export function encodeAddrKey(e: Pick<TunnelAddrEntry, 'address' | 'family'>): Buffer {
  const b = Buffer.alloc(BTF_LAYOUTS.be_addr_key.size);
  writeAddr(b, 0, e.address, e.family);
  b.writeUInt8(e.family, 16);
  return b;
}

export function encodeAddrValue(e: Pick<TunnelAddrEntry, 'flags'>): Buffer {
  const b = Buffer.alloc(BTF_LAYOUTS.be_addr_value.size);
  b.writeUInt8(e.flags, 0);
  return b;
}

export function decodeAddrEntry(key: Buffer, value: Buffer): TunnelAddrEntry {
  const family = readFamily(key.readUInt8(16), 'be_tunnel_addrs key');
  return { address: formatAddr(key.subarray(0, 16), family), family, flags: value.readUInt8(0) };
}
