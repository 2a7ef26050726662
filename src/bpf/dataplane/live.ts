// What an lb node's maps hold, read as a LiveState: settings, reals and listeners each in one batched read and
// decoded only when their bytes changed (LiveMemo), rings by their map's identity (RingCache) and read only when new,
// asked for, or due in the drift check's rotation. Also from the pins alone (`gitlb plan --live`). docs/datapath.md.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap } from '../libbpf.js';
import type { DesiredReal, DesiredVip } from '../../render/state.js';
import { EMPTY_LIVE, compareQuicServers, compareSourceRanges, ringRealIds, type QuicServer, type SourceRange, type LbSettings, type LiveService, type LiveVipMarker, type SnatSettings } from '../../render/ops.js';
import { MODE_NAME, PROTO_NAME, QUIC_MAPS, VIP_F_HASH_SRC_PORT, VIP_F_QUIC, VIP_F_SOURCE_RANGES, decodeQuicServer, decodeSourceRangeKey, decodeConfig, decodeReal, decodeVipKey, decodeVipValue, encodeU32 } from './codec.js';
import { RingCache, checkRingMaps, idRing, readRing, ringDigest, ringIdentities, ringsHoldSlots } from './rings.js';
import { SNAT_MAPS, decodeSnatConfig, snatConfigToSettings } from './snat.js';
import { RING_ROTATION_CHECKS, type LiveState, type ReadLiveOptions } from './types.js';
import { einval } from './validate.js';
import { SOURCE_RANGES_PIN, compareVips, type LbMaps } from './maps.js';

/** realSlots: absent only when reading the pins of a version whose rings still hold real ids; sourceRanges and
 * quicServers only when reading the pins of a version without them (nothing reads any). */
export type LiveMaps = Pick<LbMaps, 'vips' | 'rings' | 'reals' | 'config' | 'snatConfig'> & { realSlots?: BpfMap; sourceRanges?: BpfMap; quicServers?: BpfMap };
const LIVE_MAP_PINS: Record<Exclude<keyof LiveMaps, 'realSlots' | 'sourceRanges' | 'quicServers'>, string> = {
  vips: 'lb_vips', rings: 'lb_rings', reals: 'lb_reals', config: 'lb_config', snatConfig: SNAT_MAPS.config,
};

/** The raw bytes of a map as last read and what they decoded to. */
interface RawRead<T> { raw: Buffer; value: T }

/**
 * The previous read of each map, so that a map whose bytes did not change is not decoded again and an unchanged
 * node yields the very same (frozen) LiveState object: the reconciler then knows the plan against the same
 * desired state is the same as last time without planning again (the planner is pure; src/reconciler/converge.ts).
 */
export class LiveMemo {
  config?: RawRead<LbSettings | null>;
  snat?: RawRead<SnatSettings | null>;
  reals?: RawRead<DesiredReal[]>;
  vips?: RawRead<{ vips: DesiredVip[]; markers: LiveVipMarker[] }>;
  sourceRanges?: RawRead<SourceRange[]>;
  quicServers?: RawRead<QuicServer[]>;
  services?: LiveService[];
  live?: LiveState;
}

/** Freezes a decoded value and what it holds (one level of objects or arrays below it), so no caller edits the memo. */
function frozen<T>(v: T): T {
  if (v && typeof v === 'object') {
    for (const x of Object.values(v)) if (x && typeof x === 'object') frozen(x);
    Object.freeze(v);
  }
  return v;
}

/** Reads a whole hash map in one batched call; decodes it only when its bytes differ from `prev`. */
function readMap<T>(m: BpfMap, prev: RawRead<T> | undefined, decode: (entries: Array<[Buffer, Buffer]>) => T): RawRead<T> {
  const { keys, values, count } = m.lookupBatch();
  const raw = Buffer.concat([keys.subarray(0, count * m.keySize), values.subarray(0, count * m.valueBufferSize)]);
  if (prev && prev.raw.equals(raw)) return prev;
  const entries: Array<[Buffer, Buffer]> = [];
  for (let i = 0; i < count; i++)
    entries.push([keys.subarray(i * m.keySize, (i + 1) * m.keySize), values.subarray(i * m.valueBufferSize, (i + 1) * m.valueBufferSize)]);
  return { raw, value: frozen(decode(entries)) };
}

/** Reads entry 0 of a one-entry settings array; decodes it only when its bytes differ from `prev`. */
function readSetting<T>(m: BpfMap, prev: RawRead<T | null> | undefined, decode: (b: Buffer) => T): RawRead<T | null> {
  const raw = m.lookup(encodeU32(0)) ?? Buffer.alloc(0);
  if (prev && prev.raw.equals(raw)) return prev;
  return { raw, value: frozen(raw.some((x) => x !== 0) ? decode(raw) : null) };
}

function decodeReals(entries: Array<[Buffer, Buffer]>): DesiredReal[] {
  return entries.map(([k, v]) => ({ id: k.readUInt32LE(0), ...decodeReal(v) })).sort((a, b) => a.id - b.id);
}

function decodeVips(entries: Array<[Buffer, Buffer]>): { vips: DesiredVip[]; markers: LiveVipMarker[] } {
  const vips: DesiredVip[] = [];
  const markers: LiveVipMarker[] = [];
  for (const [k, v] of entries) {
    const key = decodeVipKey(k);
    if (key.port === 0 && key.proto === 0) {
      markers.push({ address: key.addr, family: key.family });
      continue;
    }
    const val = decodeVipValue(v);
    const gue = MODE_NAME[val.mode] === 'dsr-gue';
    vips.push({ vip: key.addr, family: key.family, port: key.port, protocol: PROTO_NAME[key.proto] ?? 'TCP',
      targetPort: gue ? key.port : val.targetPort, ...(gue && { guePort: val.targetPort }),
      serviceId: val.serviceId, forwarding: MODE_NAME[val.mode] ?? 'snat',
      hashSourcePort: (val.flags & VIP_F_HASH_SRC_PORT) !== 0, ...((val.flags & VIP_F_SOURCE_RANGES) !== 0 && { sourceRanges: true as const }),
      ...(val.affinityS ? { affinityTimeoutS: val.affinityS } : {}), ...((val.flags & VIP_F_QUIC) !== 0 && { quic: true as const }) });
  }
  vips.sort(compareVips);
  return { vips, markers };
}

/**
 * What the maps hold. Settings, reals and listeners are read whole, each map in one batched call, and decoded only
 * when their bytes changed. Rings cost one batched read of lb_rings (each service's inner map id): a ring's
 * contents are read only when its map is new to `cache`, when tables are asked for, with `verify`, or when the
 * service is due in the rotation turn `opts.verifyTurn` (service id mod RING_ROTATION_CHECKS).
 */
export function readLbLive(m: LiveMaps, cache: RingCache, opts: ReadLiveOptions, memo: LiveMemo): LiveState {
  const config = (memo.config = readSetting(m.config, memo.config, decodeConfigSettings));
  const snat = (memo.snat = readSetting(m.snatConfig, memo.snat, (b) => snatConfigToSettings(decodeSnatConfig(b))));
  const reals = (memo.reals = readMap(m.reals, memo.reals, decodeReals));
  const vips = (memo.vips = readMap(m.vips, memo.vips, decodeVips));
  const ranges = (memo.sourceRanges = readSourceRanges(m.sourceRanges, memo.sourceRanges));
  const quic = (memo.quicServers = m.quicServers ? readMap(m.quicServers, memo.quicServers, decodeQuicServers) : NO_QUIC_SERVERS);
  const services = readServices(m, cache, opts, memo);
  const prev = memo.live;
  if (prev && prev.settings === config.value && prev.snat === snat.value && prev.reals === reals.value &&
    prev.vips === vips.value.vips && prev.markers === vips.value.markers && prev.sourceRanges === ranges.value && prev.quicServers === quic.value &&
    prev.services === services) return prev;
  const live: LiveState = {
    settings: config.value,
    snat: snat.value,
    reals: reals.value,
    services,
    vips: vips.value.vips,
    markers: vips.value.markers,
    sourceRanges: ranges.value,
    quicServers: quic.value,
    backendVips: [],
    backendTunnels: [],
  };
  if (!opts.tables) memo.live = Object.freeze(live);
  return live;
}

const NO_QUIC_SERVERS: RawRead<QuicServer[]> = { raw: Buffer.alloc(0), value: frozen([]) };

/** lb_quic_servers as (service, server id, real id); the slot each value also holds is this node's, not the plan's. */
function decodeQuicServers(entries: Array<[Buffer, Buffer]>): QuicServer[] {
  return entries.map(([k, v]) => {
    const { serviceId, serverId, realId } = decodeQuicServer(k, v);
    return { serviceId, serverId, realId };
  }).sort(compareQuicServers);
}

/** lb_source_ranges by its keys alone (every value says "allowed"), in batches where the kernel reads an LPM trie
 * so (6.x does), else key by key; decoded only when the keys differ from `prev`. */
function readSourceRanges(m: BpfMap | undefined, prev: RawRead<SourceRange[]> | undefined): RawRead<SourceRange[]> {
  let raw: Buffer = Buffer.alloc(0);
  if (m) {
    try {
      const { keys, count } = m.lookupBatch();
      raw = keys.subarray(0, count * m.keySize);
    } catch (e) {
      if (!['EINVAL', 'ENOTSUPP', 'EOPNOTSUPP'].includes((e as { code?: string }).code ?? '')) throw e;
      raw = Buffer.concat(m.keys());
    }
  }
  if (prev && prev.raw.equals(raw)) return prev;
  const out: SourceRange[] = [];
  for (let o = 0; o < raw.length; o += 28) out.push(decodeSourceRangeKey(raw.subarray(o, o + 28)));
  return { raw, value: frozen(out.sort(compareSourceRanges)) };
}

/** Reads a ring back in real ids: the slots + 1 an inner array holds name the ids lb_real_slots holds now (each
 * slot looked up once per readLive); the rings of an older version hold the ids themselves. */
export function ringReader(m: LiveMaps): (inner: BpfMap) => Uint32Array {
  if (!ringsHoldSlots(m.rings)) return readRing;
  const realSlots = m.realSlots;
  if (!realSlots) einval('lb_rings holds real slots, but lb_real_slots is not there to name them');
  const ids = new Map<number, number>();
  const idOf = (slot: number): number => {
    let id = ids.get(slot);
    if (id === undefined) ids.set(slot, (id = slot < realSlots.maxEntries ? realSlots.lookup(encodeU32(slot))?.readUInt32LE(0) ?? 0 : 0));
    return id;
  };
  return (inner) => {
    const entries = readRing(inner);
    return idRing(entries, idOf, entries); // in place: at 1,000 rings, 40 MB less to collect
  };
}

function readServices(m: LiveMaps, cache: RingCache, opts: ReadLiveOptions, memo: LiveMemo): LiveService[] {
  const outer = m.rings;
  let read: ((inner: BpfMap) => Uint32Array) | null = null;
  const turn = opts.verifyTurn === undefined ? -1 : opts.verifyTurn % RING_ROTATION_CHECKS;
  const out: LiveService[] = [];
  for (const [id, mapId] of ringIdentities(outer)) {
    const cached = cache.get(mapId);
    if (cached && !opts.tables && !opts.verify && id % RING_ROTATION_CHECKS !== turn) {
      out.push({ id, tableSize: cached.tableSize, digest: cached.digest, mapId, ...(cached.reals && { reals: cached.reals }) });
      continue;
    }
    const key = encodeU32(id);
    const inner = outer.openInner(key);
    if (!inner) continue; // deleted while we read
    try {
      const ring = (read ??= ringReader(m))(inner);
      const info = { tableSize: ring.length, digest: ringDigest(ring), reals: ringRealIds(ring) };
      const innerId = inner.id(); // the service may have been switched since the batch read
      cache.set(innerId, info);
      out.push({ id, ...info, mapId: innerId, ...(opts.tables && { ring }) });
    } finally {
      inner.close();
    }
  }
  cache.retain(out.map((s) => s.mapId!));
  if (opts.tables) return out;
  // the same identities and digests as the previous read: hand back the same (frozen) list
  const prev = memo.services;
  if (prev && prev.length === out.length &&
    prev.every((p, i) => p.id === out[i]!.id && p.mapId === out[i]!.mapId && p.digest === out[i]!.digest && p.tableSize === out[i]!.tableSize))
    return prev;
  return (memo.services = frozen(out));
}

/**
 * The LiveState of an lb node from its pins alone (no program loaded, nothing written): for `gitlb plan --live`.
 * A node without pins holds nothing.
 */
export function readPinnedLbLive(pinRoot: string, opts: ReadLiveOptions = {}): LiveState {
  if (!existsSync(join(pinRoot, 'lb_vips'))) return { ...EMPTY_LIVE };
  const opened: BpfMap[] = [];
  try {
    const maps = {} as LiveMaps;
    for (const [k, pin] of Object.entries(LIVE_MAP_PINS) as Array<[keyof typeof LIVE_MAP_PINS, string]>) {
      const m = BpfMap.open(join(pinRoot, pin), pin);
      opened.push(m);
      maps[k] = m;
    }
    checkRingMaps(maps.rings);
    if (ringsHoldSlots(maps.rings)) {
      maps.realSlots = BpfMap.open(join(pinRoot, 'lb_real_slots'), 'lb_real_slots');
      opened.push(maps.realSlots);
    }
    if (existsSync(join(pinRoot, QUIC_MAPS.servers))) {
      maps.quicServers = BpfMap.open(join(pinRoot, QUIC_MAPS.servers), QUIC_MAPS.servers);
      opened.push(maps.quicServers);
    }
    if (existsSync(join(pinRoot, SOURCE_RANGES_PIN))) {
      maps.sourceRanges = BpfMap.open(join(pinRoot, SOURCE_RANGES_PIN), SOURCE_RANGES_PIN);
      opened.push(maps.sourceRanges);
    }
    return readLbLive(maps, new RingCache(), opts, new LiveMemo());
  } finally {
    for (const m of opened) m.close();
  }
}

function decodeConfigSettings(b: Buffer): LbSettings {
  const c = decodeConfig(b);
  return { hashSeed: c.hashSeed, mtu: c.mtu, src4: c.src4, ...(c.src6 !== undefined && { src6: c.src6 }),
    ...(c.newFlowRate ? { newFlowRate: c.newFlowRate } : {}) };
}
