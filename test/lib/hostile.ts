// Hostile inputs and output invariants shared by the hostile-packet suites (test/hostile-*.test.ts):
// every truncation of a frame, named header mutations, seeded bit flips, and a checker that says what is wrong
// with a program's output given its input. Independent of the BPF code: lengths and checksums are recomputed
// here from scratch (test/lib/packets.ts).
import { IPPROTO, onesSum, pseudoHeader } from './packets.js';
import { prng } from './prng.js';

/** Every prefix of `f` from 14 bytes (the least BPF_PROG_TEST_RUN accepts) to one byte short. */
export function truncations(f: Buffer): Array<{ name: string; frame: Buffer }> {
  const out: Array<{ name: string; frame: Buffer }> = [];
  for (let n = 14; n < f.length; n++) out.push({ name: `cut ${n}/${f.length}`, frame: Buffer.from(f.subarray(0, n)) });
  return out;
}

/** `count` copies of `f`, each with 1-3 bits flipped at seeded positions (biased towards the headers). */
export function bitFlips(f: Buffer, seed: number, count: number): Array<{ name: string; frame: Buffer }> {
  const rnd = prng(seed);
  const out: Array<{ name: string; frame: Buffer }> = [];
  for (let i = 0; i < count; i++) {
    const g = Buffer.from(f);
    const flips = 1 + Math.floor(rnd() * 3);
    const where: number[] = [];
    for (let k = 0; k < flips; k++) {
      // three in four flips land in the first 80 bytes (L2-L4 headers), the rest anywhere
      const span = rnd() < 0.75 ? Math.min(80, g.length) : g.length;
      const bit = Math.floor(rnd() * span * 8);
      g[bit >> 3]! ^= 1 << (bit & 7);
      where.push(bit);
    }
    out.push({ name: `seed ${seed} #${i} bits ${where.join(',')}`, frame: g });
  }
  return out;
}

/** Where the layers of a frame are (no validation beyond what is needed to find them). */
export function l3Offset(f: Buffer): number {
  return f.length >= 18 && f.readUInt16BE(12) === 0x8100 ? 18 : 14;
}

function set16(f: Buffer, off: number, v: number): Buffer {
  const g = Buffer.from(f);
  if (off + 2 <= g.length) g.writeUInt16BE(v & 0xffff, off);
  return g;
}
function set8(f: Buffer, off: number, v: number): Buffer {
  const g = Buffer.from(f);
  if (off < g.length) g[off] = v & 0xff;
  return g;
}
/** Recomputes the IPv4 header checksum (after a mutation that should not be caught by the checksum alone). */
export function fixIpv4Checksum(f: Buffer): Buffer {
  const g = Buffer.from(f);
  const l3 = l3Offset(g);
  if (g.length < l3 + 20 || g[l3]! >> 4 !== 4) return g;
  const ihl = (g[l3]! & 0xf) * 4;
  if (ihl < 20 || g.length < l3 + ihl) return g;
  g.writeUInt16BE(0, l3 + 10);
  g.writeUInt16BE(~onesSum(g.subarray(l3, l3 + ihl)) & 0xffff, l3 + 10);
  return g;
}

/** Named header mutations of an Ethernet + IPv4/IPv6 frame; each keeps the IPv4 header checksum right unless
 * the mutation is the checksum itself, so the program's own checks (not the checksum) are what is exercised. */
export function mutations(f: Buffer): Array<{ name: string; frame: Buffer }> {
  const l3 = l3Offset(f);
  const v = f.length > l3 ? f[l3]! >> 4 : 0;
  const out: Array<{ name: string; frame: Buffer }> = [];
  const add = (name: string, g: Buffer, fix = true) => out.push({ name, frame: fix && v === 4 ? fixIpv4Checksum(g) : g });
  const mac = (first: number) => { const g = Buffer.from(f); g.fill(0, 0, 6); g[0] = first; if (first === 0xff) g.fill(0xff, 0, 6); return g; };
  add('dst MAC broadcast', mac(0xff));
  add('dst MAC multicast 01:00:5e', (() => { const g = mac(0x01); g[1] = 0x00; g[2] = 0x5e; return g; })());
  add('dst MAC multicast 33:33', mac(0x33));
  add('src MAC multicast', (() => { const g = Buffer.from(f); g[6]! |= 1; return g; })());
  add('ethertype ARP', set16(f, l3 - 2, 0x0806));
  add('ethertype swapped family', set16(f, l3 - 2, v === 4 ? 0x86dd : 0x0800), false);
  add('trailer 18 bytes', Buffer.concat([f, Buffer.alloc(18, 0xa5)]));
  add('trailer 1 byte', Buffer.concat([f, Buffer.from([0x5a])]));
  if (v === 4) {
    const ipLen = f.readUInt16BE(l3 + 2);
    const ihl = (f[l3]! & 0xf) * 4;
    for (const ver of [0, 5, 6, 15]) add(`IPv4 version ${ver}`, set8(f, l3, (ver << 4) | (f[l3]! & 0xf)));
    for (const h of [0, 4, 6, 15]) add(`IPv4 IHL ${h}`, set8(f, l3, 0x40 | h));
    for (const [n, t] of [['0', 0], ['19', 19], ['len-1', ipLen - 1], ['len+1', ipLen + 1], ['0xffff', 0xffff]] as const)
      add(`IPv4 total length ${n}`, set16(f, l3 + 2, t));
    add('IPv4 MF', set16(f, l3 + 6, f.readUInt16BE(l3 + 6) | 0x2000));
    add('IPv4 fragment offset 1', set16(f, l3 + 6, (f.readUInt16BE(l3 + 6) & 0xe000) | 1));
    add('IPv4 TTL 0', set8(f, l3 + 8, 0));
    for (const p of [0, 1, 4, 41, 44, 255]) add(`IPv4 protocol ${p}`, set8(f, l3 + 9, p));
    add('IPv4 header checksum wrong', set16(f, l3 + 10, f.readUInt16BE(l3 + 10) ^ 0x0101), false);
    for (const [n, a] of [['0.0.0.0', [0, 0, 0, 0]], ['0.1.2.3', [0, 1, 2, 3]], ['127.0.0.1', [127, 0, 0, 1]], ['224.0.0.1', [224, 0, 0, 1]],
      ['240.0.0.1', [240, 0, 0, 1]], ['255.255.255.255', [255, 255, 255, 255]]] as const)
      add(`IPv4 source ${n}`, (() => { const g = Buffer.from(f); Buffer.from(a).copy(g, l3 + 12); return g; })());
    add('IPv4 destination broadcast', (() => { const g = Buffer.from(f); g.fill(0xff, l3 + 16, l3 + 20); return g; })());
    mutateL4(f, l3 + ihl, f[l3 + 9]!, add);
  } else if (v === 6) {
    const plen = f.readUInt16BE(l3 + 4);
    for (const ver of [0, 4, 15]) add(`IPv6 version ${ver}`, set8(f, l3, (ver << 4) | (f[l3]! & 0xf)));
    for (const [n, t] of [['0', 0], ['len-1', plen - 1], ['len+1', plen + 1], ['0xffff', 0xffff]] as const)
      add(`IPv6 payload length ${n}`, set16(f, l3 + 4, t));
    for (const nh of [0, 4, 41, 43, 44, 58, 59, 60]) add(`IPv6 next header ${nh}`, set8(f, l3 + 6, nh));
    add('IPv6 hop limit 0', set8(f, l3 + 7, 0));
    for (const [n, first, last] of [['::', 0, 0], ['::1', 0, 1], ['ff02::1', 0xff02, 1], ['fe80::1', 0xfe80, 1]] as const)
      add(`IPv6 source ${n}`, (() => { const g = Buffer.from(f); g.fill(0, l3 + 8, l3 + 24); g.writeUInt16BE(first, l3 + 8); g[l3 + 23] = last; return g; })());
    mutateL4(f, l3 + 40, f[l3 + 6]!, add);
  }
  return out;
}

function mutateL4(f: Buffer, l4: number, proto: number, add: (name: string, g: Buffer) => void): void {
  if (proto === IPPROTO.TCP) {
    for (const d of [0, 4, 6, 15]) add(`TCP data offset ${d}`, set8(f, l4 + 12, (d << 4) | (f[l4 + 12]! & 0xf)));
    add('TCP flags 0', set8(f, l4 + 13, 0));
    add('TCP flags all', set8(f, l4 + 13, 0xff));
    add('TCP SYN+RST', set8(f, l4 + 13, 0x06));
    add('TCP checksum wrong', set16(f, l4 + 16, f.readUInt16BE(l4 + 16) ^ 0x0101));
    add('TCP ports 0', set16(set16(f, l4, 0), l4 + 2, f.readUInt16BE(l4 + 2)));
  } else if (proto === IPPROTO.UDP) {
    for (const n of [0, 7, 9, 0xffff]) add(`UDP length ${n}`, set16(f, l4 + 4, n));
    add('UDP checksum 0', set16(f, l4 + 6, 0));
    add('UDP checksum 0xffff', set16(f, l4 + 6, 0xffff));
    add('UDP checksum wrong', set16(f, l4 + 6, f.readUInt16BE(l4 + 6) ^ 0x0101));
  } else if (proto === IPPROTO.ICMP || proto === IPPROTO.ICMPV6) {
    for (const t of [0, 3, 11, 12, 128]) add(`ICMP type ${t}`, set8(f, l4, t));
    add('ICMP checksum wrong', set16(f, l4 + 2, f.readUInt16BE(l4 + 2) ^ 0x0101));
    // the quoted header's IHL / version
    add('ICMP quote IHL 15', set8(f, l4 + 8, ((f[l4 + 8] ?? 0x45) & 0xf0) | 15));
    add('ICMP quote version 0', set8(f, l4 + 8, (f[l4 + 8] ?? 0) & 0x0f));
  }
}

// ---------------------------------------------------------------- output checks

export interface IpView {
  family: 4 | 6;
  l3: number;
  /** bytes of the IP packet by its own length field (may exceed the frame: then lengthOk is false) */
  ipLen: number;
  hdrLen: number;
  proto: number;
  src: Buffer;
  dst: Buffer;
  headerOk: boolean; // IPv4 header checksum (IPv6: true)
  lengthOk: boolean; // IP length == bytes after L2
  l4Ok: boolean | null; // TCP/UDP/ICMP checksum over the IP length; null when not computable
  /** a UDP header (not a later fragment) whose checksum field is 0: IPv4 "no checksum" (RFC 768), invalid over
   * IPv6 (RFC 8200 8.1: a computed 0 is sent as 0xffff) */
  udpZero: boolean;
}

const fmt = (b: Buffer) => (b.length === 4 ? [...b].join('.') : Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2).toString(16)).join(':'));

/** Parses an IP packet starting at `l3` of `f` (or null if not a plausible IPv4/IPv6 header). */
export function ipView(f: Buffer, l3: number): IpView | null {
  if (f.length < l3 + 20) return null;
  const v = f[l3]! >> 4;
  if (v === 4) {
    const hdrLen = (f[l3]! & 0xf) * 4;
    if (hdrLen < 20 || f.length < l3 + hdrLen) return null;
    const ipLen = f.readUInt16BE(l3 + 2);
    const view: IpView = { family: 4, l3, ipLen, hdrLen, proto: f[l3 + 9]!, src: f.subarray(l3 + 12, l3 + 16), dst: f.subarray(l3 + 16, l3 + 20),
      headerOk: onesSum(f.subarray(l3, l3 + hdrLen)) === 0xffff, lengthOk: ipLen === f.length - l3, l4Ok: null, udpZero: false };
    view.udpZero = udpZero(f, view);
    view.l4Ok = l4Ok(f, view);
    return view;
  }
  if (v === 6 && f.length >= l3 + 40) {
    const ipLen = 40 + f.readUInt16BE(l3 + 4);
    // a destination-options header right after the fixed header (the ipopt form of IPv6) is part of the header here:
    // the pseudo-header of the L4 checksum names the protocol after it
    const ext = f[l3 + 6] === 60 && f.length >= l3 + 48 ? (f[l3 + 41]! + 1) * 8 : 0;
    const view: IpView = { family: 6, l3, ipLen, hdrLen: 40 + ext, proto: ext ? f[l3 + 40]! : f[l3 + 6]!, src: f.subarray(l3 + 8, l3 + 24), dst: f.subarray(l3 + 24, l3 + 40),
      headerOk: true, lengthOk: ipLen === f.length - l3, l4Ok: null, udpZero: false };
    view.udpZero = udpZero(f, view);
    view.l4Ok = l4Ok(f, view);
    return view;
  }
  return null;
}

/** The UDP checksum field is 0 (read where the header is, in the frame's bytes; a later IPv4 fragment has none). */
function udpZero(f: Buffer, v: IpView): boolean {
  if (v.proto !== IPPROTO.UDP || f.length < v.l3 + v.hdrLen + 8) return false;
  if (v.family === 4 && (f.readUInt16BE(v.l3 + 6) & 0x1fff) !== 0) return false;
  return f.readUInt16BE(v.l3 + v.hdrLen + 6) === 0;
}

/** Whether the L4 checksum is right. A UDP checksum field of 0 cannot be judged by the one's-complement sum
 * (0x0000 and 0xffff add up alike, so a 0 written where 0xffff belongs would pass): over IPv4 it means "no
 * checksum" (right), over IPv6 it is never right (RFC 8200 8.1). */
function l4Ok(f: Buffer, v: IpView): boolean | null {
  const end = v.l3 + v.ipLen;
  if (end > f.length || v.ipLen < v.hdrLen) return null;
  if (v.family === 4 && (f.readUInt16BE(v.l3 + 6) & 0x3fff) !== 0) return null; // fragment: not checkable alone
  const seg = f.subarray(v.l3 + v.hdrLen, end);
  if (v.proto === IPPROTO.ICMP) return seg.length >= 4 ? onesSum(seg) === 0xffff : null;
  if (v.proto !== IPPROTO.TCP && v.proto !== IPPROTO.UDP && v.proto !== IPPROTO.ICMPV6) return null;
  if (seg.length < (v.proto === IPPROTO.TCP ? 18 : v.proto === IPPROTO.UDP ? 8 : 4)) return null;
  if (v.proto === IPPROTO.UDP && seg.readUInt16BE(6) === 0) return v.family === 4;
  return onesSum(pseudoHeader(fmt(v.src), fmt(v.dst), v.proto, seg.length), seg) === 0xffff;
}

export function isMartian(src: Buffer): boolean {
  if (src.length === 4) return src[0] === 0 || src[0] === 127 || src[0]! >= 224;
  if (src[0] === 0xff || (src[0] === 0xfe && (src[1]! & 0xc0) === 0x80)) return true;
  return src.subarray(0, 15).every((b) => b === 0) && (src[15] === 0 || src[15] === 1);
}

/**
 * What is wrong with a frame the program sends out (XDP_TX / redirect / a changed TC_ACT_OK frame), given the frame
 * it got: the L2 destination must be unicast; the IP length must be exactly the bytes present (no overrun, no
 * trailer) and within `mtu`; the source must not be martian; a header or checksum the program built itself must be
 * valid; and a checksum it only carried or updated incrementally must be exactly as valid as the input's was
 * (a corrupted input is never laundered into a valid output, a valid one never broken).
 */
export function outputProblems(input: Buffer, output: Buffer,
  opts: { mtu?: number; checkMac?: boolean; allowTrailer?: boolean; checkMartian?: boolean } = {}): string[] {
  const p: string[] = [];
  const ol3 = l3Offset(output);
  const il3 = l3Offset(input);
  const i = ipView(input, il3);
  if (i && (i.proto === IPPROTO.IPIP || i.proto === IPPROTO.IPV6) && output.subarray(ol3).equals(input.subarray(il3 + i.hdrLen))) {
    // decapsulated: only a whole, valid outer header may be removed; the inner packet is the stack's to judge
    if (!i.headerOk) p.push('decapsulated a tunnel whose outer IPv4 header checksum was wrong');
    if (i.ipLen > input.length - il3) p.push('decapsulated a tunnel whose outer length exceeds the frame');
    return p;
  }
  if (i && i.proto === IPPROTO.UDP && input.length >= il3 + i.hdrLen + 8 && output.length > ol3 &&
      output.subarray(ol3).equals(input.subarray(il3 + i.hdrLen + 8))) {
    // GUE decapsulated: the same, and the UDP length must be the outer payload's
    if (!i.headerOk) p.push('decapsulated GUE whose outer IPv4 header checksum was wrong');
    if (i.ipLen > input.length - il3) p.push('decapsulated GUE whose outer length exceeds the frame');
    if (input.readUInt16BE(il3 + i.hdrLen + 4) !== i.ipLen - i.hdrLen) p.push('decapsulated GUE whose UDP length is not the outer payload');
    return p;
  }
  const o = ipView(output, ol3);
  if (!o) return ['output is not an IPv4/IPv6 frame'];
  if ((opts.checkMac ?? true) && (output[0]! & 1)) p.push('output to a group MAC');
  // on a backend's ingress the stack trims a trailer by the IP length; what leaves an LB must be exact
  if (opts.allowTrailer ? o.ipLen > output.length - ol3 : !o.lengthOk) p.push(`output IP length ${o.ipLen} vs ${output.length - ol3} bytes present`);
  // the MTU bounds what the program grew (docs/datapath.md, "Output lengths"): a packet that arrived larger than the
  // MTU and leaves no larger (DSR l2, SNAT) is the next device's to refuse, as the kernel's forwarding would
  if (opts.mtu !== undefined && o.ipLen > opts.mtu && !(i && o.ipLen <= i.ipLen)) p.push(`output IP length ${o.ipLen} > MTU ${opts.mtu}`);
  if ((opts.checkMartian ?? true) && isMartian(o.src)) p.push('output from a martian source');
  if (o.proto === IPPROTO.UDP && i && output.length >= ol3 + o.hdrLen + 8 &&
      output.subarray(ol3 + o.hdrLen + 8).equals(input.subarray(il3, il3 + i.ipLen))) {
    // our GUE encapsulation: outer IP + UDP ours (header right, UDP length, over IPv4 checksum 0, over IPv6 never 0 and
    // exactly as valid as the inner packet's own L4 checksum), the payload the input's IP packet
    if (!o.headerOk) p.push('GUE: outer IPv4 header checksum');
    if (output.readUInt16BE(ol3 + o.hdrLen + 4) !== o.ipLen - o.hdrLen) p.push('GUE: UDP length');
    if (o.family === 4 && output.readUInt16BE(ol3 + o.hdrLen + 6) !== 0) p.push('GUE over IPv4: UDP checksum not 0');
    if (o.family === 6 && o.udpZero) p.push('GUE over IPv6: UDP checksum 0x0000');
    if (o.family === 6 && i.l4Ok !== null && o.l4Ok !== i.l4Ok) p.push(`GUE over IPv6: outer UDP checksum ${i.l4Ok ? 'broken' : 'laundered'}`);
    return p;
  }
  // a UDP checksum of 0 is never valid over IPv6; over IPv4 it means "none" and may only stay where it came
  // (docs/datapath.md, docs/backend.md: a rewrite keeps an IPv4 0 and writes a computed 0 as 0xffff)
  if (o.udpZero && o.family === 6) p.push('IPv6 UDP checksum 0x0000 (invalid, RFC 8200 8.1)');
  if (o.udpZero && o.family === 4 && !(i && i.family === 4 && i.udpZero)) p.push('IPv4 UDP checksum 0 (none) on an output whose input carried one');
  const tunnel = o.proto === IPPROTO.IPIP || o.proto === IPPROTO.IPV6;
  if (tunnel && i && i.proto !== o.proto) {
    // our encapsulation: the outer header is ours (must be right), the inner packet is the input's IP packet
    if (!o.headerOk) p.push('outer IPv4 header checksum');
    const inner = output.subarray(ol3 + o.hdrLen);
    const want = input.subarray(il3, il3 + i.ipLen);
    if (!inner.equals(want)) p.push('inner packet differs from the input IP packet');
    return p;
  }
  if (i && i.family === o.family && (i.proto === IPPROTO.TCP || i.proto === IPPROTO.UDP) &&
      (o.proto === IPPROTO.ICMP || o.proto === IPPROTO.ICMPV6)) {
    // an answer we built (path MTU): everything ours must be right, and it goes back to a unicast client
    if (!o.headerOk) p.push('ICMP answer: IPv4 header checksum');
    if (o.l4Ok !== true) p.push('ICMP answer: ICMP checksum');
    if (isMartian(o.dst)) p.push('ICMP answer to a martian address');
    if (!i.headerOk) p.push('answered a packet whose IPv4 header checksum was wrong');
    return p;
  }
  if (i) {
    if (o.headerOk && !i.headerOk) p.push('IPv4 header checksum laundered (input wrong, output right)');
    if (!o.headerOk && i.headerOk) p.push('IPv4 header checksum broken');
    const il4 = i.l4Ok;
    const ol4 = o.l4Ok;
    if (il4 !== null && ol4 !== null && il4 !== ol4) p.push(`L4 checksum ${il4 ? 'broken' : 'laundered'} (proto ${o.proto})`);
    if (il4 === true && ol4 === null) p.push('L4 checksum not checkable on the output');
  }
  return p;
}

/** Counts by key, for the printed summary. */
export function tally(into: Record<string, number>, key: string, n = 1): void {
  into[key] = (into[key] ?? 0) + n;
}
