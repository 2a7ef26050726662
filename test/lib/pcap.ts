// Other projects' captured packets for the foreign-packet suite (test/netns/hostile-foreign.test.ts): sample captures that
// Debian packages install (`make deps` installs the packages; nothing is copied into this repository), read at test
// time from their installed paths, and a retargeting that sends a captured IP packet to one of our addresses
// without changing whether its checksums were right.
import { existsSync, readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { ipBytes } from './packets.js';
import { l3Offset } from './hostile.js';

/** Installed sample captures (classic pcap, Ethernet link type), by the Debian package that ships them. */
export const DEBIAN_PCAPS: Record<string, string[]> = {
  'python3-dpkt': ['dns_icmp.pcap', 'http.pcap', 'nb6-http.pcap', 'truncated_dns.pcap', 'truncated_dns_2.pcap']
    .map((f) => `/usr/share/doc/python3-dpkt/examples/data/${f}`),
  'python3-libtrace': ['icmp-sample.pcap.gz', 'icmp6-sample.pcap.gz', 'arp-changed.pcap']
    .map((f) => `/usr/share/doc/python3-libtrace/examples/${f}`),
};

export function missingPcaps(): string[] {
  return Object.values(DEBIAN_PCAPS).flat().filter((p) => !existsSync(p));
}

/**
 * The frames of a classic pcap file (gzip-compressed or not), as captured (a record cut by the capture's snap length
 * stays cut: a truncation someone else made). A file cut inside a record ends at the last whole record.
 * Only the Ethernet link type (1) is read.
 */
export function readPcap(path: string): Buffer[] {
  let b = readFileSync(path);
  if (b[0] === 0x1f && b[1] === 0x8b) b = gunzipSync(b);
  if (b.length < 24) throw new Error(`${path}: not a pcap file`);
  const magic = b.readUInt32LE(0);
  const le = magic === 0xa1b2c3d4 || magic === 0xa1b23c4d;
  if (!le && b.readUInt32BE(0) !== 0xa1b2c3d4 && b.readUInt32BE(0) !== 0xa1b23c4d) throw new Error(`${path}: not a classic pcap file`);
  const u32 = (o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  if (u32(20) !== 1) throw new Error(`${path}: link type ${u32(20)}, not Ethernet`);
  const frames: Buffer[] = [];
  for (let o = 24; o + 16 <= b.length;) {
    const incl = u32(o + 8);
    if (o + 16 + incl > b.length) break;
    frames.push(Buffer.from(b.subarray(o + 16, o + 16 + incl)));
    o += 16 + incl;
  }
  return frames;
}

/** One's-complement update of a 16-bit checksum for bytes `from` replaced by `to` (RFC 1624, eqn. 3). */
function adjust(csum: number, from: Buffer, to: Buffer): number {
  let s = ~csum & 0xffff;
  for (let i = 0; i < from.length; i += 2) s += (~from.readUInt16BE(i) & 0xffff) + to.readUInt16BE(i);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return ~s & 0xffff;
}

export interface Retarget { srcMac: string; dstMac: string; dst4?: string; dst6?: string; src4?: string; src6?: string }

/**
 * A captured frame re-addressed: MACs replaced, the IPv4/IPv6 destination (and/or source) replaced where given for
 * its family, and the IPv4 header checksum and the TCP/UDP/ICMPv6 checksum (when the frame holds it) updated
 * incrementally, so a checksum that was right stays right and one that was wrong stays wrong. Null when the frame
 * is not IP or too short to hold the addresses.
 */
export function retarget(f: Buffer, to: Retarget): Buffer | null {
  const g = Buffer.from(f);
  const l3 = l3Offset(g);
  if (g.length < l3 + 20) return null;
  const type = g.readUInt16BE(l3 - 2);
  const v = g[l3]! >> 4;
  if (!((type === 0x0800 && v === 4) || (type === 0x86dd && v === 6 && g.length >= l3 + 40))) return null;
  Buffer.from(to.dstMac.replace(/:/g, ''), 'hex').copy(g, 0);
  Buffer.from(to.srcMac.replace(/:/g, ''), 'hex').copy(g, 6);
  const src = v === 4 ? to.src4 : to.src6;
  const dst = v === 4 ? to.dst4 : to.dst6;
  const srcOff = v === 4 ? l3 + 12 : l3 + 8;
  const dstOff = v === 4 ? l3 + 16 : l3 + 24;
  const alen = v === 4 ? 4 : 16;
  let l4: number;
  let proto: number;
  let first = true; // the fragment that holds the transport header
  if (v === 4) {
    const ihl = (g[l3]! & 0xf) * 4;
    l4 = l3 + ihl;
    proto = g[l3 + 9]!;
    first = (g.readUInt16BE(l3 + 6) & 0x1fff) === 0;
  } else {
    l4 = l3 + 40;
    proto = g[l3 + 6]!;
  }
  const csumAt = proto === 6 ? l4 + 16 : proto === 17 ? l4 + 6 : proto === 58 && v === 6 ? l4 + 2 : -1;
  for (const [addr, off] of [[src, srcOff], [dst, dstOff]] as const) {
    if (!addr) continue;
    const from = Buffer.from(g.subarray(off, off + alen));
    const next = ipBytes(addr);
    if (v === 4) g.writeUInt16BE(adjust(g.readUInt16BE(l3 + 10), from, next), l3 + 10);
    if (first && csumAt >= 0 && csumAt + 2 <= g.length) {
      const old = g.readUInt16BE(csumAt);
      // IPv4 UDP without a checksum stays without one; a UDP result of 0 is sent as 0xffff
      if (!(proto === 17 && v === 4 && old === 0)) {
        const c = adjust(old, from, next);
        g.writeUInt16BE(proto === 17 && c === 0 ? 0xffff : c, csumAt);
      }
    }
    next.copy(g, off);
  }
  return g;
}
