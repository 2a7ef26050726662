// General packet builder for tests: Ethernet (+802.1Q), IPv4 (options, fragments), IPv6, TCP, UDP,
// ICMP/ICMPv6, IP-in-IP. Checksums are computed here from scratch (RFC 1071 over the whole header or
// pseudo-header + segment), independently of any BPF code, so expected packets are an independent oracle.
// Every builder takes plain numbers/strings and returns a fresh Buffer; override fields (`checksum`,
// `totalLength`, `ihl`, `dataOffset`, ...) exist so tests can build malformed packets on purpose.
import { isIPv4, isIPv6 } from 'node:net';

export const ETH_P = { IPV4: 0x0800, IPV6: 0x86dd, ARP: 0x0806, VLAN: 0x8100 } as const;
export const IPPROTO = { ICMP: 1, IPIP: 4, TCP: 6, UDP: 17, IPV6: 41, FRAGMENT: 44, ICMPV6: 58 } as const;
export const TCP_FLAGS = { FIN: 0x01, SYN: 0x02, RST: 0x04, PSH: 0x08, ACK: 0x10, URG: 0x20 } as const;

/** "02:00:00:00:00:01" or "020000000001" -> 6 bytes */
export function mac(text: string): Buffer {
  const hex = text.replace(/[:-]/g, '');
  if (!/^[0-9a-fA-F]{12}$/.test(hex)) throw new Error(`bad MAC address '${text}'`);
  return Buffer.from(hex, 'hex');
}

/** IPv4 or IPv6 text -> 4 or 16 bytes (network order) */
export function ipBytes(addr: string): Buffer {
  if (isIPv4(addr)) return Buffer.from(addr.split('.').map(Number));
  if (!isIPv6(addr)) throw new Error(`bad IP address '${addr}'`);
  let text = addr;
  const v4tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4tail) {
    const b = ipBytes(v4tail[1]!);
    text = text.slice(0, -v4tail[1]!.length) + `${b.readUInt16BE(0).toString(16)}:${b.readUInt16BE(2).toString(16)}`;
  }
  const [head, rest] = text.includes('::') ? text.split('::') as [string, string] : [text, undefined];
  const h = head ? head.split(':') : [];
  const r = rest !== undefined && rest !== '' ? rest.split(':') : [];
  const groups = rest === undefined ? h : [...h, ...Array(8 - h.length - r.length).fill('0'), ...r];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

export function familyOf(addr: string): 4 | 6 {
  if (isIPv4(addr)) return 4;
  if (isIPv6(addr)) return 6;
  throw new Error(`bad IP address '${addr}'`);
}

/** One's-complement sum of 16-bit big-endian words (odd length padded with zero), folded, not negated. */
export function onesSum(...parts: Buffer[]): number {
  let s = 0;
  for (const p of parts) {
    for (let i = 0; i + 1 < p.length; i += 2) s += p.readUInt16BE(i);
    if (p.length % 2) s += p[p.length - 1]! << 8;
  }
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/** The Internet checksum (RFC 1071) of the concatenation of `parts` (each even-length except the last). */
export function internetChecksum(...parts: Buffer[]): number {
  return ~onesSum(Buffer.concat(parts)) & 0xffff;
}

/** TCP/UDP/ICMPv6 pseudo-header for src/dst of either family. */
export function pseudoHeader(src: string, dst: string, proto: number, length: number): Buffer {
  const s = ipBytes(src);
  const d = ipBytes(dst);
  if (s.length === 4) {
    const b = Buffer.alloc(12);
    s.copy(b, 0);
    d.copy(b, 4);
    b[9] = proto;
    b.writeUInt16BE(length, 10);
    return b;
  }
  const b = Buffer.alloc(40);
  s.copy(b, 0);
  d.copy(b, 16);
  b.writeUInt32BE(length, 32);
  b[39] = proto;
  return b;
}

// ---------------------------------------------------------------- L2

export interface EthSpec {
  dst?: string;
  src?: string;
  /** 802.1Q VLAN id; the tag is inserted with this TCI when set */
  vlan?: number;
  /** ethertype of the payload (default from the L3 header family) */
  type?: number;
}

export function ethernet(spec: EthSpec, type: number): Buffer {
  const head = Buffer.alloc(spec.vlan !== undefined ? 18 : 14);
  mac(spec.dst ?? '02:00:00:00:00:02').copy(head, 0);
  mac(spec.src ?? '02:00:00:00:00:01').copy(head, 6);
  if (spec.vlan !== undefined) {
    head.writeUInt16BE(ETH_P.VLAN, 12);
    head.writeUInt16BE(spec.vlan, 14);
    head.writeUInt16BE(spec.type ?? type, 16);
  } else {
    head.writeUInt16BE(spec.type ?? type, 12);
  }
  return head;
}

// ---------------------------------------------------------------- L3

export interface Ipv4Spec {
  src: string;
  dst: string;
  proto: number;
  ttl?: number;
  tos?: number;
  id?: number;
  df?: boolean;
  mf?: boolean;
  fragOffset?: number; // in 8-byte units
  options?: Buffer; // padded to a multiple of 4 by the caller
  // deliberate damage:
  ihl?: number;
  version?: number;
  totalLength?: number;
  checksum?: number;
}

export function ipv4Header(spec: Ipv4Spec, payloadLength: number): Buffer {
  const opts = spec.options ?? Buffer.alloc(0);
  if (opts.length % 4) throw new Error('IPv4 options must be padded to a multiple of 4 bytes');
  const h = Buffer.alloc(20 + opts.length);
  h[0] = ((spec.version ?? 4) << 4) | (spec.ihl ?? h.length / 4);
  h[1] = spec.tos ?? 0;
  h.writeUInt16BE(spec.totalLength ?? h.length + payloadLength, 2);
  h.writeUInt16BE(spec.id ?? 0, 4);
  h.writeUInt16BE((spec.df ? 0x4000 : 0) | (spec.mf ? 0x2000 : 0) | (spec.fragOffset ?? 0), 6);
  h[8] = spec.ttl ?? 64;
  h[9] = spec.proto;
  ipBytes(spec.src).copy(h, 12);
  ipBytes(spec.dst).copy(h, 16);
  opts.copy(h, 20);
  h.writeUInt16BE(spec.checksum ?? internetChecksum(h), 10);
  return h;
}

export interface Ipv6Spec {
  src: string;
  dst: string;
  nextHeader: number;
  hopLimit?: number;
  trafficClass?: number;
  flowLabel?: number;
  payloadLength?: number; // override
  version?: number;
}

export function ipv6Header(spec: Ipv6Spec, payloadLength: number): Buffer {
  const h = Buffer.alloc(40);
  const tc = spec.trafficClass ?? 0;
  h.writeUInt32BE((((spec.version ?? 6) << 28) | (tc << 20) | ((spec.flowLabel ?? 0) & 0xfffff)) >>> 0, 0);
  h.writeUInt16BE(spec.payloadLength ?? payloadLength, 4);
  h[6] = spec.nextHeader;
  h[7] = spec.hopLimit ?? 64;
  ipBytes(spec.src).copy(h, 8);
  ipBytes(spec.dst).copy(h, 24);
  return h;
}

/** IPv6 fragment extension header (8 bytes). */
export function ipv6FragmentHeader(nextHeader: number, offset8: number, more: boolean, id: number): Buffer {
  const h = Buffer.alloc(8);
  h[0] = nextHeader;
  h.writeUInt16BE((offset8 << 3) | (more ? 1 : 0), 2);
  h.writeUInt32BE(id >>> 0, 4);
  return h;
}

// ---------------------------------------------------------------- L4

export interface TcpSpec {
  sport: number;
  dport: number;
  seq?: number;
  ack?: number;
  flags?: number;
  window?: number;
  options?: Buffer; // multiple of 4
  payload?: Buffer;
  dataOffset?: number; // override (32-bit words)
  checksum?: number;
}

/** TCP segment with its checksum over the pseudo-header of src/dst. */
export function tcpSegment(src: string, dst: string, spec: TcpSpec): Buffer {
  const opts = spec.options ?? Buffer.alloc(0);
  const payload = spec.payload ?? Buffer.alloc(0);
  const h = Buffer.alloc(20 + opts.length);
  h.writeUInt16BE(spec.sport, 0);
  h.writeUInt16BE(spec.dport, 2);
  h.writeUInt32BE((spec.seq ?? 1) >>> 0, 4);
  h.writeUInt32BE((spec.ack ?? 0) >>> 0, 8);
  h[12] = (spec.dataOffset ?? h.length / 4) << 4;
  h[13] = spec.flags ?? TCP_FLAGS.SYN;
  h.writeUInt16BE(spec.window ?? 65535, 14);
  opts.copy(h, 20);
  const seg = Buffer.concat([h, payload]);
  seg.writeUInt16BE(spec.checksum ?? internetChecksum(pseudoHeader(src, dst, IPPROTO.TCP, seg.length), seg), 16);
  return seg;
}

export interface UdpSpec {
  sport: number;
  dport: number;
  payload?: Buffer;
  /** 0 = no checksum (IPv4 only) */
  checksum?: number;
  length?: number;
}

export function udpDatagram(src: string, dst: string, spec: UdpSpec): Buffer {
  const payload = spec.payload ?? Buffer.alloc(0);
  const d = Buffer.alloc(8 + payload.length);
  d.writeUInt16BE(spec.sport, 0);
  d.writeUInt16BE(spec.dport, 2);
  d.writeUInt16BE(spec.length ?? d.length, 4);
  payload.copy(d, 8);
  let c = spec.checksum ?? internetChecksum(pseudoHeader(src, dst, IPPROTO.UDP, d.length), d);
  if (spec.checksum === undefined && c === 0) c = 0xffff;
  d.writeUInt16BE(c, 6);
  return d;
}

/** ICMPv4 message: type, code, the 4 "rest of header" bytes, body; checksum over the message. */
export function icmpv4(type: number, code: number, rest: Buffer, body: Buffer): Buffer {
  const m = Buffer.concat([Buffer.from([type, code, 0, 0]), rest, body]);
  m.writeUInt16BE(internetChecksum(m), 2);
  return m;
}

/** ICMPv6 message with the pseudo-header checksum. */
export function icmpv6(src: string, dst: string, type: number, code: number, rest: Buffer, body: Buffer): Buffer {
  const m = Buffer.concat([Buffer.from([type, code, 0, 0]), rest, body]);
  m.writeUInt16BE(internetChecksum(pseudoHeader(src, dst, IPPROTO.ICMPV6, m.length), m), 2);
  return m;
}

// ---------------------------------------------------------------- whole packets

export type L4Spec = { tcp: TcpSpec } | { udp: UdpSpec } | { raw: Buffer };

export interface IpPacketSpec {
  src: string;
  dst: string;
  l4: L4Spec;
  /** IPv4 header fields (ignored for IPv6) */
  v4?: Partial<Omit<Ipv4Spec, 'src' | 'dst'>>;
  /** IPv6 header fields (ignored for IPv4) */
  v6?: Partial<Omit<Ipv6Spec, 'src' | 'dst'>>;
}

function l4Bytes(src: string, dst: string, l4: L4Spec): { proto: number; bytes: Buffer } {
  if ('tcp' in l4) return { proto: IPPROTO.TCP, bytes: tcpSegment(src, dst, l4.tcp) };
  if ('udp' in l4) return { proto: IPPROTO.UDP, bytes: udpDatagram(src, dst, l4.udp) };
  return { proto: -1, bytes: l4.raw };
}

/** An IPv4 or IPv6 packet (no L2), family from the addresses. */
export function ipPacket(spec: IpPacketSpec): Buffer {
  const { proto, bytes } = l4Bytes(spec.src, spec.dst, spec.l4);
  if (familyOf(spec.src) === 4) {
    const p = spec.v4?.proto ?? proto;
    if (p < 0) throw new Error('raw L4 payload needs v4.proto');
    return Buffer.concat([ipv4Header({ ...spec.v4, src: spec.src, dst: spec.dst, proto: p }, bytes.length), bytes]);
  }
  const nh = spec.v6?.nextHeader ?? proto;
  if (nh < 0) throw new Error('raw L4 payload needs v6.nextHeader');
  return Buffer.concat([ipv6Header({ ...spec.v6, src: spec.src, dst: spec.dst, nextHeader: nh }, bytes.length), bytes]);
}

/** Ethernet frame around an IP packet (ethertype from the IP version nibble). */
export function frame(eth: EthSpec, ip: Buffer): Buffer {
  const type = ip.length > 0 && ip[0]! >> 4 === 6 ? ETH_P.IPV6 : ETH_P.IPV4;
  return Buffer.concat([ethernet(eth, type), ip]);
}

/** IP-in-IP / IPv6-in-IPv6 / IPv4-in-IPv6 / IPv6-in-IPv4: an outer header in front of `inner`. */
export function encapsulate(outer: { src: string; dst: string; v4?: Partial<Ipv4Spec>; v6?: Partial<Ipv6Spec> }, inner: Buffer): Buffer {
  const innerProto = inner[0]! >> 4 === 6 ? IPPROTO.IPV6 : IPPROTO.IPIP;
  if (familyOf(outer.src) === 4)
    return Buffer.concat([ipv4Header({ ...outer.v4, src: outer.src, dst: outer.dst, proto: innerProto }, inner.length), inner]);
  return Buffer.concat([ipv6Header({ ...outer.v6, src: outer.src, dst: outer.dst, nextHeader: innerProto }, inner.length), inner]);
}

/** GUE variant 1 (dsr-gue): outer IPv4/IPv6 + UDP sport -> dport, the UDP payload the inner IP packet itself. The UDP
 * checksum is 0 over IPv4 (as the LB sends it) and the full checksum over IPv6, summed here over every byte. */
export function gueEncapsulate(outer: { src: string; dst: string; sport: number; dport: number; v4?: Partial<Ipv4Spec>; v6?: Partial<Ipv6Spec> },
  inner: Buffer): Buffer {
  const udp = Buffer.alloc(8);
  udp.writeUInt16BE(outer.sport, 0);
  udp.writeUInt16BE(outer.dport, 2);
  udp.writeUInt16BE(8 + inner.length, 4);
  if (familyOf(outer.src) === 4)
    return Buffer.concat([ipv4Header({ ...outer.v4, src: outer.src, dst: outer.dst, proto: IPPROTO.UDP }, 8 + inner.length), udp, inner]);
  const c = internetChecksum(pseudoHeader(outer.src, outer.dst, IPPROTO.UDP, 8 + inner.length), udp, inner);
  udp.writeUInt16BE(c === 0 ? 0xffff : c, 6);
  return Buffer.concat([ipv6Header({ ...outer.v6, src: outer.src, dst: outer.dst, nextHeader: IPPROTO.UDP }, 8 + inner.length), udp, inner]);
}

/** Cilium-layout DSR IPv4 option: type 0x9a, length 8, service port, service address. */
export function dsrOption(vip: string, port: number): Buffer {
  const o = Buffer.alloc(8);
  o[0] = 0x9a;
  o[1] = 8;
  o.writeUInt16BE(port, 2);
  ipBytes(vip).copy(o, 4);
  return o;
}

/** Hex with a space every 2 bytes, for readable diffs in assertion messages. */
export function hex(b: Buffer): string {
  return b.toString('hex').replace(/(.{4})/g, '$1 ').trim();
}

/** Verifies the checksums of an IPv4/IPv6 packet (no L2) and its TCP/UDP/ICMP payload; returns problems. */
export function checksumProblems(ip: Buffer): string[] {
  const problems: string[] = [];
  const v = ip[0]! >> 4;
  let proto: number, l4: Buffer, src: string, dst: string;
  if (v === 4) {
    const ihl = (ip[0]! & 0x0f) * 4;
    if (onesSum(ip.subarray(0, ihl)) !== 0xffff) problems.push('IPv4 header checksum');
    proto = ip[9]!;
    l4 = ip.subarray(ihl, ip.readUInt16BE(2));
    src = [...ip.subarray(12, 16)].join('.');
    dst = [...ip.subarray(16, 20)].join('.');
  } else {
    proto = ip[6]!;
    l4 = ip.subarray(40, 40 + ip.readUInt16BE(4));
    if (proto === 60 && l4.length >= 8) {
      // a destination-options header (the ipopt form of IPv6): the pseudo-header names the protocol after it
      proto = l4[0]!;
      l4 = l4.subarray((l4[1]! + 1) * 8);
    }
    const fmt = (b: Buffer) => Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2).toString(16)).join(':');
    src = fmt(ip.subarray(8, 24));
    dst = fmt(ip.subarray(24, 40));
  }
  if (proto === IPPROTO.TCP || (proto === IPPROTO.UDP && !(v === 4 && l4.readUInt16BE(6) === 0)) || proto === IPPROTO.ICMPV6) {
    if (onesSum(pseudoHeader(src, dst, proto, l4.length), l4) !== 0xffff) problems.push(`L4 (${proto}) checksum`);
  } else if (proto === IPPROTO.ICMP) {
    if (onesSum(l4) !== 0xffff) problems.push('ICMP checksum');
  } else if (proto === IPPROTO.IPIP || proto === IPPROTO.IPV6) {
    problems.push(...checksumProblems(l4).map((p) => `inner ${p}`));
  }
  return problems;
}
