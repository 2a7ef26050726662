// What `gitlb capture` asks of xdp_lb_capture.o: the filters, the sampling and the rate bound, parsed from the
// command line and encoded as struct lb_cap_config (lb_capture.h). Pure: text in, bytes out; bad input names the
// option and what is wrong with it.
import { parseIp, type Family } from '../../render/ip.js';
import { CAPTURE_COUNTER_BITS, XDP_ACTIONS } from './record.js';

export const MAX_MATCHES = 4; // LB_CAP_MAX_MATCH
export const MAX_REALS = 8; // LB_CAP_MAX_REALS
const F_ENABLED = 1;
const F_ENTRY = 2;
const MATCH_SIZE = 36;

/** struct lb_cap_config and struct lb_cap_match as checked against the object's BTF at load. */
export const CAPTURE_CONFIG_LAYOUTS = {
  lb_cap_config: { size: 360, members: { flags: 0, sample_n: 4, counters: 8, verdicts: 16, n_vips: 20, n_clients: 21, n_reals: 22, pad: 23,
    vips: 24, clients: 168, reals: 312, token_ns: 344, bucket_ns: 352 } },
  lb_cap_match: { size: MATCH_SIZE, members: { addr: 0, mask: 16, port: 32, proto: 34, family: 35 } },
};

/** An address or prefix, with a port and protocol for destinations. */
export interface AddressMatch {
  family: Family;
  bytes: Uint8Array;
  prefix: number;
  port: number; // 0: any
  proto: number; // 0: any; 6 TCP, 17 UDP
}

export interface CaptureFilter {
  /** Destinations (the VIP, with port and protocol when given), any of them; empty: any. */
  vips: AddressMatch[];
  /** Sources (the client's address or prefix), any of them; empty: any. */
  clients: AddressMatch[];
  /** Real ids, any of them; empty: any (or none). */
  reals: number[];
  /** Counter names (drop reasons and the rest), any of them moved for the frame; empty: any. */
  counters: string[];
  /** XDP actions; empty: any. */
  actions: string[];
  /** 1 in sampleN of the frames that match every filter (1: all). */
  sampleN: number;
  /** At most this many frames per second, and `burst` at once (0: no bound). */
  rate: number;
  burst: number;
  /** Copy each frame as received too, not only as it leaves. */
  entry: boolean;
}

export const NO_FILTER: CaptureFilter = { vips: [], clients: [], reals: [], counters: [], actions: [], sampleN: 1, rate: 0, burst: 0, entry: true };

const PROTOCOLS: Record<string, number> = { tcp: 6, udp: 17 };

/** `203.0.113.10`, `203.0.113.0/24`, `203.0.113.10:53`, `203.0.113.10:53/udp`, `2001:db8::10`, `2001:db8::/64`,
 * `[2001:db8::10]:443/tcp`. `withPort` false (a client): a port is refused. */
export function parseAddressMatch(text: string, what: string, withPort: boolean): AddressMatch {
  const bad = (why: string) => new Error(`${what} '${text}': ${why}`);
  let addr = text.trim();
  let portPart = '';
  const bracket = /^\[([^\]]+)\](?::(.*))?$/.exec(addr);
  if (bracket) {
    addr = bracket[1]!;
    portPart = bracket[2] ?? '';
  } else if (addr.split(':').length === 2) {
    [addr, portPart] = addr.split(':') as [string, string];
  }
  if (portPart && !withPort) throw bad('a client is an address or prefix, without a port');
  const [host, len, ...extra] = addr.split('/');
  if (extra.length) throw bad('more than one prefix length');
  const ip = parseIp(host ?? '');
  if (!ip) throw bad(`'${host}' is not an IPv4 or IPv6 address`);
  const max = ip.family === 4 ? 32 : 128;
  const prefix = len === undefined ? max : Number(len);
  if (!/^\d+$/.test(len ?? '0') || !Number.isInteger(prefix) || prefix < 0 || prefix > max) throw bad(`prefix length must be 0..${max}`);
  let port = 0;
  let proto = 0;
  if (portPart) {
    const m = /^(\d{1,5})(?:\/(tcp|udp))?$/i.exec(portPart);
    if (!m || Number(m[1]) < 1 || Number(m[1]) > 65535) throw bad('the port must be 1..65535, optionally /tcp or /udp');
    port = Number(m[1]);
    proto = m[2] ? PROTOCOLS[m[2].toLowerCase()]! : 0;
  }
  return { family: ip.family, bytes: maskBytes(ip.bytes, prefix), prefix, port, proto };
}

function maskOf(family: Family, prefix: number): Uint8Array {
  const m = new Uint8Array(16);
  for (let i = 0; i < (family === 4 ? 4 : 16); i++) m[i] = 0xff & (0xff << Math.max(0, 8 - Math.max(0, prefix - i * 8)));
  return m;
}

function maskBytes(bytes: Uint8Array, prefix: number): Uint8Array {
  const m = maskOf(bytes.length === 4 ? 4 : 6, prefix);
  return Uint8Array.from(bytes, (b, i) => b & m[i]!);
}

/** Counter names (comma-separated) checked against the ones a record can carry (`bits`: an lb node's by default,
 * BACKEND_COUNTER_BITS for a backend's). */
export function parseCounters(text: string, bits: ReadonlyMap<string, number> = CAPTURE_COUNTER_BITS): string[] {
  const list = text.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  for (const c of list)
    if (!bits.has(c)) throw new Error(`--reason '${c}': not a counter (one of ${[...bits.keys()].join(', ')})`);
  return list;
}

/** Action names (comma-separated) checked against `actions` (an lb node's XDP actions by default). */
export function parseActions(text: string, actions: readonly string[] = XDP_ACTIONS): string[] {
  const list = text.split(',').map((a) => a.trim().toUpperCase()).filter(Boolean);
  for (const a of list) if (!actions.includes(a)) throw new Error(`--action '${a}': not one of ${actions.join(', ')}`);
  return list;
}

/** Checks the limits the program's fixed arrays set; returns the filter. */
export function checkFilter(f: CaptureFilter): CaptureFilter {
  if (f.vips.length > MAX_MATCHES) throw new Error(`--vip: at most ${MAX_MATCHES} (got ${f.vips.length})`);
  if (f.clients.length > MAX_MATCHES) throw new Error(`--client: at most ${MAX_MATCHES} (got ${f.clients.length})`);
  if (f.reals.length > MAX_REALS) throw new Error(`--real: at most ${MAX_REALS} real ids (got ${f.reals.length})`);
  if (!Number.isInteger(f.sampleN) || f.sampleN < 1 || f.sampleN > 0xffffffff) throw new Error(`--sample: ${f.sampleN} is not 1..4294967295`);
  if (!Number.isInteger(f.rate) || f.rate < 0 || f.rate > 1_000_000_000) throw new Error(`--rate: ${f.rate} is not 0..1000000000`);
  if (!Number.isInteger(f.burst) || f.burst < 0 || f.burst > 1_000_000) throw new Error(`--burst: ${f.burst} is not 0..1000000`);
  return f;
}

function writeMatch(b: Buffer, off: number, m: AddressMatch): void {
  b.set(m.bytes, off);
  b.set(maskOf(m.family, m.prefix), off + 16);
  b.writeUInt16BE(m.port, off + 32);
  b[off + 34] = m.proto;
  b[off + 35] = m.family;
}

/** struct lb_cap_config for `f` (checked). With a rate, the bucket holds `burst` frames (at least 1). A backend's
 * programs: `bits` BACKEND_COUNTER_BITS and `actions` TC_ACTION_NAMES (their verdicts are TC actions). */
export function encodeCaptureConfig(f: CaptureFilter, bits: ReadonlyMap<string, number> = CAPTURE_COUNTER_BITS,
  actions: readonly string[] = XDP_ACTIONS, firstAction = 0): Buffer {
  checkFilter(f);
  const L = CAPTURE_CONFIG_LAYOUTS.lb_cap_config.members;
  const b = Buffer.alloc(CAPTURE_CONFIG_LAYOUTS.lb_cap_config.size);
  b.writeUInt32LE(F_ENABLED | (f.entry ? F_ENTRY : 0), L.flags);
  b.writeUInt32LE(f.sampleN, L.sample_n);
  let counters = 0n;
  for (const c of f.counters) {
    const bit = bits.get(c);
    if (bit === undefined) throw new Error(`--reason '${c}': not a counter here`);
    counters |= 1n << BigInt(bit);
  }
  b.writeBigUInt64LE(counters, L.counters);
  let verdicts = 0;
  for (const a of f.actions) {
    const code = actions.indexOf(a) + firstAction;
    if (code < 0 || code > 31 || actions.indexOf(a) < 0) throw new Error(`--action '${a}': not a verdict here`);
    verdicts |= 1 << code;
  }
  b.writeUInt32LE(verdicts >>> 0, L.verdicts);
  b[L.n_vips] = f.vips.length;
  b[L.n_clients] = f.clients.length;
  b[L.n_reals] = f.reals.length;
  f.vips.forEach((m, i) => writeMatch(b, L.vips + i * MATCH_SIZE, m));
  f.clients.forEach((m, i) => writeMatch(b, L.clients + i * MATCH_SIZE, m));
  f.reals.forEach((id, i) => b.writeUInt32LE(id, L.reals + i * 4));
  if (f.rate) {
    const token = BigInt(Math.ceil(1e9 / f.rate));
    b.writeBigUInt64LE(token, L.token_ns);
    b.writeBigUInt64LE(token * BigInt(Math.max(1, f.burst)), L.bucket_ns);
  }
  return b;
}
