// Minimal IP address and prefix arithmetic for render (which VIPs an LB node may serve). Pure; addresses in the
// model are already validated and canonical, so parse errors here are internal errors with a clear message.

export interface ParsedIp {
  family: 4 | 6;
  bytes: Uint8Array; // 4 or 16 bytes, network order
}

function parseIpv4(text: string): Uint8Array | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  const bytes = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i]!;
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) return null;
    bytes[i] = Number(p);
  }
  return bytes;
}

function parseIpv6(text: string): Uint8Array | null {
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const groupsOf = (s: string): number[] | null => {
    if (s === '') return [];
    const out: number[] = [];
    const parts = s.split(':');
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i]!;
      if (i === parts.length - 1 && p.includes('.')) {
        const v4 = parseIpv4(p);
        if (!v4) return null;
        out.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(p)) {
        out.push(parseInt(p, 16));
      } else {
        return null;
      }
    }
    return out;
  };
  const head = groupsOf(halves[0]!);
  const tail = halves.length === 2 ? groupsOf(halves[1]!) : [];
  if (!head || !tail) return null;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return null;
  const groups = [...head, ...new Array<number>(halves.length === 2 ? missing : 0).fill(0), ...tail];
  const bytes = new Uint8Array(16);
  groups.forEach((g, i) => {
    bytes[2 * i] = g >> 8;
    bytes[2 * i + 1] = g & 0xff;
  });
  return bytes;
}

export function parseIp(text: string): ParsedIp {
  const v4 = parseIpv4(text);
  if (v4) return { family: 4, bytes: v4 };
  const v6 = text.includes(':') ? parseIpv6(text) : null;
  if (v6) return { family: 6, bytes: v6 };
  throw new Error(`'${text}' is not an IP address`);
}

export function ipFamily(text: string): 4 | 6 {
  return parseIp(text).family;
}

/** Whether `address` lies in `cidr` ("a.b.c.d/len", "x::/len"; a bare address means a host prefix). */
export function cidrContains(cidr: string, address: string): boolean {
  const slash = cidr.indexOf('/');
  const net = parseIp(slash < 0 ? cidr : cidr.slice(0, slash));
  const ip = parseIp(address);
  if (net.family !== ip.family) return false;
  const bits = net.bytes.length * 8;
  const len = slash < 0 ? bits : Number(cidr.slice(slash + 1));
  if (!Number.isInteger(len) || len < 0 || len > bits) throw new Error(`'${cidr}' has an invalid prefix length`);
  for (let bit = 0; bit < len; bit += 8) {
    const take = Math.min(8, len - bit);
    const mask = (0xff << (8 - take)) & 0xff;
    const k = bit >> 3;
    if ((net.bytes[k]! & mask) !== (ip.bytes[k]! & mask)) return false;
  }
  return true;
}

/** Orders addresses by family, then numerically. */
export function compareIps(a: string, b: string): number {
  const pa = parseIp(a);
  const pb = parseIp(b);
  if (pa.family !== pb.family) return pa.family - pb.family;
  for (let i = 0; i < pa.bytes.length; i++) {
    if (pa.bytes[i] !== pb.bytes[i]) return pa.bytes[i]! - pb.bytes[i]!;
  }
  return 0;
}
