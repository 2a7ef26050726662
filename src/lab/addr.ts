// Small, pure address helpers for the lab: parsing, prefix arithmetic, and the test-network allow-list.
// (Parsing and canonical formatting are src/render/ip.ts's; this adds the lab's arithmetic and allow-list.)

import { formatIp, parseIp } from '../render/ip.js';

/** The only ranges traffic in tests, demos and benchmarks may use (design.md, "Test network rules"). */
export const ALLOWED_RANGES = ['192.0.2.0/24', '198.51.100.0/24', '203.0.113.0/24', '2001:db8::/32'] as const;

export function isIpv6(addr: string): boolean {
  return addr.includes(':');
}

/** Splits `addr/len` (length optional: host route) into its parts. */
export function splitCidr(cidr: string): { addr: string; len: number } {
  const slash = cidr.indexOf('/');
  const addr = slash < 0 ? cidr : cidr.slice(0, slash);
  const len = slash < 0 ? (isIpv6(addr) ? 128 : 32) : Number(cidr.slice(slash + 1));
  const max = isIpv6(addr) ? 128 : 32;
  if (!Number.isInteger(len) || len < 0 || len > max) throw new Error(`bad prefix length in '${cidr}'`);
  addrToBytes(addr); // validates
  return { addr, len };
}

/** Network-order bytes of an IPv4 (4) or IPv6 (16) address (parsing lives in src/render/ip.ts). */
export function addrToBytes(addr: string): number[] {
  const a = parseIp(addr);
  if (!a) throw new Error(`bad ${isIpv6(addr) ? 'IPv6' : 'IPv4'} address '${addr}'`);
  return [...a.bytes];
}

/** Formats bytes back to text; IPv6 in the compressed lower-case form (RFC 5952). */
export function bytesToAddr(bytes: number[]): string {
  if (bytes.length !== 4 && bytes.length !== 16) throw new Error(`an address has 4 or 16 bytes, not ${bytes.length}`);
  return formatIp({ family: bytes.length === 4 ? 4 : 6, bytes: Uint8Array.from(bytes) });
}

/** Is `addr` (or every address of CIDR `addr`) inside `cidr`? */
export function inCidr(addr: string, cidr: string): boolean {
  const a = splitCidr(addr);
  const c = splitCidr(cidr);
  if (isIpv6(a.addr) !== isIpv6(c.addr) || a.len < c.len) return false;
  const ab = addrToBytes(a.addr);
  const cb = addrToBytes(c.addr);
  for (let bit = 0; bit < c.len; bit++) {
    const byte = bit >> 3;
    const mask = 0x80 >> (bit & 7);
    if ((ab[byte]! & mask) !== (cb[byte]! & mask)) return false;
  }
  return true;
}

/** Is the address or CIDR inside one of the test-network ranges? */
export function isAllowedTestAddress(addrOrCidr: string): boolean {
  return ALLOWED_RANGES.some((r) => inCidr(addrOrCidr, r));
}

/** Throws unless the address or CIDR is inside the test-network ranges; `what` names it in the message. */
export function assertAllowed(addrOrCidr: string, what: string): void {
  if (!isAllowedTestAddress(addrOrCidr)) {
    throw new Error(`${what}: ${addrOrCidr} is outside the test ranges (${ALLOWED_RANGES.join(', ')})`);
  }
}

/** The network address of `addr` with prefix length `len`, as `net/len`. */
export function networkOf(addr: string, len: number): string {
  const b = addrToBytes(addr);
  for (let bit = len; bit < b.length * 8; bit++) b[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return `${bytesToAddr(b)}/${len}`;
}

/** The address `n` past the network address of `addr/len` (e.g. host 1 = the conventional gateway). */
export function hostInNetwork(addr: string, len: number, n: number): string {
  const net = splitCidr(networkOf(addr, len)).addr;
  const b = addrToBytes(net);
  let carry = n;
  for (let i = b.length - 1; i >= 0 && carry > 0; i--) {
    const sum = b[i]! + (carry & 0xff);
    b[i] = sum & 0xff;
    carry = (carry >>> 8) + (sum >> 8);
  }
  return bytesToAddr(b);
}
