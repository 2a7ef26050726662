// SNAT maps of the LB program (src/bpf/include/lb_snat.h): byte layouts, the node's SNAT settings
// (lb_snat_config), the per-reason counters, reading the NAT table and sweeping expired translations.
// The settings are planned as SnatSettings (src/render/ops.ts) and written by ./index.ts; layouts are checked
// against BTF at load (checkSnatLayouts).
import { forEachPaged, nextTurn } from './paging.js';
import type { BpfMap, BpfObject } from '../libbpf.js';
import { perCpuCounters } from '../counters.js';
import type { DesiredState } from '../../render/state.js';
import { DEFAULT_SNAT_PORTS, SNAT_TIMEOUTS_S, desiredSnat, type SnatSettings } from '../../render/ops.js';
import { addr16, addrText, encodeFlowKey, type FlowKey } from './codec.js';

export { DEFAULT_SNAT_PORTS };
const NS = 1_000_000_000n;
/** Idle timeouts of a translation (ns): TCP established, TCP after FIN/RST, UDP (SNAT_TIMEOUTS_S in ns). */
export const DEFAULT_SNAT_TIMEOUTS = {
  tcpEstablishedNs: BigInt(SNAT_TIMEOUTS_S.tcpEstablishedS) * NS,
  tcpClosingNs: BigInt(SNAT_TIMEOUTS_S.tcpClosingS) * NS,
  udpNs: BigInt(SNAT_TIMEOUTS_S.udpS) * NS,
};
export type SnatTimeouts = typeof DEFAULT_SNAT_TIMEOUTS;

export const SNAT_MAPS = { config: 'lb_snat_config', fwd: 'lb_snat_fwd', rev: 'lb_snat_rev', stats: 'lb_snat_stats', owners: 'lb_snat_owners',
  served: 'lb_snat_served' } as const;

/** lb_snat_stats indexes, in enum lb_snat_counter order (lb_snat.h). */
export const SNAT_COUNTER_NAMES = [
  'snat_new', 'snat_hit', 'snat_reply', 'snat_icmp', 'snat_pass_local', 'snat_pass_expired', 'snat_reclaimed',
  'snat_drop_ports_exhausted', 'snat_drop_table_full', 'snat_drop_family', 'snat_pass_fragment', 'snat_repicked',
] as const;

export const SNAT_LAYOUTS: Record<string, { size: number; members: Record<string, number> }> = {
  lb_snat_config: { size: 56, members: { addr6: 0, addr4: 16, has4: 20, has6: 21, port_min: 22, port_max: 24,
    pad16: 26, pad32: 28, tcp_established_ns: 32, tcp_closing_ns: 40, udp_ns: 48 } },
  lb_snat_fwd: { size: 8, members: { real_id: 0, snat_port: 4, real_port: 6 } },
  lb_snat_rev_key: { size: 24, members: { real: 0, real_port: 16, snat_port: 18, proto: 20, family: 21, pad: 22 } },
  lb_snat_rev: { size: 64, members: { client: 0, vip: 16, client_port: 32, vip_port: 34, real_id: 36, state: 40,
    owner: 41, pad: 42, created_ns: 48, last_seen_ns: 56 } },
  lb_snat_owner: { size: 24, members: { addr6: 0, addr4: 16, served: 20 } },
  lb_snat_served_key: { size: 20, members: { addr: 0, family: 16, pad: 17 } },
};

function fail(message: string, code = 'EINVAL'): never {
  throw Object.assign(new Error(message), { code });
}

/** Throws (EPROTO) when the object's BTF layouts differ from SNAT_LAYOUTS. */
export function checkSnatLayouts(obj: Pick<BpfObject, 'btfStruct'>): void {
  for (const [name, want] of Object.entries(SNAT_LAYOUTS)) {
    const got = obj.btfStruct(name);
    if (!got || got.size !== want.size) fail(`xdp_lb.o: struct ${name} is ${got?.size} bytes, snat.ts expects ${want.size}`, 'EPROTO');
    for (const [member, off] of Object.entries(want.members)) {
      const m = got.members.find((x) => x.name === member);
      if (!m || m.offset !== off) fail(`xdp_lb.o: ${name}.${member} at ${m?.offset}, snat.ts expects ${off}`, 'EPROTO');
    }
  }
}

// ------------------------------------------------------------------ config

export interface SnatConfig {
  addr4?: string;
  addr6?: string;
  portMin: number;
  portMax: number;
  timeouts: SnatTimeouts;
}

export function validateSnatPorts(p: { min: number; max: number }, where = 'snatPorts'): void {
  for (const k of ['min', 'max'] as const)
    if (!Number.isInteger(p[k]) || p[k] < 1024 || p[k] > 65535) fail(`${where}.${k}: ${p[k]} must be an integer in 1024..65535`);
  if (p.min > p.max) fail(`${where}: min ${p.min} is above max ${p.max}`);
}

export function snatConfigOf(d: DesiredState): SnatConfig {
  const ports = d.snatPorts ?? DEFAULT_SNAT_PORTS;
  validateSnatPorts(ports);
  return snatSettingsToConfig(desiredSnat(d));
}

export function snatSettingsToConfig(s: SnatSettings): SnatConfig {
  return {
    ...(s.addr4 !== undefined && { addr4: s.addr4 }),
    ...(s.addr6 !== undefined && { addr6: s.addr6 }),
    portMin: s.portMin, portMax: s.portMax,
    timeouts: { tcpEstablishedNs: BigInt(s.tcpEstablishedS) * NS, tcpClosingNs: BigInt(s.tcpClosingS) * NS, udpNs: BigInt(s.udpS) * NS },
  };
}

export function snatConfigToSettings(c: SnatConfig): SnatSettings {
  return {
    ...(c.addr4 !== undefined && { addr4: c.addr4 }),
    ...(c.addr6 !== undefined && { addr6: c.addr6 }),
    portMin: c.portMin, portMax: c.portMax,
    tcpEstablishedS: Number(c.timeouts.tcpEstablishedNs / NS), tcpClosingS: Number(c.timeouts.tcpClosingNs / NS),
    udpS: Number(c.timeouts.udpNs / NS),
  };
}

export function encodeSnatConfig(c: SnatConfig): Buffer {
  const b = Buffer.alloc(56);
  if (c.addr6) addr16(c.addr6).copy(b, 0);
  if (c.addr4) addr16(c.addr4).copy(b, 16, 0, 4);
  b[20] = c.addr4 ? 1 : 0;
  b[21] = c.addr6 ? 1 : 0;
  b.writeUInt16LE(c.portMin, 22);
  b.writeUInt16LE(c.portMax, 24);
  b.writeBigUInt64LE(c.timeouts.tcpEstablishedNs, 32);
  b.writeBigUInt64LE(c.timeouts.tcpClosingNs, 40);
  b.writeBigUInt64LE(c.timeouts.udpNs, 48);
  return b;
}

export function decodeSnatConfig(b: Buffer): SnatConfig {
  return {
    ...(b[20] ? { addr4: addrText(b.subarray(16, 20), 4) } : {}),
    ...(b[21] ? { addr6: addrText(b.subarray(0, 16), 6) } : {}),
    portMin: b.readUInt16LE(22), portMax: b.readUInt16LE(24),
    timeouts: { tcpEstablishedNs: b.readBigUInt64LE(32), tcpClosingNs: b.readBigUInt64LE(40), udpNs: b.readBigUInt64LE(48) },
  };
}

/** Sizes of the NAT maps at first load: as many translations as the connection table has entries. */
export function snatMapSizes(d: DesiredState): Record<string, number> {
  return { [SNAT_MAPS.fwd]: d.conntrackMaxEntries, [SNAT_MAPS.rev]: d.conntrackMaxEntries };
}

// ------------------------------------------------------------------ NAT table

export const SNAT_STATE = { open: 0, closing: 1 } as const;

export interface SnatRevKey { real: string; realPort: number; snatPort: number; proto: number; family: 4 | 6 }
export interface SnatRev {
  client: string; vip: string; clientPort: number; vipPort: number; realId: number;
  state: number; createdNs: bigint; lastSeenNs: bigint;
  /** 0: this node's translation; n: another lb node's, its SNAT address in lb_snat_owners[n] (connection-state sync) */
  owner?: number;
}
export interface SnatFwd { realId: number; snatPort: number; realPort: number }

export function encodeSnatRevKey(k: SnatRevKey): Buffer {
  const b = Buffer.alloc(24);
  addr16(k.real).copy(b, 0);
  b.writeUInt16BE(k.realPort, 16);
  b.writeUInt16BE(k.snatPort, 18);
  b[20] = k.proto;
  b[21] = k.family;
  return b;
}

export function decodeSnatRevKey(b: Buffer): SnatRevKey {
  const family = b[21] === 6 ? 6 : 4;
  return { real: addrText(b.subarray(0, 16), family), realPort: b.readUInt16BE(16), snatPort: b.readUInt16BE(18), proto: b[20]!, family };
}

/** lb_snat_rev value layout (lb_snat.h) for readers that skip decoding: bytes 0..39 are a translation's identity
 * (client, vip, ports, real id), then its state, its owner slot (0: this node's own) and its last packet's time. */
export const SNAT_REV_IDENTITY_BYTES = 40;
export const SNAT_REV_STATE_AT = 40;
export const SNAT_REV_OWNER_AT = 41;
export const SNAT_REV_LAST_SEEN_AT = 56;

export function encodeSnatRev(v: SnatRev): Buffer {
  const b = Buffer.alloc(64);
  addr16(v.client).copy(b, 0);
  addr16(v.vip).copy(b, 16);
  b.writeUInt16BE(v.clientPort, 32);
  b.writeUInt16BE(v.vipPort, 34);
  b.writeUInt32LE(v.realId, 36);
  b[SNAT_REV_STATE_AT] = v.state;
  b[SNAT_REV_OWNER_AT] = v.owner ?? 0;
  b.writeBigUInt64LE(v.createdNs, 48);
  b.writeBigUInt64LE(v.lastSeenNs, SNAT_REV_LAST_SEEN_AT);
  return b;
}

export function decodeSnatRev(b: Buffer, family: 4 | 6): SnatRev {
  return { client: addrText(b.subarray(0, 16), family), vip: addrText(b.subarray(16, 32), family),
    clientPort: b.readUInt16BE(32), vipPort: b.readUInt16BE(34), realId: b.readUInt32LE(36), state: b[SNAT_REV_STATE_AT]!,
    owner: b[SNAT_REV_OWNER_AT]!, createdNs: b.readBigUInt64LE(48), lastSeenNs: b.readBigUInt64LE(SNAT_REV_LAST_SEEN_AT) };
}

export function encodeSnatFwd(v: SnatFwd): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32LE(v.realId, 0);
  b.writeUInt16BE(v.snatPort, 4);
  b.writeUInt16BE(v.realPort, 6);
  return b;
}

export function decodeSnatFwd(b: Buffer): SnatFwd {
  return { realId: b.readUInt32LE(0), snatPort: b.readUInt16BE(4), realPort: b.readUInt16BE(6) };
}

/** The forward key of a translation: the client's flow as it arrives (dst = VIP). */
export function snatFwdKey(k: SnatRevKey, v: SnatRev): Buffer {
  const fk: FlowKey = { src: v.client, dst: v.vip, sport: v.clientPort, dport: v.vipPort, proto: k.proto, family: k.family };
  return encodeFlowKey(fk);
}

export interface SnatTranslation { key: SnatRevKey; rev: SnatRev }

/** Every translation in the reverse map (the owner of each SNAT port). */
export function listSnat(obj: BpfObject): SnatTranslation[] {
  return obj.map(SNAT_MAPS.rev).entries().map(([k, v]) => {
    const key = decodeSnatRevKey(k);
    return { key, rev: decodeSnatRev(v, key.family) };
  });
}

/**
 * This node's own open translations (owner 0) that saw a packet within `withinNs` of `nowNs` (a drained node's
 * remaining SNAT connections, src/reconciler/flows/drain-watch.ts): read from the value bytes without decoding, in
 * pages with the event loop's turn between them (paging.ts), as the sweep.
 */
export async function countActiveOwnTranslations(obj: BpfObject, withinNs: bigint, nowNs: bigint = monotonicNs(),
  pause: () => Promise<void> = nextTurn): Promise<number> {
  let n = 0;
  await forEachPaged(obj.map(SNAT_MAPS.rev), (_k, v) => {
    if (v[SNAT_REV_OWNER_AT] !== 0 || v[SNAT_REV_STATE_AT] !== SNAT_STATE.open) return;
    if (nowNs - v.readBigUInt64LE(SNAT_REV_LAST_SEEN_AT) < withinNs) n++;
  }, pause);
  return n;
}

/** Now on the translations' clock (CLOCK_MONOTONIC; libuv's hrtime reads it on Linux, xdp_lb its coarse variant,
 * at most a tick behind: lb_snat.h lb_snat_now). */
export function monotonicNs(): bigint {
  return process.hrtime.bigint();
}

export function snatExpired(key: SnatRevKey, rev: SnatRev, cfg: SnatConfig, nowNs: bigint): boolean {
  const t = key.proto === 17 ? cfg.timeouts.udpNs
    : rev.state === SNAT_STATE.closing ? cfg.timeouts.tcpClosingNs : cfg.timeouts.tcpEstablishedNs;
  return nowNs > rev.lastSeenNs && nowNs - rev.lastSeenNs > t;
}

/**
 * Deletes expired translations: the reverse entry, and the forward entry when it still points at it. The
 * data path reclaims expired ports on its own when it probes them; this keeps the tables from filling with
 * flows nobody revisits. Forward entries are only deleted through their reverse entry, so a translation
 * being created while the sweep runs (reverse entry first, then forward) is never cut in half.
 * A page is scanned, then `pause` is awaited (the event loop's turn), then the page's expired translations are
 * deleted, each only while it still holds the value the scan judged (deleteUnchangedTranslation): a live flow's packet
 * may refresh a translation at any moment between the scan and the delete, and a refreshed one is not the sweep's.
 * Returns the number of entries deleted.
 */
export async function sweepSnat(obj: BpfObject, nowNs: bigint = monotonicNs(), pause: () => Promise<void> = nextTurn): Promise<number> {
  const cfgBuf = obj.map(SNAT_MAPS.config).lookup(Buffer.alloc(4));
  if (!cfgBuf) return 0;
  const cfg = decodeSnatConfig(Buffer.from(cfgBuf));
  const rev: BpfMap = obj.map(SNAT_MAPS.rev);
  const fwd: BpfMap = obj.map(SNAT_MAPS.fwd);
  let deleted = 0;
  let expired: Array<{ k: Buffer; v: Buffer; key: SnatRevKey }> = [];
  // in pages, the event loop's turn between them (paging.ts): a NAT table of 100,000 translations is read every 10 s
  await forEachPaged(rev, (k, v) => {
    const key = decodeSnatRevKey(k);
    if (snatExpired(key, decodeSnatRev(v, key.family), cfg, nowNs)) expired.push({ k, v, key });
  }, async () => {
    await pause();
    for (const e of expired) {
      // re-read first: a translation refreshed since the scan (the common case of the race) is never touched
      const now = rev.lookup(e.k);
      if (now && now.equals(e.v)) deleted += deleteUnchangedTranslation(rev, fwd, e.k, e.key, e.v);
    }
    expired = [];
  });
  return deleted;
}

/**
 * Deletes a translation the caller judged from `seen` (its reverse value as the caller read it) only while it still
 * holds exactly that: the reverse entry is removed and read in one call (lookupAndDelete), and when a packet changed
 * it since the caller's read (last_seen refreshed, state moved), it is put back (BPF_NOEXIST: a translation the data
 * path made on that key meanwhile stays) and its forward entry is kept. User space has no compare-and-swap on a hash
 * map, so what remains is a packet that finds no reverse entry in the microseconds between the delete and the put-back
 * (a forward packet then takes a new translation), or one that refreshes the entry through a pointer the data path
 * took just before the delete (that refresh is lost with the deleted element). Returns the number of entries deleted.
 */
export function deleteUnchangedTranslation(rev: BpfMap, fwd: BpfMap, k: Buffer, key: SnatRevKey, seen: Buffer): number {
  const gone = rev.lookupAndDelete(k);
  if (!gone) return 0;
  if (!gone.equals(seen)) {
    try {
      rev.update(k, gone, 'noexist');
    } catch {
      // EEXIST: the data path made a translation on that key meanwhile, which stays. Anything else (E2BIG: the
      // table filled the freed place) loses this one translation; the sweep or the peer's ends go on with the others.
    }
    return 0;
  }
  return 1 + deleteForward(fwd, key, decodeSnatRev(gone, key.family));
}

/** The forward entry of a translation whose reverse entry is gone, deleted only while it still points at it. */
function deleteForward(fwd: BpfMap, key: SnatRevKey, r: SnatRev): number {
  const fk = snatFwdKey(key, r);
  const f = fwd.lookup(fk);
  if (!f) return 0;
  const fv = decodeSnatFwd(Buffer.from(f));
  return fv.realId === r.realId && fv.snatPort === key.snatPort && fv.realPort === key.realPort && fwd.delete(fk) ? 1 : 0;
}

/** lb_snat_stats summed over CPUs, by name. */
export function snatCounters(obj: BpfObject | null): Record<string, number> {
  return obj ? perCpuCounters(obj.map(SNAT_MAPS.stats), SNAT_COUNTER_NAMES) : {};
}
