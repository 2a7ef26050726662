// Telling a link that an address moved to this interface: a gratuitous ARP request (IPv4) or an unsolicited
// neighbour advertisement with the override flag (IPv6, RFC 4861 7.2.6), sent as a raw frame (the addon's
// sendFrame, AF_PACKET). Hosts that already have a neighbour entry for the address take the new MAC at once
// (Linux: a gratuitous ARP overrides even within the entry's locktime). Used when an lb node takes over a lost
// node's SNAT address (src/reconciler/flows/snat-takeover.ts) and when the owner takes it back.
import { native } from './addon.js';
import { addr16, familyOf } from './dataplane/codec.js';

export function macBytes(text: string): Buffer {
  const b = Buffer.from(text.trim().split(':').map((x) => parseInt(x, 16)));
  if (b.length !== 6 || b.some((x) => Number.isNaN(x))) throw new Error(`not a MAC address: '${text.trim()}'`);
  return b;
}

/** One's complement sum of 16-bit words (RFC 1071), folded. */
function csum16(...parts: Buffer[]): number {
  let sum = 0;
  for (const p of parts) for (let i = 0; i < p.length; i += 2) sum += (p[i]! << 8) | (p[i + 1] ?? 0);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

/** Ethernet + ARP request for `address` from `address` (sender = target), broadcast; padded to 60 bytes. */
export function gratuitousArp(address: string, source: Buffer): Buffer {
  const f = Buffer.alloc(60);
  f.fill(0xff, 0, 6);
  source.copy(f, 6);
  f.writeUInt16BE(0x0806, 12);
  f.writeUInt16BE(1, 14); // Ethernet
  f.writeUInt16BE(0x0800, 16); // IPv4
  f[18] = 6;
  f[19] = 4;
  f.writeUInt16BE(1, 20); // request
  source.copy(f, 22);
  addr16(address).copy(f, 28, 0, 4);
  addr16(address).copy(f, 38, 0, 4); // target hardware address 0, target protocol address = the address
  return f;
}

/** Ethernet + IPv6 + ICMPv6 neighbour advertisement (override set) for `address`, to all nodes (ff02::1). */
export function unsolicitedNa(address: string, source: Buffer): Buffer {
  const src = addr16(address);
  const dst = addr16('ff02::1');
  const icmp = Buffer.alloc(32);
  icmp[0] = 136;
  icmp.writeUInt32BE(0x20000000, 4); // O (override); not a router, not solicited
  src.copy(icmp, 8);
  icmp[24] = 2; // target link-layer address option
  icmp[25] = 1;
  source.copy(icmp, 26);
  const pseudo = Buffer.alloc(8);
  pseudo.writeUInt32BE(icmp.length, 0);
  pseudo[7] = 58;
  icmp.writeUInt16BE(csum16(src, dst, pseudo, icmp), 2);
  const f = Buffer.alloc(14 + 40 + icmp.length);
  Buffer.from([0x33, 0x33, 0, 0, 0, 1]).copy(f, 0);
  source.copy(f, 6);
  f.writeUInt16BE(0x86dd, 12);
  f.writeUInt32BE(0x60000000, 14);
  f.writeUInt16BE(icmp.length, 18);
  f[20] = 58;
  f[21] = 255; // hop limit 255: receivers refuse neighbour discovery from beyond the link
  src.copy(f, 22);
  dst.copy(f, 38);
  icmp.copy(f, 54);
  return f;
}

/** The frame that announces `address` on a link from the MAC `source`. */
export function announceFrame(address: string, source: Buffer): Buffer {
  return familyOf(address) === 4 ? gratuitousArp(address, source) : unsolicitedNa(address, source);
}

/** Sends the announcement of `address` out of `iface`, from the interface's MAC `mac` (root; the link must be up). */
export function announceAddress(iface: string, address: string, mac: string): void {
  const n = native();
  n.sendFrame(n.ifNameToIndex(iface), announceFrame(address, macBytes(mac)));
}
