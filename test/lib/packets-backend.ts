// Packet builder and parser for the backend TC program tests: Ethernet, IPv4 (with options), IPv6 (with the
// DSR destination-options header), TCP, UDP, ICMP errors, IP-in-IP. Checksums are computed from scratch here,
// independently of the BPF helpers under test, so a wrong incremental update in the program shows up.
import { parseIp } from '../../src/render/ip.js';
import { formatAddr } from '../../src/bpf/backend/codec.js';

export const ETH_P_IP = 0x0800;
export const ETH_P_IPV6 = 0x86dd;
export const PROTO = { ICMP: 1, IPIP: 4, TCP: 6, UDP: 17, IPV6: 41, DSTOPTS: 60, ICMPV6: 58 } as const;

const MAC_A = Buffer.from('020000000001', 'hex');
const MAC_B = Buffer.from('020000000002', 'hex');

export function addrBytes(a: string): Buffer {
  return Buffer.from(parseIp(a).bytes);
}

export function familyOf(a: string): 4 | 6 {
  return parseIp(a).family;
}

/** RFC 1071 one's-complement sum of `parts`, folded, not negated. */
function sum16(parts: Buffer[]): number {
  let s = 0;
  const all = Buffer.concat(parts);
  for (let i = 0; i < all.length; i += 2) s += (all[i]! << 8) | (i + 1 < all.length ? all[i + 1]! : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

export function checksum(parts: Buffer[]): number {
  return ~sum16(parts) & 0xffff;
}

function pseudoHeader(src: string, dst: string, proto: number, len: number): Buffer {
  const fam = familyOf(src);
  if (fam === 4) {
    const p = Buffer.alloc(12);
    addrBytes(src).copy(p, 0);
    addrBytes(dst).copy(p, 4);
    p[9] = proto;
    p.writeUInt16BE(len, 10);
    return p;
  }
  const p = Buffer.alloc(40);
  addrBytes(src).copy(p, 0);
  addrBytes(dst).copy(p, 16);
  p.writeUInt32BE(len, 32);
  p[39] = proto;
  return p;
}

export interface L4Spec {
  proto: 'TCP' | 'UDP';
  sport: number;
  dport: number;
  payload?: Buffer;
  /** TCP flags byte (default SYN). */
  tcpFlags?: number;
  /** IPv4 UDP without checksum. */
  udpNoChecksum?: boolean;
}

/** A TCP or UDP segment with its checksum over the pseudo header of (src, dst). */
export function l4(src: string, dst: string, s: L4Spec): Buffer {
  const payload = s.payload ?? Buffer.alloc(0);
  if (s.proto === 'UDP') {
    const h = Buffer.alloc(8);
    h.writeUInt16BE(s.sport, 0);
    h.writeUInt16BE(s.dport, 2);
    h.writeUInt16BE(8 + payload.length, 4);
    if (!s.udpNoChecksum) {
      let c = checksum([pseudoHeader(src, dst, PROTO.UDP, 8 + payload.length), h, payload]);
      if (c === 0) c = 0xffff;
      h.writeUInt16BE(c, 6);
    }
    return Buffer.concat([h, payload]);
  }
  const h = Buffer.alloc(20);
  h.writeUInt16BE(s.sport, 0);
  h.writeUInt16BE(s.dport, 2);
  h.writeUInt32BE(0x01020304, 4);
  h[12] = 5 << 4;
  h[13] = s.tcpFlags ?? 0x02;
  h.writeUInt16BE(64240, 14);
  h.writeUInt16BE(checksum([pseudoHeader(src, dst, PROTO.TCP, 20 + payload.length), h, payload]), 16);
  return Buffer.concat([h, payload]);
}

export function ipv4(src: string, dst: string, proto: number, payload: Buffer, options = Buffer.alloc(0)): Buffer {
  if (options.length % 4) throw new Error('IPv4 options must be a multiple of 4 bytes');
  const h = Buffer.alloc(20 + options.length);
  h[0] = 0x40 | ((20 + options.length) / 4);
  h.writeUInt16BE(h.length + payload.length, 2);
  h.writeUInt16BE(0x1234, 4);
  h.writeUInt16BE(0x4000, 6); // DF
  h[8] = 64;
  h[9] = proto;
  addrBytes(src).copy(h, 12);
  addrBytes(dst).copy(h, 16);
  options.copy(h, 20);
  h.writeUInt16BE(checksum([h]), 10);
  return Buffer.concat([h, payload]);
}

export function ipv6(src: string, dst: string, nexthdr: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(40);
  h.writeUInt32BE(0x60000000, 0);
  h.writeUInt16BE(payload.length, 4);
  h[6] = nexthdr;
  h[7] = 64;
  addrBytes(src).copy(h, 8);
  addrBytes(dst).copy(h, 24);
  return Buffer.concat([h, payload]);
}

export function eth(l3: Buffer, family: 4 | 6): Buffer {
  const h = Buffer.alloc(14);
  MAC_B.copy(h, 0);
  MAC_A.copy(h, 6);
  h.writeUInt16BE(family === 4 ? ETH_P_IP : ETH_P_IPV6, 12);
  return Buffer.concat([h, l3]);
}

/** An IP packet (no Ethernet) carrying a TCP/UDP segment from src to dst. */
export function ipPacket(src: string, dst: string, s: L4Spec): Buffer {
  const seg = l4(src, dst, s);
  const proto = s.proto === 'TCP' ? PROTO.TCP : PROTO.UDP;
  return familyOf(src) === 4 ? ipv4(src, dst, proto, seg) : ipv6(src, dst, proto, seg);
}

/** A complete frame src -> dst carrying a TCP/UDP segment. */
export function frame(src: string, dst: string, s: L4Spec): Buffer {
  return eth(ipPacket(src, dst, s), familyOf(src));
}

/** IP-in-IP: `inner` (an IP packet) inside an outer header outerSrc -> outerDst. */
export function encapFrame(outerSrc: string, outerDst: string, inner: Buffer): Buffer {
  const innerFamily = (inner[0]! >> 4) as 4 | 6;
  const proto = innerFamily === 4 ? PROTO.IPIP : PROTO.IPV6;
  const outerFamily = familyOf(outerSrc);
  const l3 = outerFamily === 4 ? ipv4(outerSrc, outerDst, proto, inner) : ipv6(outerSrc, outerDst, proto, inner);
  return eth(l3, outerFamily);
}

/** Cilium's dsr_opt_v4: type 0x9a, len 8, port (be16), addr (4). */
export function dsrOpt4(vip: string, port: number): Buffer {
  const o = Buffer.alloc(8);
  o[0] = 0x9a;
  o[1] = 8;
  o.writeUInt16BE(port, 2);
  addrBytes(vip).copy(o, 4);
  return o;
}

/** Cilium's dsr_opt_v6: destination-options header {nexthdr, hdrlen 2, type 0x1b, len 20, addr, port, pad}. */
export function dsrExt6(nexthdr: number, vip: string, port: number): Buffer {
  const o = Buffer.alloc(24);
  o[0] = nexthdr;
  o[1] = 2;
  o[2] = 0x1b;
  o[3] = 20;
  addrBytes(vip).copy(o, 4);
  o.writeUInt16BE(port, 20);
  return o;
}

/** What an LB sends for an ipopt flow: client -> real:targetPort, carrying the VIP:port option. */
export function ipoptFrame(client: string, real: string, s: L4Spec, vip: string, vipPort: number): Buffer {
  const seg = l4(client, real, s);
  const proto = s.proto === 'TCP' ? PROTO.TCP : PROTO.UDP;
  if (familyOf(client) === 4) return eth(ipv4(client, real, proto, seg, dsrOpt4(vip, vipPort)), 4);
  return eth(ipv6(client, real, PROTO.DSTOPTS, Buffer.concat([dsrExt6(proto, vip, vipPort), seg])), 6);
}

/** An ICMP error from `from` to `to` quoting `quoted` (an IP packet): type 3 code 3 / ICMPv6 type 1 code 4. */
export function icmpErrorFrame(from: string, to: string, quoted: Buffer): Buffer {
  const fam = familyOf(from);
  const q = quoted.subarray(0, fam === 4 ? 28 : 48);
  const h = Buffer.alloc(8);
  if (fam === 4) {
    h[0] = 3;
    h[1] = 3;
    h.writeUInt16BE(checksum([h, q]), 2);
    return eth(ipv4(from, to, PROTO.ICMP, Buffer.concat([h, q])), 4);
  }
  h[0] = 1;
  h[1] = 4;
  h.writeUInt16BE(checksum([pseudoHeader(from, to, PROTO.ICMPV6, 8 + q.length), h, q]), 2);
  return eth(ipv6(from, to, PROTO.ICMPV6, Buffer.concat([h, q])), 6);
}

// ---- parsing and checking --------------------------------------------------------------------------------

export interface ParsedFrame {
  etherType: number;
  family: 4 | 6;
  src: string;
  dst: string;
  /** IPv4 header length in bytes / IPv6: 40. */
  headerLen: number;
  /** Protocol of the first header after the IP header (IPv6: including extension headers). */
  proto: number;
  /** IPv4 header checksum correct (always true for IPv6). */
  ipChecksumOk: boolean;
  /** IPv4 total length / IPv6 payload length + 40 matches the bytes present. */
  lengthOk: boolean;
  /** Bytes after the IP header. */
  payload: Buffer;
  sport?: number;
  dport?: number;
  /** Transport (or ICMP) checksum correct, recomputed from scratch. */
  l4ChecksumOk?: boolean;
  udpChecksum?: number;
}

function fmt(b: Buffer): string {
  return formatAddr(b, b.length === 4 ? 4 : 6);
}

/** Text of an address in the same form `parse()` returns (for comparing against a literal). */
export function addrText(a: string): string {
  return fmt(addrBytes(a));
}

export function parse(f: Buffer): ParsedFrame {
  const etherType = f.readUInt16BE(12);
  const ip = f.subarray(14);
  let r: ParsedFrame;
  if (etherType === ETH_P_IP) {
    const ihl = (ip[0]! & 0x0f) * 4;
    r = {
      etherType,
      family: 4,
      src: fmt(ip.subarray(12, 16)),
      dst: fmt(ip.subarray(16, 20)),
      headerLen: ihl,
      proto: ip[9]!,
      ipChecksumOk: sum16([ip.subarray(0, ihl)]) === 0xffff,
      lengthOk: ip.readUInt16BE(2) === ip.length,
      payload: ip.subarray(ihl),
    };
  } else if (etherType === ETH_P_IPV6) {
    r = {
      etherType,
      family: 6,
      src: fmt(ip.subarray(8, 24)),
      dst: fmt(ip.subarray(24, 40)),
      headerLen: 40,
      proto: ip[6]!,
      ipChecksumOk: true,
      lengthOk: ip.readUInt16BE(4) + 40 === ip.length,
      payload: ip.subarray(40),
    };
  } else {
    throw new Error(`not IP: ethertype 0x${etherType.toString(16)}`);
  }
  const p = r.payload;
  if (r.proto === PROTO.TCP || r.proto === PROTO.UDP) {
    r.sport = p.readUInt16BE(0);
    r.dport = p.readUInt16BE(2);
    const ph = pseudoHeader(r.src, r.dst, r.proto, p.length);
    if (r.proto === PROTO.UDP) {
      r.udpChecksum = p.readUInt16BE(6);
      r.l4ChecksumOk = (r.family === 4 && r.udpChecksum === 0) || sum16([ph, p]) === 0xffff;
    } else {
      r.l4ChecksumOk = sum16([ph, p]) === 0xffff;
    }
  } else if (r.proto === PROTO.ICMP) {
    r.l4ChecksumOk = sum16([p]) === 0xffff;
  } else if (r.proto === PROTO.ICMPV6) {
    r.l4ChecksumOk = sum16([pseudoHeader(r.src, r.dst, PROTO.ICMPV6, p.length), p]) === 0xffff;
  }
  return r;
}
