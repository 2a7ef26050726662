// One line per captured frame, in the spirit of tcpdump's: what the frame is, layer by layer, including what the
// balancer added (an outer IP-in-IP header, the DSR IPv4 option or IPv6 destination option). Pure, and total: a
// frame cut by the snap length or malformed on purpose ends its line with `[truncated]`, never an exception.
import { formatIp as formatAddress } from '../../render/ip.js';

const formatIp = (b: Buffer) => formatAddress({ family: b.length === 4 ? 4 : 6, bytes: b });

const ETH_P_IP = 0x0800;
const ETH_P_IPV6 = 0x86dd;
const ETH_P_8021Q = 0x8100;
const ETH_P_8021AD = 0x88a8;
const DSR_OPT4_TYPE = 0x9a;
const DSR_OPT6_TYPE = 0x1b;
const IPPROTO = { ICMP: 1, IPIP: 4, TCP: 6, UDP: 17, IPV6: 41, DSTOPTS: 60, ICMPV6: 58 } as const;
const MAX_NESTING = 3;

function mac(b: Buffer, o: number): string {
  return [...b.subarray(o, o + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

function tcpFlags(f: number): string {
  const names: [number, string][] = [[0x02, 'S'], [0x01, 'F'], [0x04, 'R'], [0x08, 'P'], [0x10, '.'], [0x20, 'U']];
  return names.filter(([bit]) => f & bit).map(([, n]) => n).join('') || 'none';
}

function l4(b: Buffer, o: number, proto: number, src: string, dst: string, v6: boolean): string {
  const join = (sp: number, dp: number) => `${v6 ? `[${src}]` : src}:${sp} > ${v6 ? `[${dst}]` : dst}:${dp}`;
  if (proto === IPPROTO.TCP) {
    if (o + 14 > b.length) return `${src} > ${dst} TCP [truncated]`;
    return `${join(b.readUInt16BE(o), b.readUInt16BE(o + 2))} TCP [${tcpFlags(b[o + 13]!)}] seq ${b.readUInt32BE(o + 4)}`;
  }
  if (proto === IPPROTO.UDP) {
    if (o + 8 > b.length) return `${src} > ${dst} UDP [truncated]`;
    return `${join(b.readUInt16BE(o), b.readUInt16BE(o + 2))} UDP len ${b.readUInt16BE(o + 4)}`;
  }
  if (proto === IPPROTO.ICMP || proto === IPPROTO.ICMPV6) {
    const name = proto === IPPROTO.ICMP ? 'ICMP' : 'ICMPv6';
    if (o + 2 > b.length) return `${src} > ${dst} ${name} [truncated]`;
    return `${src} > ${dst} ${name} type ${b[o]} code ${b[o + 1]}`;
  }
  return `${src} > ${dst} proto ${proto}`;
}

function ipv4(b: Buffer, o: number, depth: number): string {
  if (o + 20 > b.length) return 'IPv4 [truncated]';
  const ihl = (b[o]! & 0x0f) * 4;
  if ((b[o]! >> 4) !== 4 || ihl < 20) return 'IPv4 [bad header]';
  const src = formatIp(b.subarray(o + 12, o + 16));
  const dst = formatIp(b.subarray(o + 16, o + 20));
  const proto = b[o + 9]!;
  const frag = b.readUInt16BE(o + 6) & 0x3fff;
  let opts = '';
  if (ihl > 20 && o + 28 <= b.length && b[o + 20] === DSR_OPT4_TYPE && b[o + 21] === 8)
    opts = ` [dsr-opt ${formatIp(b.subarray(o + 24, o + 28))}:${b.readUInt16BE(o + 22)}]`;
  else if (ihl > 20) opts = ` [options ${ihl - 20}B]`;
  const head = `IPv4${opts}${frag ? ' [fragment]' : ''}`;
  const next = o + ihl;
  if (frag & 0x1fff) return `${head} ${src} > ${dst} proto ${proto}`;
  if (proto === IPPROTO.IPIP || proto === IPPROTO.IPV6) return `${head} ${src} > ${dst} encap | ${inner(b, next, proto, depth)}`;
  return `${head} ${l4(b, next, proto, src, dst, false)}`;
}

function ipv6(b: Buffer, o: number, depth: number): string {
  if (o + 40 > b.length) return 'IPv6 [truncated]';
  if ((b[o]! >> 4) !== 6) return 'IPv6 [bad header]';
  const src = formatIp(b.subarray(o + 8, o + 24));
  const dst = formatIp(b.subarray(o + 24, o + 40));
  let proto = b[o + 6]!;
  let next = o + 40;
  let opts = '';
  if (proto === IPPROTO.DSTOPTS) {
    if (next + 2 > b.length) return `IPv6 ${src} > ${dst} [truncated]`;
    const len = (b[next + 1]! + 1) * 8;
    if (next + 24 <= b.length && b[next + 2] === DSR_OPT6_TYPE)
      opts = ` [dsr-opt [${formatIp(b.subarray(next + 6, next + 22))}]:${b.readUInt16BE(next + 4)}]`;
    proto = b[next]!;
    next += len;
  }
  const head = `IPv6${opts}`;
  if (proto === IPPROTO.IPIP || proto === IPPROTO.IPV6) return `${head} ${src} > ${dst} encap | ${inner(b, next, proto, depth)}`;
  return `${head} ${l4(b, next, proto, src, dst, true)}`;
}

function inner(b: Buffer, o: number, proto: number, depth: number): string {
  if (depth >= MAX_NESTING) return '[nested too deep]';
  return proto === IPPROTO.IPIP ? ipv4(b, o, depth + 1) : ipv6(b, o, depth + 1);
}

/** `aa:.. > bb:.. IPv4 192.0.2.1 > 198.51.100.7 encap | IPv4 203.0.113.9:40001 > 192.0.2.80:80 TCP [S] seq 1` */
export function summarizeFrame(frame: Buffer): string {
  if (frame.length < 14) return '[truncated ethernet]';
  let type = frame.readUInt16BE(12);
  let o = 14;
  let vlan = '';
  while ((type === ETH_P_8021Q || type === ETH_P_8021AD) && o + 4 <= frame.length) {
    vlan += ` vlan ${frame.readUInt16BE(o) & 0x0fff}`;
    type = frame.readUInt16BE(o + 2);
    o += 4;
  }
  const eth = `${mac(frame, 6)} > ${mac(frame, 0)}${vlan}`;
  if (type === ETH_P_IP) return `${eth} ${ipv4(frame, o, 0)}`;
  if (type === ETH_P_IPV6) return `${eth} ${ipv6(frame, o, 0)}`;
  return `${eth} ethertype 0x${type.toString(16).padStart(4, '0')}`;
}
