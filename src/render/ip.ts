// IP addresses and prefixes: strict parsing into bytes, canonical text (IPv4 dotted quad; IPv6 per RFC 5952:
// lower case, longest zero run compressed), prefix containment and ordering. The single implementation for the
// whole project (config validation, render, the BPF codecs, the lab). Pure; no dependency on the host's resolver
// or the `net` module, so every node gets the same answer.

export type Family = 4 | 6;

export interface IpAddress {
  family: Family;
  bytes: Uint8Array; // 4 or 16 bytes, network order
}

export interface IpCidr {
  family: Family;
  bytes: Uint8Array; // network address (host bits cleared)
  prefix: number;
}

const IPV4_OCTET = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

function parseIpv4Bytes(text: string): Uint8Array | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    if (!IPV4_OCTET.test(parts[i]!)) return null;
    out[i] = Number(parts[i]);
  }
  return out;
}

function parseIpv6Bytes(text: string): Uint8Array | null {
  if (text.length > 45 || text.length < 2) return null;
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const parseGroups = (part: string, allowTrailingV4: boolean): number[] | null => {
    if (part === '') return [];
    const groups = part.split(':');
    const out: number[] = [];
    for (let i = 0; i < groups.length; i++) {
      const g = groups[i]!;
      if (allowTrailingV4 && i === groups.length - 1 && g.includes('.')) {
        const v4 = parseIpv4Bytes(g);
        if (!v4) return null;
        out.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(g)) {
        out.push(parseInt(g, 16));
      } else {
        return null;
      }
    }
    return out;
  };
  let groups: number[];
  if (halves.length === 2) {
    const head = parseGroups(halves[0]!, false);
    const tail = parseGroups(halves[1]!, true);
    if (!head || !tail || head.length + tail.length > 7) return null;
    groups = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  } else {
    const all = parseGroups(text, true);
    if (!all || all.length !== 8) return null;
    groups = all;
  }
  const out = new Uint8Array(16);
  groups.forEach((g, i) => {
    out[2 * i] = g >> 8;
    out[2 * i + 1] = g & 0xff;
  });
  return out;
}

/** Parses an IPv4 or IPv6 address (no prefix, no zone). Returns null when it is not one. */
export function parseIp(text: string): IpAddress | null {
  // A config at scale names the same addresses in many checks (100,000 reals are parsed several times per
  // revision): parsed bytes are remembered, and every caller gets its own copy.
  let hit = parsedIps.get(text);
  if (hit === undefined) {
    hit = parseIpUncached(text);
    if (parsedIps.size >= PARSED_IPS_MAX) parsedIps.clear();
    parsedIps.set(text, hit);
  }
  return hit && { family: hit.family, bytes: hit.bytes.slice() };
}

const PARSED_IPS_MAX = 262_144;
const parsedIps = new Map<string, IpAddress | null>();

function parseIpUncached(text: string): IpAddress | null {
  if (text.includes(':')) {
    const bytes = parseIpv6Bytes(text);
    return bytes ? { family: 6, bytes } : null;
  }
  const bytes = parseIpv4Bytes(text);
  return bytes ? { family: 4, bytes } : null;
}

export function formatIp(addr: { family: Family; bytes: Uint8Array }): string {
  const b = addr.bytes;
  if (addr.family === 4) return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((b[i]! << 8) | b[i + 1]!);
  // RFC 5952 4.2: compress the longest run of two or more zero groups (the first one on a tie).
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** What validation and the model need of one address text, parsed once per distinct text (see parseIp). */
export interface AddressFacts {
  family: Family;
  canonical: string;
  /** unusableAddressReason of the address */
  unusable: string | null;
}

/** Facts of `text` as an address, or null when it is not one. Shared objects: callers must not write to them. */
export function addressFacts(text: string): AddressFacts | null {
  let hit = factsByText.get(text);
  if (hit === undefined) {
    const a = parseIp(text);
    hit = a && { family: a.family, canonical: formatIp(a), unusable: unusableAddressReason(a) };
    if (factsByText.size >= PARSED_IPS_MAX) factsByText.clear();
    factsByText.set(text, hit);
  }
  return hit;
}

const factsByText = new Map<string, AddressFacts | null>();

/** Canonical text of an address, or null when `text` is not an address. */
export function canonicalIp(text: string): string | null {
  return addressFacts(text)?.canonical ?? null;
}

export function parseCidr(text: string): IpCidr | null {
  const slash = text.indexOf('/');
  if (slash < 0) return null;
  const addr = parseIp(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (!addr || !/^(0|[1-9]\d{0,2})$/.test(prefixText)) return null;
  const prefix = Number(prefixText);
  if (prefix > addr.bytes.length * 8) return null;
  return { family: addr.family, bytes: maskBytes(addr.bytes, prefix), prefix };
}

/** True when the address has bits set beyond the prefix (e.g. 203.0.113.5/24): usually a typo. */
export function cidrHasHostBits(text: string): boolean {
  const c = parseCidr(text);
  const a = c ? parseIp(text.slice(0, text.indexOf('/'))) : null;
  return !!c && !!a && !equalBytes(c.bytes, a.bytes);
}

export function formatCidr(c: IpCidr): string {
  return `${formatIp(c)}/${c.prefix}`;
}

export function canonicalCidr(text: string): string | null {
  const c = parseCidr(text);
  return c ? formatCidr(c) : null;
}

function maskBytes(bytes: Uint8Array, prefix: number): Uint8Array {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    const bits = Math.max(0, Math.min(8, prefix - i * 8));
    out[i] = bytes[i]! & ((0xff << (8 - bits)) & 0xff);
  }
  return out;
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

export function cidrContains(c: IpCidr, a: IpAddress): boolean {
  return c.family === a.family && equalBytes(maskBytes(a.bytes, c.prefix), c.bytes);
}

/** Why an address cannot be a VIP, real, node or SNAT address; null when it can. */
export function unusableAddressReason(a: IpAddress): string | null {
  const b = a.bytes;
  if (b.every((v) => v === 0)) return 'is the unspecified address';
  if (a.family === 4) {
    if (b[0] === 127) return 'is a loopback address';
    if (b[0]! >= 224 && b[0]! <= 239) return 'is a multicast address';
    if (b[0]! >= 240) return 'is a reserved or broadcast address';
    return null;
  }
  if (b.slice(0, 15).every((v) => v === 0) && b[15] === 1) return 'is the loopback address';
  if (b[0] === 0xff) return 'is a multicast address';
  if (b.slice(0, 10).every((v) => v === 0) && b[10] === 0xff && b[11] === 0xff)
    return 'is an IPv4-mapped address (write the IPv4 address instead)';
  return null;
}

// ---------------------------------------------------------------- helpers for already-validated addresses
// Addresses in the model are validated and canonical, so a parse failure past the config stage is an internal
// error: these throw with a message naming the text instead of returning null.

/** Parses an address that must be valid; throws otherwise. */
export function requireIp(text: string): IpAddress {
  const a = parseIp(text);
  if (!a) throw new Error(`'${text}' is not an IP address`);
  return a;
}

export function ipFamily(text: string): Family {
  const a = addressFacts(text);
  if (!a) throw new Error(`'${text}' is not an IP address`);
  return a.family;
}

/** Whether `address` lies in `cidr` ("a.b.c.d/len", "x::/len"; a bare address means a host prefix). */
export function cidrTextContains(cidr: string, address: string): boolean {
  const c = cidr.includes('/') ? parseCidr(cidr) : (() => {
    const a = requireIp(cidr);
    return { family: a.family, bytes: a.bytes, prefix: a.bytes.length * 8 };
  })();
  if (!c) throw new Error(`'${cidr}' is not an address prefix`);
  return cidrContains(c, requireIp(address));
}

/** Orders prefixes ("a.b.c.d/len", "x::/len", valid) by family, then network address, then prefix length. */
export function compareCidrs(a: string, b: string): number {
  const pa = parseCidr(a);
  const pb = parseCidr(b);
  if (!pa || !pb) throw new Error(`'${pa ? b : a}' is not an address prefix`);
  if (pa.family !== pb.family) return pa.family - pb.family;
  for (let i = 0; i < pa.bytes.length; i++) {
    if (pa.bytes[i] !== pb.bytes[i]) return pa.bytes[i]! - pb.bytes[i]!;
  }
  return pa.prefix - pb.prefix;
}

/** Orders addresses by family, then numerically. */
export function compareIps(a: string, b: string): number {
  const pa = requireIp(a);
  const pb = requireIp(b);
  if (pa.family !== pb.family) return pa.family - pb.family;
  for (let i = 0; i < pa.bytes.length; i++) {
    if (pa.bytes[i] !== pb.bytes[i]) return pa.bytes[i]! - pb.bytes[i]!;
  }
  return 0;
}
