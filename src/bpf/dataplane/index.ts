// The LB node's data plane: loads/adopts build/bpf/xdp_lb.o with its maps pinned under pinRoot, turns a
// DesiredState into map writes (make-before-break, atomic ring switches, writes proportional to change),
// reads the live state back, and sums the counters. Map layout: docs/datapath.md.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, BpfObject, type XdpAttachment } from '../libbpf.js';
import type { DesiredReal, DesiredState, DesiredVip } from '../../render/state.js';
import {
  COUNTER_NAMES, LAYOUTS, addr16, MODE, MODE_NAME, PROTO_NAME, PROTO_NUMBER, VIP_F_HASH_SRC_PORT,
  decodeConfig, decodeReal, decodeService, decodeVipKey, decodeVipValue, encodeConfig, encodeReal,
  encodeService, encodeU32, encodeVipKey, encodeVipValue, familyOf, type ServiceValue,
} from './codec.js';
import { RingSpace } from './ring-space.js';
import { SNAT_MAPS, applySnatConfig, checkSnatLayouts, snatCounters, snatMapSizes } from './snat.js';

export interface ApplyReport { mapWrites: number; mapDeletes: number; ringSwitches: number; changedRingEntries: number }
export interface LiveState {
  reals: DesiredReal[];
  services: { id: number; tableSize: number; ring: Uint32Array; digest: string }[];
  vips: DesiredVip[];
  hashSeed: number;
}
export interface DataPlane {
  apply(desired: DesiredState): Promise<ApplyReport>;
  readLive(): Promise<LiveState>;
  counters(): Promise<Record<string, number | Record<string, number>>>;
  close(): void;
}
export interface LbDataPlaneOptions {
  pinRoot: string;
  interface?: string;
  xdpMode?: 'native' | 'generic' | 'auto';
  netns?: never;
}

export const OBJECT_NAME = 'xdp_lb';
export const PROGRAM_NAME = 'xdp_lb';
export const LINK_PIN = 'xdp_link';
/** Map capacities of lb_maps.h (LB_MAX_REALS, LB_MAX_SERVICES, LB_MAX_VIPS: listeners + address markers). */
const MAX_REALS = 65536;
const MAX_SERVICES = 1024;
const MAX_VIP_ENTRIES = 4096;
/** Entries of lb_ring at first load unless the desired rings need more (2 regions per service, 2x headroom). */
export const DEFAULT_RING_CAPACITY = 1 << 21;

export function ringCapacityFor(desired: DesiredState): number {
  const need = 4 * desired.services.reduce((n, s) => n + s.tableSize, 0);
  let cap = DEFAULT_RING_CAPACITY;
  while (cap < need) cap *= 2;
  return cap;
}

export function ringDigest(ring: Uint32Array): string {
  const le = Buffer.alloc(ring.length * 4);
  for (let i = 0; i < ring.length; i++) le.writeUInt32LE(ring[i]!, i * 4);
  return createHash('sha256').update(le).digest('hex');
}

function fail(message: string): never {
  throw Object.assign(new Error(message), { code: 'EINVAL' });
}

/** Rejects a desired state the data plane cannot represent, naming the field. */
export function validateDesired(d: DesiredState): void {
  const reals = new Map(d.reals.map((r) => [r.id, r]));
  for (const r of d.reals) {
    if (!Number.isInteger(r.id) || r.id < 1 || r.id > 0xffffffff) fail(`reals[id=${r.id}].id: must be a u32 >= 1`);
    if (familyOf(r.address) !== r.family) fail(`reals[id=${r.id}].family: ${r.family} does not match ${r.address}`);
  }
  const services = new Set<number>();
  for (const s of d.services) {
    if (!Number.isInteger(s.id) || s.id < 1 || s.id > 0xffffffff) fail(`services[${s.name}].id: must be a u32 >= 1`);
    if (s.ring.length !== s.tableSize) fail(`services[${s.name}].ring: length ${s.ring.length} != tableSize ${s.tableSize}`);
    for (let i = 0; i < s.ring.length; i++) {
      const id = s.ring[i]!;
      if (id !== 0 && !reals.has(id)) fail(`services[${s.name}].ring[${i}]: real id ${id} is not in reals`);
    }
    services.add(s.id);
  }
  for (const v of d.vips) {
    const where = `vips[${v.vip}:${v.port}/${v.protocol}]`;
    if (!services.has(v.serviceId)) fail(`${where}.serviceId: service ${v.serviceId} is not in services`);
    if (familyOf(v.vip) !== v.family) fail(`${where}.family: ${v.family} does not match ${v.vip}`);
    if (!(v.forwarding in MODE)) fail(`${where}.forwarding: unknown '${v.forwarding}'`);
  }
  if (!Number.isInteger(d.mtu) || d.mtu < 576 || d.mtu > 65535) fail(`mtu: ${d.mtu} out of range`);
  if (d.role !== 'lb') fail(`role: the LB data plane applies 'lb' nodes, node '${d.node}' is '${d.role}'`);
  for (const [what, n, max] of [['reals', d.reals.length, MAX_REALS], ['services', d.services.length, MAX_SERVICES],
    ['vips', 2 * d.vips.length, MAX_VIP_ENTRIES]] as const)
    if (n > max) fail(`${what}: ${n} entries exceed the map capacity ${max} (lb_consts.h)`);
  if (!Number.isInteger(d.conntrackMaxEntries) || d.conntrackMaxEntries < 1) fail(`conntrackMaxEntries: ${d.conntrackMaxEntries}`);
}

const hexKey = (b: Buffer) => b.toString('hex');

/** The order of DesiredState.vips: family, address bytes, port, protocol (as render sorts them). */
export function compareVips(a: DesiredVip, b: DesiredVip): number {
  return a.family - b.family || Buffer.compare(addr16(a.vip), addr16(b.vip)) || a.port - b.port ||
    (a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0);
}

function vipEntries(d: DesiredState): Map<string, [Buffer, Buffer]> {
  const out = new Map<string, [Buffer, Buffer]>();
  for (const v of d.vips) {
    const k = encodeVipKey({ addr: v.vip, family: v.family, port: v.port, proto: PROTO_NUMBER[v.protocol] });
    const val = encodeVipValue({ serviceId: v.serviceId, targetPort: v.targetPort, mode: MODE[v.forwarding],
      flags: v.hashSourcePort ? VIP_F_HASH_SRC_PORT : 0 });
    out.set(hexKey(k), [k, val]);
    // address marker: lets the program drop damaged packets to a VIP address instead of passing them
    const mk = encodeVipKey({ addr: v.vip, family: v.family, port: 0, proto: 0 });
    out.set(hexKey(mk), [mk, Buffer.alloc(8)]);
  }
  return out;
}

function configOf(d: DesiredState): Buffer {
  const own = d.addresses ?? [];
  return encodeConfig({ hashSeed: d.hashSeed, mtu: d.mtu, src4: own.filter((a) => familyOf(a) === 4),
    src6: own.find((a) => familyOf(a) === 6) });
}

class LbDataPlane implements DataPlane {
  private obj: BpfObject | null = null;
  private maps!: Record<'vips' | 'services' | 'ring' | 'reals' | 'conntrack' | 'config' | 'counters' | 'serviceStats' | 'realStats', BpfMap>;
  private mirror: Uint32Array = new Uint32Array(0); // what lb_ring holds, entry by entry
  private space!: RingSpace;
  private services = new Map<number, ServiceValue>();
  private reals = new Map<number, Buffer>();
  private vips = new Map<string, [Buffer, Buffer]>();
  private config: Buffer | null = null;
  private attachment: XdpAttachment | null = null;

  constructor(private readonly opts: LbDataPlaneOptions) {}

  /** Loads the object; adopts pinned maps (their sizes win, so pins stay compatible). */
  async load(desired?: DesiredState): Promise<void> {
    const pinned = (name: string) => join(this.opts.pinRoot, name);
    const mapMaxEntries: Record<string, number> = {};
    for (const name of ['lb_ring', 'lb_conntrack', SNAT_MAPS.fwd, SNAT_MAPS.rev]) {
      if (existsSync(pinned(name))) {
        const m = BpfMap.open(pinned(name));
        mapMaxEntries[name] = m.maxEntries;
        m.close();
      }
    }
    if (desired) {
      mapMaxEntries.lb_ring ??= ringCapacityFor(desired);
      mapMaxEntries.lb_conntrack ??= desired.conntrackMaxEntries;
      for (const [name, n] of Object.entries(snatMapSizes(desired))) mapMaxEntries[name] ??= n;
    }
    const obj = await BpfObject.load(OBJECT_NAME, { pinRoot: this.opts.pinRoot, reusePinnedMaps: true, mapMaxEntries });
    try {
      for (const [name, want] of Object.entries(LAYOUTS)) {
        const got = obj.btfStruct(name);
        if (!got || got.size !== want.size) fail(`${OBJECT_NAME}.o: struct ${name} is ${got?.size} bytes, codec expects ${want.size}`);
        for (const [member, off] of Object.entries(want.members)) {
          const m = got.members.find((x) => x.name === member);
          if (!m || m.offset !== off) fail(`${OBJECT_NAME}.o: ${name}.${member} at ${m?.offset}, codec expects ${off}`);
        }
      }
      checkSnatLayouts(obj);
      this.maps = {
        vips: obj.map('lb_vips'), services: obj.map('lb_services'), ring: obj.map('lb_ring'), reals: obj.map('lb_reals'),
        conntrack: obj.map('lb_conntrack'), config: obj.map('lb_config'), counters: obj.map('lb_counters'),
        serviceStats: obj.map('lb_service_stats'), realStats: obj.map('lb_real_stats'),
      };
      this.obj = obj;
      this.adoptMaps();
      if (this.opts.interface && existsSync(pinned(LINK_PIN))) this.attach();
    } catch (e) {
      this.obj = null;
      obj.close();
      throw e;
    }
  }

  private adoptMaps(): void {
    const m = this.maps;
    this.services = new Map(m.services.entries().map(([k, v]) => [k.readUInt32LE(0), decodeService(v)]));
    this.reals = new Map(m.reals.entries().map(([k, v]) => [k.readUInt32LE(0), Buffer.from(v)]));
    this.vips = new Map(m.vips.entries().map(([k, v]) => [hexKey(k), [Buffer.from(k), Buffer.from(v)]]));
    const cfg = m.config.lookup(encodeU32(0));
    this.config = cfg && cfg.some((x) => x !== 0) ? Buffer.from(cfg) : null;
    this.mirror = this.readRing();
    const used: Array<[number, number]> = [];
    for (const s of this.services.values()) used.push([s.ringBase, s.tableSize], [s.standbyBase, s.tableSize]);
    this.space = new RingSpace(m.ring.maxEntries, used);
  }

  private readRing(): Uint32Array {
    const ring = this.maps.ring;
    const out = new Uint32Array(ring.maxEntries);
    const { keys, values, count } = ring.lookupBatch(65536);
    for (let i = 0; i < count; i++) out[keys.readUInt32LE(i * 4)] = values.readUInt32LE(i * 4);
    return out;
  }

  private attach(): void {
    if (this.attachment || !this.opts.interface || !this.obj) return;
    this.attachment = this.obj.program(PROGRAM_NAME).attachXdp(this.opts.interface, this.opts.xdpMode ?? 'auto',
      join(this.opts.pinRoot, LINK_PIN));
  }

  async apply(desired: DesiredState): Promise<ApplyReport> {
    validateDesired(desired);
    if (this.opts.interface && desired.interface !== this.opts.interface)
      fail(`interface: desired state names '${desired.interface}', the data plane was opened on '${this.opts.interface}'`);
    if (!this.obj) await this.load(desired);
    const m = this.maps;
    const report: ApplyReport = { mapWrites: 0, mapDeletes: 0, ringSwitches: 0, changedRingEntries: 0 };
    const undo: Array<() => void> = [];
    const commit: Array<() => void> = [];

    const put = (map: BpfMap, key: Buffer, value: Buffer, shadow: { get(): Buffer | undefined; set(v: Buffer | undefined): void }) => {
      const prev = shadow.get();
      map.update(key, value);
      shadow.set(value);
      report.mapWrites++;
      undo.push(() => {
        if (prev) map.update(key, prev);
        else map.delete(key);
        shadow.set(prev);
      });
    };
    const del = (map: BpfMap, key: Buffer, shadow: { get(): Buffer | undefined; set(v: Buffer | undefined): void }) => {
      const prev = shadow.get();
      map.delete(key);
      shadow.set(undefined);
      report.mapDeletes++;
      if (prev) undo.push(() => { map.update(key, prev); shadow.set(prev); });
    };
    const mapShadow = <K>(store: Map<K, Buffer>, k: K) => ({
      get: () => store.get(k),
      set: (v: Buffer | undefined) => { if (v) store.set(k, v); else store.delete(k); },
    });
    const serviceShadow = (id: number) => ({
      get: () => { const s = this.services.get(id); return s ? encodeService(s) : undefined; },
      set: (v: Buffer | undefined) => { if (v) this.services.set(id, decodeService(v)); else this.services.delete(id); },
    });
    const vipShadow = (k: string, key: Buffer) => ({
      get: () => this.vips.get(k)?.[1],
      set: (v: Buffer | undefined) => { if (v) this.vips.set(k, [key, v]); else this.vips.delete(k); },
    });
    /** Writes into [base, base+ring.length) only the entries that differ from what lb_ring holds. */
    const writeRegion = (base: number, ring: Uint32Array): number => {
      const idx: number[] = [];
      for (let i = 0; i < ring.length; i++) if (this.mirror[base + i] !== ring[i]) idx.push(i);
      if (idx.length === 0) return 0;
      const keys = Buffer.alloc(idx.length * 4);
      const vals = Buffer.alloc(idx.length * 4);
      const old = Buffer.alloc(idx.length * 4);
      idx.forEach((i, n) => {
        keys.writeUInt32LE(base + i, n * 4);
        vals.writeUInt32LE(ring[i]!, n * 4);
        old.writeUInt32LE(this.mirror[base + i]!, n * 4);
      });
      m.ring.updateBatch(keys, vals, idx.length);
      idx.forEach((i) => { this.mirror[base + i] = ring[i]!; });
      undo.push(() => {
        m.ring.updateBatch(keys, old, idx.length);
        idx.forEach((i, n) => { this.mirror[base + i] = old.readUInt32LE(n * 4); });
      });
      report.mapWrites += idx.length;
      report.changedRingEntries += idx.length;
      return idx.length;
    };
    const allocRegion = (len: number): number => {
      const base = this.space.alloc(len);
      undo.push(() => this.space.release(base, len));
      return base;
    };

    try {
      // 1. node settings
      const cfg = configOf(desired);
      if (!this.config || !this.config.equals(cfg))
        put(m.config, encodeU32(0), cfg, { get: () => this.config ?? undefined, set: (v) => { this.config = v ?? null; } });
      report.mapWrites += applySnatConfig(this.obj!, desired, undo); // SNAT address, ports, timeouts (snat.ts)

      // 2. reals before any ring refers to them
      for (const r of desired.reals) {
        const v = encodeReal(r.address, r.family);
        if (!this.reals.get(r.id)?.equals(v)) put(m.reals, encodeU32(r.id), v, mapShadow(this.reals, r.id));
      }

      // 3. rings: fill the standby region with the entries that differ, then switch in one write
      for (const s of desired.services) {
        const cur = this.services.get(s.id);
        if (cur && cur.tableSize === s.tableSize) {
          let same = true;
          for (let i = 0; i < s.tableSize && same; i++) same = this.mirror[cur.ringBase + i] === s.ring[i];
          if (same) continue;
          writeRegion(cur.standbyBase, s.ring);
          put(m.services, encodeU32(s.id), encodeService({ ringBase: cur.standbyBase, standbyBase: cur.ringBase,
            tableSize: s.tableSize, flags: 0 }), serviceShadow(s.id));
          report.ringSwitches++;
          continue;
        }
        // new service, or a new table size: two fresh regions, both filled, then one switch
        const a = allocRegion(s.tableSize);
        const b = allocRegion(s.tableSize);
        writeRegion(a, s.ring);
        writeRegion(b, s.ring);
        put(m.services, encodeU32(s.id), encodeService({ ringBase: a, standbyBase: b, tableSize: s.tableSize, flags: 0 }),
          serviceShadow(s.id));
        report.ringSwitches++;
        if (cur) commit.push(() => { this.space.release(cur.ringBase, cur.tableSize); this.space.release(cur.standbyBase, cur.tableSize); });
      }

      // 4. listeners (and VIP address markers) once their services exist; stale ones go
      const wantVips = vipEntries(desired);
      for (const [k, [key, val]] of wantVips)
        if (!this.vips.get(k)?.[1].equals(val)) put(m.vips, key, val, vipShadow(k, key));
      for (const [k, [key]] of [...this.vips]) if (!wantVips.has(k)) del(m.vips, key, vipShadow(k, key));

      // 5. services no VIP refers to any more
      const wantServices = new Set(desired.services.map((s) => s.id));
      for (const [id, cur] of [...this.services]) {
        if (wantServices.has(id)) continue;
        del(m.services, encodeU32(id), serviceShadow(id));
        commit.push(() => {
          this.space.release(cur.ringBase, cur.tableSize);
          this.space.release(cur.standbyBase, cur.tableSize);
          m.serviceStats.delete(encodeU32(id));
        });
      }

      // 6. reals no ring refers to any more (connection-table entries to them fall back to the ring)
      const wantReals = new Set(desired.reals.map((r) => r.id));
      for (const id of [...this.reals.keys()]) {
        if (wantReals.has(id)) continue;
        del(m.reals, encodeU32(id), mapShadow(this.reals, id));
        commit.push(() => m.realStats.delete(encodeU32(id)));
      }
    } catch (e) {
      for (const u of undo.reverse()) {
        try { u(); } catch { /* keep restoring the rest */ }
      }
      throw e;
    }
    for (const c of commit) c();
    this.attach();
    return report;
  }

  async readLive(): Promise<LiveState> {
    if (!this.obj) return { reals: [], services: [], vips: [], hashSeed: 0 };
    const m = this.maps;
    const reals: DesiredReal[] = m.reals.entries()
      .map(([k, v]) => ({ id: k.readUInt32LE(0), ...decodeReal(v) }))
      .sort((a, b) => a.id - b.id);
    const ring = this.readRing();
    const services = m.services.entries().map(([k, v]) => {
      const s = decodeService(v);
      const r = ring.slice(s.ringBase, s.ringBase + s.tableSize);
      return { id: k.readUInt32LE(0), tableSize: s.tableSize, ring: r, digest: ringDigest(r) };
    }).sort((a, b) => a.id - b.id);
    const vips: DesiredVip[] = [];
    for (const [k, v] of m.vips.entries()) {
      const key = decodeVipKey(k);
      if (key.port === 0 && key.proto === 0) continue; // address marker
      const val = decodeVipValue(v);
      vips.push({ vip: key.addr, family: key.family, port: key.port, protocol: PROTO_NAME[key.proto] ?? 'TCP',
        targetPort: val.targetPort, serviceId: val.serviceId, forwarding: MODE_NAME[val.mode] ?? 'snat',
        hashSourcePort: (val.flags & VIP_F_HASH_SRC_PORT) !== 0 });
    }
    vips.sort(compareVips);
    const cfg = m.config.lookup(encodeU32(0));
    return { reals, services, vips, hashSeed: cfg ? decodeConfig(cfg).hashSeed : 0 };
  }

  async counters(): Promise<Record<string, number | Record<string, number>>> {
    const out: Record<string, number | Record<string, number>> = {};
    if (!this.obj) return out;
    const m = this.maps;
    COUNTER_NAMES.forEach((name, i) => {
      out[name] = Number(m.counters.lookupPerCpuSum(encodeU32(i))?.[0] ?? 0n);
    });
    const traffic = (map: BpfMap, prefix: string) => {
      for (const k of map.keys()) {
        const sums = map.lookupPerCpuSum(k);
        if (sums) out[`${prefix}:${k.readUInt32LE(0)}`] = { packets: Number(sums[0]), bytes: Number(sums[1]), newFlows: Number(sums[2]) };
      }
    };
    traffic(m.serviceStats, 'service');
    traffic(m.realStats, 'real');
    Object.assign(out, snatCounters(this.obj));
    return out;
  }

  /** Test and bench access to the loaded object (program for BPF_PROG_TEST_RUN, maps for inspection). */
  object(): BpfObject | null {
    return this.obj;
  }

  close(): void {
    this.attachment?.close();
    this.attachment = null;
    this.obj?.close();
    this.obj = null;
  }
}

export type LbDataPlaneHandle = DataPlane & { object(): BpfObject | null };

export async function openLbDataPlane(opts: LbDataPlaneOptions): Promise<LbDataPlaneHandle> {
  const dp = new LbDataPlane(opts);
  // an existing pinned data plane is adopted now; a fresh one loads on the first apply (its sizes come from it)
  if (existsSync(join(opts.pinRoot, 'lb_vips'))) await dp.load();
  return dp;
}
