// Backend-specific packets on top of the shared builder (test/lib/packets.ts): short forms for the frames the
// backend TC tests need, the ipopt forms an LB sends (IPv4 option, IPv6 destination-options header), ICMP errors
// quoting a packet, and a parser that recomputes every checksum from scratch.
import {
  IPPROTO,
  dsrOption,
  encapsulate,
  gueEncapsulate,
  familyOf,
  frame as ethFrame,
  icmpv4,
  icmpv6,
  ipBytes,
  ipPacket as sharedIpPacket,
  ipv4Header,
  ipv6Header,
  onesSum,
  pseudoHeader,
  tcpSegment,
  udpDatagram,
} from './packets.js';
import { formatAddr } from '../../src/bpf/backend/codec.js';

export { familyOf };
export const ETH_P_IP = 0x0800;
export const ETH_P_IPV6 = 0x86dd;
export const PROTO = { ICMP: IPPROTO.ICMP, IPIP: IPPROTO.IPIP, TCP: IPPROTO.TCP, UDP: IPPROTO.UDP, IPV6: IPPROTO.IPV6, DSTOPTS: 60, ICMPV6: IPPROTO.ICMPV6 } as const;

export function addrBytes(a: string): Buffer {
  return ipBytes(a);
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
  if (s.proto === 'UDP') return udpDatagram(src, dst, { sport: s.sport, dport: s.dport, payload: s.payload, ...(s.udpNoChecksum && { checksum: 0 }) });
  return tcpSegment(src, dst, { sport: s.sport, dport: s.dport, payload: s.payload, flags: s.tcpFlags ?? 0x02 });
}

const l4Shared = (s: L4Spec) =>
  s.proto === 'UDP'
    ? { udp: { sport: s.sport, dport: s.dport, payload: s.payload, ...(s.udpNoChecksum && { checksum: 0 }) } }
    : { tcp: { sport: s.sport, dport: s.dport, payload: s.payload, flags: s.tcpFlags ?? 0x02 } };

/** Ethernet header (test MACs) in front of an IP packet. */
export function eth(l3: Buffer, _family?: 4 | 6): Buffer {
  return ethFrame({}, l3);
}

/** An IP packet (no Ethernet) carrying a TCP/UDP segment from src to dst. */
export function ipPacket(src: string, dst: string, s: L4Spec): Buffer {
  return sharedIpPacket({ src, dst, l4: l4Shared(s), v4: { id: 0x1234, df: true } });
}

/** A complete frame src -> dst carrying a TCP/UDP segment. */
export function frame(src: string, dst: string, s: L4Spec): Buffer {
  return eth(ipPacket(src, dst, s));
}

/** IP-in-IP: `inner` (an IP packet) inside an outer header outerSrc -> outerDst. */
export function encapFrame(outerSrc: string, outerDst: string, inner: Buffer): Buffer {
  return eth(encapsulate({ src: outerSrc, dst: outerDst, v4: { df: true } }, inner));
}

/** GUE (IP in UDP, variant 1): `inner` (an IP packet) in outer outerSrc -> outerDst + UDP sport -> dport, as the LB sends
 * it (UDP checksum 0 over IPv4, the full one over IPv6). */
export function gueFrame(outerSrc: string, outerDst: string, inner: Buffer, dport = 6080, sport = 51234): Buffer {
  return eth(gueEncapsulate({ src: outerSrc, dst: outerDst, sport, dport, v4: { df: true } }, inner));
}

/** Cilium's dsr_opt_v4: type 0x9a, len 8, port (be16), addr (4). */
export const dsrOpt4 = dsrOption;

/** Cilium's dsr_opt_v6: destination-options header {nexthdr, hdrlen 2, type 0x1b, len 20, addr, port, pad}. */
export function dsrExt6(nexthdr: number, vip: string, port: number): Buffer {
  const o = Buffer.alloc(24);
  o[0] = nexthdr;
  o[1] = 2;
  o[2] = 0x1b;
  o[3] = 20;
  ipBytes(vip).copy(o, 4);
  o.writeUInt16BE(port, 20);
  return o;
}

/** What an LB sends for an ipopt flow: client -> real:targetPort, carrying the VIP:port option. */
export function ipoptFrame(client: string, real: string, s: L4Spec, vip: string, vipPort: number): Buffer {
  const seg = l4(client, real, s);
  const proto = s.proto === 'TCP' ? PROTO.TCP : PROTO.UDP;
  if (familyOf(client) === 4) {
    const h = ipv4Header({ src: client, dst: real, proto, id: 0x1234, df: true, options: dsrOption(vip, vipPort) }, seg.length);
    return eth(Buffer.concat([h, seg]));
  }
  const ext = dsrExt6(proto, vip, vipPort);
  return eth(Buffer.concat([ipv6Header({ src: client, dst: real, nextHeader: PROTO.DSTOPTS }, ext.length + seg.length), ext, seg]));
}

/** An ICMP error from `from` to `to` quoting `quoted` (an IP packet): type 3 code 3 / ICMPv6 type 1 code 4. */
export function icmpErrorFrame(from: string, to: string, quoted: Buffer): Buffer {
  const fam = familyOf(from);
  const q = quoted.subarray(0, fam === 4 ? 28 : 48);
  const rest = Buffer.alloc(4);
  if (fam === 4) {
    const m = icmpv4(3, 3, rest, q);
    return eth(Buffer.concat([ipv4Header({ src: from, dst: to, proto: PROTO.ICMP, id: 0x1234, df: true }, m.length), m]));
  }
  const m = icmpv6(from, to, 1, 4, rest, q);
  return eth(Buffer.concat([ipv6Header({ src: from, dst: to, nextHeader: PROTO.ICMPV6 }, m.length), m]));
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
      ipChecksumOk: onesSum(ip.subarray(0, ihl)) === 0xffff,
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
      r.l4ChecksumOk = (r.family === 4 && r.udpChecksum === 0) || onesSum(ph, p) === 0xffff;
    } else {
      r.l4ChecksumOk = onesSum(ph, p) === 0xffff;
    }
  } else if (r.proto === PROTO.ICMP) {
    r.l4ChecksumOk = onesSum(p) === 0xffff;
  } else if (r.proto === PROTO.ICMPV6) {
    r.l4ChecksumOk = onesSum(pseudoHeader(r.src, r.dst, PROTO.ICMPV6, p.length), p) === 0xffff;
  }
  return r;
}
