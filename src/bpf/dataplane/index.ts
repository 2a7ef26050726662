// The LB node's data plane: loads/adopts build/bpf/xdp_lb.o with its maps pinned under pinRoot, reads what the
// maps hold (LiveState, table sizes), executes the ops converge planned (src/reconciler/converge.ts) in their order
// with undo (one outer-map update per ring switch, a run of switches or service deletes in one batch), and sums the
// counters. Validation of desired states: ./validate.ts. Map layout: docs/datapath.md.
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, BpfObject, type XdpAttachment } from '../libbpf.js';
import { pinnedXdpLink } from '../attach.js';
import { checkXdpForwarding, type XdpForwarding } from '../xdp-forwarding.js';
import { adoptedGeneric, readAttachRecord, removeAttachRecord, writeAttachRecord } from '../xdp-attach-record.js';
import { perCpuCounters, trafficAt } from '../counters.js';
import type { DesiredReal, DesiredState, DesiredVip } from '../../render/state.js';
import { EMPTY_LIVE, compareSourceRanges, ringRealIds, type LbSettings, type LiveService, type LiveVipMarker, type SnatSettings, type SourceRange } from '../../render/ops.js';
import {
  COUNTER_NAMES, LAYOUTS, addr16, MODE, MODE_NAME, PROTO_NAME, PROTO_NUMBER, VIP_F_HASH_SRC_PORT, VIP_F_SOURCE_RANGES,
  SOURCE_RANGE_ALLOW, decodeSourceRangeKey, encodeSourceRangeKey,
  decodeConfig, decodeReal, decodeVipKey, decodeVipValue, encodeConfig, encodeReal, encodeRealSlot, encodeU32, encodeVipKey, isMarkerKey, realSlotOf,
  encodeVipValue,
} from './codec.js';
import {
  RingCache, checkRingMaps, createRing, idRing, readRing, ringDigest, ringIdentities, ringsHoldSlots, slotRing, type RingInfo,
} from './rings.js';
import {
  SNAT_MAPS, checkSnatLayouts, decodeSnatConfig, encodeSnatConfig, snatConfigToSettings, snatCounters, snatMapSizes,
  snatSettingsToConfig, validateSnatPorts,
} from './snat.js';
import { openOldRings, readOldPins, restoreOldPins, restoreOldRings } from './migrate.js';
import { removeStaleNextPins, resizeTables, type ResizeResult, type TableResize } from './resize.js';
import { EMPTY_REPORT, PROGRESS_INTERVAL_MS, RING_ROTATION_CHECKS, UndoLog, undoableMapWrites, type ApplyReport, type DataPlane, type DataPlaneTarget, type ExecuteOptions, type LiveState, type Op, type ReadLiveOptions } from './types.js';

export type { ApplyReport, DataPlane, DataPlaneTarget, ExecuteOptions, LiveSource, LiveState, Op, ReadLiveOptions } from './types.js';
export { LB_CAPACITY, validateDesired } from './validate.js';
export { RING_ROTATION_CHECKS } from './types.js';
export { ringDigest } from './rings.js';

export interface LbDataPlaneOptions {
  pinRoot: string;
  interface?: string;
  xdpMode?: 'native' | 'generic' | 'auto';
  netns?: never;
}

export const OBJECT_NAME = 'xdp_lb';
export const PROGRAM_NAME = 'xdp_lb';
export const LINK_PIN = 'xdp_link';
const GENERIC_DETAIL = 'generic XDP transmits through the stack; not probed';

function fail(message: string): never {
  throw Object.assign(new Error(message), { code: 'EINVAL' });
}

const hexKey = (b: Buffer) => b.toString('hex');

/** The order of DesiredState.vips: family, address bytes, port, protocol (as render sorts them). */
export function compareVips(a: DesiredVip, b: DesiredVip): number {
  return a.family - b.family || Buffer.compare(addr16(a.vip), addr16(b.vip)) || a.port - b.port ||
    (a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0);
}

const vipKeyOf = (v: Pick<DesiredVip, 'vip' | 'family' | 'port' | 'protocol'>) =>
  encodeVipKey({ addr: v.vip, family: v.family, port: v.port, proto: PROTO_NUMBER[v.protocol] });
const vipValueOf = (v: DesiredVip, statsSlot: number) => encodeVipValue({ serviceId: v.serviceId, targetPort: v.targetPort,
  mode: MODE[v.forwarding], flags: (v.hashSourcePort ? VIP_F_HASH_SRC_PORT : 0) | (v.sourceRanges ? VIP_F_SOURCE_RANGES : 0), statsSlot });

/** Service id -> its stats slot, as the listeners in lb_vips carry it. */
function serviceSlots(vips: BpfMap): Map<number, number> {
  const out = new Map<number, number>();
  for (const [k, v] of vips.entries()) {
    if (isMarkerKey(k)) continue;
    const val = decodeVipValue(v);
    out.set(val.serviceId, val.statsSlot ?? 0);
  }
  return out;
}
const markerKeyOf = (m: LiveVipMarker) => encodeVipKey({ addr: m.address, family: m.family, port: 0, proto: 0 });
const MARKER_VALUE = Buffer.alloc(12);
const ZERO_TRAFFIC = Buffer.alloc(24); // lb_traffic
const FREE_SLOT = Buffer.alloc(24); // lb_real_slot with real id 0

type LbMaps = Record<'vips' | 'rings' | 'reals' | 'realSlots' | 'conntrack' | 'config' | 'snatConfig' | 'counters' | 'serviceStats' | 'realStats' | 'sourceRanges', BpfMap>;

/** The ops of one kind that follow each other from `start` (the executor batches such a run into one kernel call). */
function runOf<K extends Op['op']>(ops: readonly Op[], start: number, kind: K): Array<Extract<Op, { op: K }>> {
  let end = start;
  while (end < ops.length && ops[end]!.op === kind) end++;
  return ops.slice(start, end) as Array<Extract<Op, { op: K }>>;
}

/** The maps of a loaded xdp_lb, once its struct layouts are checked against the codecs (BTF). */
function checkedMaps(obj: BpfObject): LbMaps {
  for (const [name, want] of Object.entries(LAYOUTS)) {
    const got = obj.btfStruct(name);
    if (!got || got.size !== want.size) fail(`${OBJECT_NAME}.o: struct ${name} is ${got?.size} bytes, codec expects ${want.size}`);
    for (const [member, off] of Object.entries(want.members)) {
      const mm = got.members.find((x) => x.name === member);
      if (!mm || mm.offset !== off) fail(`${OBJECT_NAME}.o: ${name}.${member} at ${mm?.offset}, codec expects ${off}`);
    }
  }
  checkRingMaps(obj.map('lb_rings'));
  checkSnatLayouts(obj);
  return {
    vips: obj.map('lb_vips'), rings: obj.map('lb_rings'), reals: obj.map('lb_reals'), realSlots: obj.map('lb_real_slots'),
    conntrack: obj.map('lb_conntrack'),
    config: obj.map('lb_config'), snatConfig: obj.map(SNAT_MAPS.config), counters: obj.map('lb_counters'),
    serviceStats: obj.map('lb_service_stats'), realStats: obj.map('lb_real_stats'),
    sourceRanges: obj.map(SOURCE_RANGES_PIN),
  };
}

class LbDataPlane implements DataPlane {
  private obj: BpfObject | null = null;
  private maps!: LbMaps;
  private attachment: XdpAttachment | null = null;
  private readonly rings = new RingCache();
  /** The previous read of the maps (see LiveMemo). */
  private readonly memo = new LiveMemo();

  constructor(private readonly opts: LbDataPlaneOptions) {}

  /** Loads the object; adopts pinned maps (their sizes win, so pins stay compatible). */
  async load(desired?: DesiredState): Promise<void> {
    const pinned = (name: string) => join(this.opts.pinRoot, name);
    const mapMaxEntries: Record<string, number> = {};
    for (const name of ['lb_conntrack', SNAT_MAPS.fwd, SNAT_MAPS.rev]) {
      if (existsSync(pinned(name))) {
        const m = BpfMap.open(pinned(name));
        mapMaxEntries[name] = m.maxEntries;
        m.close();
      }
    }
    if (desired) {
      mapMaxEntries.lb_conntrack ??= desired.conntrackMaxEntries;
      for (const [name, n] of Object.entries(snatMapSizes(desired))) mapMaxEntries[name] ??= n;
    }
    // sizes come from the pins, so a pin is incompatible only when a newer program changed its layout or flags
    // (value size, BPF_F_NO_COMMON_LRU): that map starts empty once instead of the load failing; listeners and
    // settings in an older layout are carried over (migrate.ts)
    const old = readOldPins(this.opts.pinRoot);
    // rings of real ids (lb_rings of an older version): held open across the load, which replaces the pin
    const oldRings = openOldRings(this.opts.pinRoot);
    removeStaleNextPins(this.opts.pinRoot);
    let obj: BpfObject;
    try {
      obj = await BpfObject.load(OBJECT_NAME, { pinRoot: this.opts.pinRoot, reusePinnedMaps: true, mapMaxEntries,
        replaceIncompatiblePins: true });
    } catch (e) {
      oldRings?.close();
      throw e;
    }
    try {
      this.maps = checkedMaps(obj);
      this.obj = obj;
      restoreOldPins(old, this.maps);
      this.repairRealSlots();
      // once every real has its slot, and before the new program is attached (the old one keeps its own map)
      if (oldRings) restoreOldRings(oldRings, this.maps.rings, (id) => liveSlotOf(this.maps, id));
      // Pins of the single shared ring of earlier versions: unused now (rings live in lb_rings). Unlinking a pin
      // frees nothing a running program still holds; it only stops the old ring outliving the upgrade.
      for (const stale of ['lb_ring', 'lb_services']) rmSync(pinned(stale), { force: true });
      if (this.opts.interface && existsSync(pinned(LINK_PIN))) await this.attach();
    } catch (e) {
      this.obj = null;
      obj.close();
      throw e;
    } finally {
      oldRings?.close();
    }
  }

  /** Gives every real in lb_reals a slot of its own that lb_real_slots names it in. Needed only when pins from a
   * version without slots were adopted (every real then says slot 0); otherwise nothing is written. */
  private repairRealSlots(): void {
    const m = this.maps;
    const owner = new Map<number, number>();
    const broken: Array<[Buffer, Buffer]> = [];
    for (const [k, v] of m.reals.entries()) {
      const id = k.readUInt32LE(0);
      const slot = realSlotOf(v);
      const entry = m.realSlots.lookup(encodeU32(slot));
      if (!owner.has(slot) && entry && entry.readUInt32LE(0) === id) owner.set(slot, id);
      else broken.push([k, v]);
    }
    let next = 0;
    for (const [k, v] of broken) {
      while (owner.has(next)) next++;
      if (next >= m.realSlots.maxEntries) fail(`reals: all ${m.realSlots.maxEntries} real slots are in use`);
      owner.set(next, k.readUInt32LE(0));
      const value = Buffer.from(v);
      value.writeUInt16LE(next, 18);
      m.realStats.update(encodeU32(next), ZERO_TRAFFIC);
      m.realSlots.update(encodeU32(next), encodeRealSlot(k.readUInt32LE(0), value));
      m.reals.update(k, value);
    }
  }

  /**
   * Attaches xdp_lb and, when the attachment is native, checks that the interface really transmits XDP_TX frames
   * (xdp-forwarding.ts). One that cannot forward is never left in place: with xdpMode 'auto' the program is
   * re-attached in generic mode (the check says why), with 'native' attaching fails with the reason. A pinned link
   * of ours is replaced, not detached first (attach.ts: program swap without a gap where mode and interface stay).
   * The outcome is recorded beside the link (xdp-attach-record.ts), so a restart that adopts a generic link it
   * cannot probe still reports a fallback as one.
   */
  private async attach(): Promise<void> {
    if (this.attachment || !this.opts.interface || !this.obj) return;
    const ifname = this.opts.interface;
    const pinDir = this.opts.pinRoot;
    const pin = join(pinDir, LINK_PIN);
    const mode = this.opts.xdpMode ?? 'auto';
    const prog = this.obj.program(PROGRAM_NAME);
    const at = Date.now();
    // what the previous run recorded for the link pinned now (validated against that link)
    const prev = pinnedXdpLink(pin);
    const prevRec = prev && (prev.mode === 'native' || prev.mode === 'generic')
      ? readAttachRecord(pinDir, prev.linkId, prev.ifindex, prev.mode) : 'no link';
    this.attachment = prog.attachXdp(ifname, mode, pin);
    const a = this.attachment;
    if (a.mode !== 'native') {
      const rec = a.replacement?.how === 'program' ? prevRec : null;
      this.forwarding = rec !== null ? adoptedGeneric(rec, mode)
        : { mode: a.mode, requested: mode, fellBack: false, forwards: null, detail: GENERIC_DETAIL };
      this.record(typeof rec === 'object' && rec ? { probe: rec.probe, at: rec.at } : { probe: this.forwarding.detail, at });
      return;
    }
    const check = await checkXdpForwarding(ifname);
    this.forwarding = { mode: 'native', requested: mode, fellBack: false, ...check };
    if (check.forwards !== false) return this.record({ probe: check.detail, at });
    if (mode === 'native') {
      this.forwarding = null;
      this.attachment = null;
      const was = a.replacement?.how === 'mode' ? a.replacement.mode : null;
      if (!was) {
        a.detach();
        removeAttachRecord(pinDir);
        throw Object.assign(new Error(`native XDP on ${ifname} cannot forward: ${check.detail}`), { code: 'ENOTSUP' });
      }
      // this start replaced a working generic link to try native: put generic back (with what was recorded for it)
      // rather than leave the interface without a program, and refuse to start all the same
      const back = prog.attachXdp(ifname, was, pin);
      a.close();
      if (typeof prevRec === 'object') writeAttachRecord(pinDir, { ...prevRec, linkId: back.linkId, ifindex: back.ifindex });
      else removeAttachRecord(pinDir);
      back.close();
      throw Object.assign(new Error(`native XDP on ${ifname} cannot forward: ${check.detail}; the ${was} attachment is back in place`), { code: 'ENOTSUP' });
    }
    // native -> generic on the same link pin: detach and attach back to back (attach.ts, replacement 'mode')
    this.attachment = prog.attachXdp(ifname, 'generic', pin);
    a.close();
    // The reconciler reads this (DataPlane.forwarding), logs the fallback and puts it in the node's status.
    this.forwarding = { mode: 'generic', requested: mode, fellBack: true, forwards: null, detail: `native XDP could not forward, fell back to generic: ${check.detail}` };
    this.record({ probe: check.detail, at });
  }

  /**
   * Resizes tables sized by conntrackMaxEntries without an outage (resize.ts): a new instance of xdp_lb using the
   * new tables replaces the running one in its pinned link. Not undone when a later op of the same execute fails:
   * the new tables hold every flow, and an apply of the old size resizes back.
   */
  private async resize(resizes: TableResize[], report: ApplyReport): Promise<void> {
    const pinRoot = this.opts.pinRoot;
    if (!this.attachment && existsSync(join(pinRoot, LINK_PIN)))
      fail(`${resizes[0]!.map}: xdp_lb runs in the link pinned at ${join(pinRoot, LINK_PIN)}, which this data plane ` +
        `(opened without an interface) does not hold; the resize needs the program swapped in that link`);
    const { obj, tables, ms } = await resizeTables({
      pinRoot, obj: this.obj!, resizes,
      load: async (mapFds) => {
        const o = await BpfObject.load(OBJECT_NAME, { pinRoot, reusePinnedMaps: true, mapFds });
        try {
          checkedMaps(o);
        } catch (e) {
          o.close();
          throw e;
        }
        return o;
      },
      swap: (o) => this.swapProgram(o),
    });
    const previous = this.obj!;
    this.maps = checkedMaps(obj);
    this.obj = obj;
    previous.close();
    this.resized = tables;
    this.resizeMs = ms;
    report.mapWrites += resizes.length; // one per table (the ops are counted by execute's loop)
  }

  /** What the last resize did, per table (copied entries, merge counts): for logs, tests and bench/. */
  resized: ResizeResult['tables'] | null = null;
  /** How long each phase of the last resize took (ms). */
  resizeMs: ResizeResult['ms'] | null = null;

  /** Points the pinned link at `obj`'s program (bpf_link_update, compare-and-swap); the link stays the same. */
  private swapProgram(obj: BpfObject): void {
    const a = this.attachment;
    if (!a) return; // not attached: packets reach no instance (BPF_PROG_TEST_RUN runs the loaded one)
    // same interface and mode as the link has: attach.ts swaps the program in the link (replacement 'program')
    const next = obj.program(PROGRAM_NAME).attachXdp(this.opts.interface!, a.mode, join(this.opts.pinRoot, LINK_PIN));
    a.close();
    this.attachment = next;
  }

  /** Keeps this.forwarding beside the link pin for the next daemon to adopt. */
  private record(r: { probe: string; at: number }): void {
    const a = this.attachment!;
    const f = this.forwarding!;
    writeAttachRecord(this.opts.pinRoot, { linkId: a.linkId, ifindex: a.ifindex, mode: f.mode, requested: f.requested,
      fellBack: f.fellBack, forwards: f.forwards, ...r });
  }

  /** How xdp_lb is attached and what the forwarding check found (null before the first attach). */
  forwarding: XdpForwarding | null = null;

  /** What converge validates desired states against: lb nodes, on the interface this data plane was opened on. */
  get target(): DataPlaneTarget {
    return { role: 'lb', ...(this.opts.interface !== undefined && { interface: this.opts.interface }) };
  }

  /** Sizes of the loaded tables converge plans resizes from (none before the first load: the load sizes them). */
  tableSizes(): Record<string, number> {
    return this.obj ? Object.fromEntries(this.obj.maps().map((m) => [m.name, m.maxEntries])) : {};
  }

  async execute(ops: Op[], opts: ExecuteOptions = {}): Promise<ApplyReport> {
    if (!this.obj) await this.load(opts.desired);
    const report: ApplyReport = { ...EMPTY_REPORT };
    // table resizes first, all in one program swap; refused before anything else is written (resize.ts)
    const resizes = ops.filter((o): o is TableResize => o.op === 'table.resize');
    if (resizes.length) await this.resize(resizes, report);
    const m = this.maps;
    const log = new UndoLog();
    /** Rings filled by this execute, by service id, until their switch (closed at the end either way). */
    const filled = new Map<number, { map: BpfMap; info: RingInfo }>();
    /** Inner maps replaced or removed by this execute, held open so an undo can put them back. */
    const held: BpfMap[] = [];

    /** Stats slots of the services that have listeners, and how many listeners name each service (read once, at
     * the first listener write). A service keeps its slot while any listener names it; a slot no listener names
     * is free at once (a removed service's slot can go to a new service of the same apply), and zeroed when given
     * out again. The planner keeps services with listeners within lb_rings, so within the 1024 slots. */
    let svcSlots: { slot: Map<number, number>; listeners: Map<number, number> } | null = null;
    const listenerIndex = () => {
      if (svcSlots) return svcSlots;
      const slot = new Map<number, number>();
      const listeners = new Map<number, number>();
      for (const [k, v] of m.vips.entries()) {
        if (isMarkerKey(k)) continue;
        const val = decodeVipValue(v);
        slot.set(val.serviceId, val.statsSlot ?? 0);
        listeners.set(val.serviceId, (listeners.get(val.serviceId) ?? 0) + 1);
      }
      return (svcSlots = { slot, listeners });
    };
    /** The listener at `key` names its service no more (deleted or about to name another). */
    const unnameService = (key: Buffer) => {
      const cur = m.vips.lookup(key);
      if (!cur) return;
      const { serviceId } = decodeVipValue(cur);
      const idx = listenerIndex();
      const n = (idx.listeners.get(serviceId) ?? 1) - 1;
      if (n > 0) idx.listeners.set(serviceId, n);
      else { idx.listeners.delete(serviceId); idx.slot.delete(serviceId); }
    };
    const serviceSlot = (serviceId: number): number => {
      const idx = listenerIndex();
      idx.listeners.set(serviceId, (idx.listeners.get(serviceId) ?? 0) + 1);
      const have = idx.slot.get(serviceId);
      if (have !== undefined) return have;
      const used = new Set(idx.slot.values());
      let s = 0;
      while (used.has(s)) s++;
      if (s >= m.serviceStats.maxEntries) fail(`services: all ${m.serviceStats.maxEntries} service stats slots are in use`);
      put(m.serviceStats, encodeU32(s), ZERO_TRAFFIC);
      idx.slot.set(serviceId, s);
      return s;
    };
    /** Slots of the reals in lb_reals (read once, when the first new real needs one), minus those freed and plus
     * those given out by this execute: a deleted real's slot can go to a real added after it. */
    let slotsInUse: Set<number> | null = null;
    let cursor = 0;
    const freeSlot = (): number => {
      slotsInUse ??= new Set(m.reals.entries().map(([, v]) => realSlotOf(v)));
      while (cursor < m.realSlots.maxEntries && slotsInUse.has(cursor)) cursor++;
      if (cursor >= m.realSlots.maxEntries) fail(`reals: all ${m.realSlots.maxEntries} real slots are in use`);
      slotsInUse.add(cursor);
      return cursor;
    };
    const releaseSlot = (slot: number) => {
      if (!slotsInUse) return; // not read yet: the read will not see it
      slotsInUse.delete(slot);
      cursor = Math.min(cursor, slot);
    };
    const { put, del } = undoableMapWrites(log, report);
    /** The real ids each ring in lb_rings names now, by service id: read at the first real.delete (from the ring
     * cache; a ring new to it is read), again after rings were switched or deleted. */
    let ringReals: Map<number, ReadonlySet<number>> | null = null;
    const liveRingNaming = (realId: number): number | null => {
      if (!ringReals) {
        ringReals = new Map();
        let read: ((inner: BpfMap) => Uint32Array) | null = null;
        for (const [serviceId, mapId] of ringIdentities(m.rings)) {
          let reals = this.rings.get(mapId)?.reals;
          if (!reals) {
            const inner = m.rings.openInner(encodeU32(serviceId));
            if (!inner) continue;
            try {
              const ring = (read ??= ringReader(m))(inner);
              reals = ringRealIds(ring);
              this.rings.set(inner.id(), { tableSize: ring.length, digest: ringDigest(ring), reals });
            } finally {
              inner.close();
            }
          }
          ringReals.set(serviceId, new Set(reals));
        }
      }
      for (const [serviceId, reals] of ringReals) if (reals.has(realId)) return serviceId;
      return null;
    };
    /** Opens the ring a service uses now (null if none), kept open until the end of execute. */
    const holdCurrent = (key: Buffer): BpfMap | null => {
      const cur = m.rings.openInner(key);
      if (cur) held.push(cur);
      return cur;
    };

    const switchRings = (sw: Array<Extract<Op, { op: 'service.switch' }>>) => {
      const keys: Buffer[] = [];
      const rings: BpfMap[] = [];
      const prevs: Array<BpfMap | null> = [];
      for (const o of sw) {
        const ring = filled.get(o.serviceId);
        if (!ring) fail(`service.switch of service ${o.serviceId} without a ring.fill before it`);
        keys.push(encodeU32(o.serviceId));
        rings.push(ring.map);
        prevs.push(holdCurrent(keys[keys.length - 1]!));
      }
      let written = keys.length;
      try {
        m.rings.setInnerBatch(keys, rings);
      } catch (e) {
        written = Number((e as { written?: number }).written ?? 0);
        throw e;
      } finally {
        for (let n = 0; n < written; n++) {
          const key = keys[n]!;
          const prev = prevs[n]!;
          log.onUndo(() => (prev ? m.rings.setInner(key, prev) : m.rings.delete(key)));
          this.rings.set(rings[n]!.id(), filled.get(sw[n]!.serviceId)!.info);
          report.ringSwitches++;
          report.mapWrites++;
        }
        ringReals = null;
      }
    };

    /** Services no listener uses any more, removed in one batch (one wait for running programs). */
    const deleteRings = (dels: Array<Extract<Op, { op: 'service.delete' }>>) => {
      const keys = dels.map((o) => encodeU32(o.serviceId)).filter((k) => m.rings.innerMapId(k) !== null);
      const prevs = keys.map((k) => holdCurrent(k));
      let deleted = keys.length;
      try {
        m.rings.deleteBatch(Buffer.concat(keys), keys.length);
      } catch (e) {
        deleted = Number((e as { deleted?: number }).deleted ?? 0);
        throw e;
      } finally {
        for (let n = 0; n < deleted; n++) {
          const key = keys[n]!;
          const prev = prevs[n];
          report.mapDeletes++;
          if (prev) log.onUndo(() => m.rings.setInner(key, prev));
          // its stats slot is free once no listener names it (the listeners go in vip.delete)
        }
        ringReals = null;
      }
    };

    try {
      let reported = performance.now();
      for (let i = 0; i < ops.length; i++) {
        const o = ops[i]!;
        report.ops++;
        // the loop is synchronous: a long one says how far it got, every couple of seconds (checked every 64 ops)
        if (opts.onProgress && (report.ops & 63) === 0 && performance.now() - reported >= PROGRESS_INTERVAL_MS) {
          opts.onProgress(report.ops, ops.length, report);
          reported = performance.now();
        }
        switch (o.op) {
          case 'settings.set':
            put(m.config, encodeU32(0), encodeConfig(o.value));
            break;
          case 'snat.set':
            validateSnatPorts({ min: o.value.portMin, max: o.value.portMax });
            put(m.snatConfig, encodeU32(0), encodeSnatConfig(snatSettingsToConfig(o.value)));
            break;
          case 'real.put': {
            // a new real gets a free slot whose traffic counters start at zero; a changed one keeps its slot.
            // The slot entry is written first: the ring can only lead to the real once lb_reals holds it.
            const key = encodeU32(o.real.id);
            const prev = m.reals.lookup(key);
            const slot = prev ? realSlotOf(prev) : freeSlot();
            const value = encodeReal(o.real.address, o.real.family, slot);
            if (!prev) put(m.realStats, encodeU32(slot), ZERO_TRAFFIC);
            put(m.realSlots, encodeU32(slot), encodeRealSlot(o.real.id, value));
            put(m.reals, key, value);
            break;
          }
          case 'ring.fill': {
            // the inner array holds this node's slots of the ring's real ids: every real it names has its slot by
            // now (real.put comes first), and no slot it names is freed while a ring names it (real.delete comes
            // after the switch away from it, which waits for running programs)
            filled.get(o.serviceId)?.map.close();
            const map = createRing(o.serviceId, slotRing(o.ring, (id) => {
              const slot = liveSlotOf(m, id);
              if (slot === null) fail(`ring.fill of service ${o.name} (${o.serviceId}): real ${id} has no slot on this node`);
              return slot;
            }));
            filled.set(o.serviceId, { map, info: { tableSize: o.tableSize, digest: o.digest, reals: o.reals ?? ringRealIds(o.ring) } });
            report.changedRingEntries += o.ring.length;
            report.mapWrites++;
            break;
          }
          case 'service.switch': {
            // a run of switches goes in one batch: one wait for running programs instead of one per ring
            const run = runOf(ops, i, 'service.switch');
            switchRings(run);
            report.ops += run.length - 1;
            i += run.length - 1;
            break;
          }
          case 'vip.put': {
            // the new service is named before the old one is unnamed: a listener that stays with its service keeps
            // the slot (and its counters)
            const key = vipKeyOf(o.vip);
            const slot = serviceSlot(o.vip.serviceId);
            unnameService(key);
            put(m.vips, key, vipValueOf(o.vip, slot));
            break;
          }
          case 'marker.put':
            put(m.vips, markerKeyOf(o.marker), MARKER_VALUE);
            break;
          case 'vip.delete': {
            const key = vipKeyOf(o.vip);
            unnameService(key);
            del(m.vips, key);
            break;
          }
          case 'marker.delete':
            del(m.vips, markerKeyOf(o.marker));
            break;
          case 'service.delete': {
            const run = runOf(ops, i, 'service.delete');
            deleteRings(run);
            report.ops += run.length - 1;
            i += run.length - 1;
            break;
          }
          case 'real.delete': {
            // connection-table entries to it fall back to the ring once its slot is free (real id 0). Rings name
            // slots: a slot still named by a live ring could be given to another real (even later in this
            // execute) and take that ring's flows, so the plan's order (switch away first) is checked here.
            const namer = liveRingNaming(o.real.id);
            if (namer !== null) fail(`real.delete of real ${o.real.id}: the ring of service ${namer} in lb_rings still names it`);
            const key = encodeU32(o.real.id);
            const prev = m.reals.lookup(key);
            del(m.reals, key);
            if (prev) {
              put(m.realSlots, encodeU32(realSlotOf(prev)), FREE_SLOT);
              releaseSlot(realSlotOf(prev));
            }
            break;
          }
          case 'source-range.put': {
            // created, never overwritten (the plan puts only missing entries), so the undo is a delete. A lookup
            // cannot tell whether this exact prefix is there: the trie answers with the longest enclosing one.
            const key = encodeSourceRangeKey(o.range.serviceId, o.range.prefix);
            try {
              m.sourceRanges.update(key, SOURCE_RANGE_ALLOW, 'noexist');
            } catch (e) {
              if ((e as { code?: string }).code === 'EEXIST') break;
              throw e;
            }
            report.mapWrites++;
            log.onUndo(() => m.sourceRanges.delete(key));
            break;
          }
          case 'source-range.delete': {
            const key = encodeSourceRangeKey(o.range.serviceId, o.range.prefix);
            if (!m.sourceRanges.delete(key)) break; // deletes match the exact prefix
            report.mapDeletes++;
            log.onUndo(() => m.sourceRanges.update(key, SOURCE_RANGE_ALLOW));
            break;
          }
          case 'table.resize':
            break; // done before the other ops
          default:
            fail(`the lb data plane cannot execute '${o.op}'`);
        }
      }
    } catch (e) {
      log.rollback();
      throw e;
    } finally {
      // The outer map holds its own reference to every ring it points at; ours are no longer needed.
      for (const r of filled.values()) r.map.close();
      for (const h of held) h.close();
    }
    log.commit();
    await this.attach();
    return report;
  }

  async readLive(opts: ReadLiveOptions = {}): Promise<LiveState> {
    if (!this.obj) return { ...EMPTY_LIVE };
    return readLbLive(this.maps, this.rings, opts, this.memo);
  }

  async counters(): Promise<Record<string, number | Record<string, number>>> {
    if (!this.obj) return {};
    const m = this.maps;
    const out: Record<string, number | Record<string, number>> = perCpuCounters(m.counters, COUNTER_NAMES);
    // traffic sits in array slots: a service's is the slot its listeners name, a real's the slot of lb_reals
    for (const [id, slot] of serviceSlots(m.vips)) {
      const t = trafficAt(m.serviceStats, slot);
      if (t) out[`service:${id}`] = t;
    }
    for (const [k, v] of m.reals.entries()) {
      const t = trafficAt(m.realStats, realSlotOf(v));
      if (t) out[`real:${k.readUInt32LE(0)}`] = t;
    }
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

/** The slot lb_reals gives real `id` when lb_real_slots names the real there too; null when the node holds no slot
 * for it. */
function liveSlotOf(m: Pick<LbMaps, 'reals' | 'realSlots'>, id: number): number | null {
  const v = m.reals.lookup(encodeU32(id));
  if (!v) return null;
  const slot = realSlotOf(v);
  return m.realSlots.lookup(encodeU32(slot))?.readUInt32LE(0) === id ? slot : null;
}

/** realSlots: absent only when reading the pins of a version whose rings still hold real ids; sourceRanges only
 * when reading the pins of a version without source ranges (nothing checks any). */
type LiveMaps = Pick<LbMaps, 'vips' | 'rings' | 'reals' | 'config' | 'snatConfig'> & { realSlots?: BpfMap; sourceRanges?: BpfMap };
const SOURCE_RANGES_PIN = 'lb_source_ranges';
const LIVE_MAP_PINS: Record<Exclude<keyof LiveMaps, 'realSlots' | 'sourceRanges'>, string> = {
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
    vips.push({ vip: key.addr, family: key.family, port: key.port, protocol: PROTO_NAME[key.proto] ?? 'TCP',
      targetPort: val.targetPort, serviceId: val.serviceId, forwarding: MODE_NAME[val.mode] ?? 'snat',
      hashSourcePort: (val.flags & VIP_F_HASH_SRC_PORT) !== 0, ...((val.flags & VIP_F_SOURCE_RANGES) !== 0 && { sourceRanges: true as const }) });
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
function readLbLive(m: LiveMaps, cache: RingCache, opts: ReadLiveOptions, memo: LiveMemo): LiveState {
  const config = (memo.config = readSetting(m.config, memo.config, decodeConfigSettings));
  const snat = (memo.snat = readSetting(m.snatConfig, memo.snat, (b) => snatConfigToSettings(decodeSnatConfig(b))));
  const reals = (memo.reals = readMap(m.reals, memo.reals, decodeReals));
  const vips = (memo.vips = readMap(m.vips, memo.vips, decodeVips));
  const ranges = (memo.sourceRanges = readSourceRanges(m.sourceRanges, memo.sourceRanges));
  const services = readServices(m, cache, opts, memo);
  const prev = memo.live;
  if (prev && prev.settings === config.value && prev.snat === snat.value && prev.reals === reals.value &&
    prev.vips === vips.value.vips && prev.markers === vips.value.markers && prev.sourceRanges === ranges.value &&
    prev.services === services) return prev;
  const live: LiveState = {
    settings: config.value,
    snat: snat.value,
    reals: reals.value,
    services,
    vips: vips.value.vips,
    markers: vips.value.markers,
    sourceRanges: ranges.value,
    backendVips: [],
    backendTunnels: [],
  };
  if (!opts.tables) memo.live = Object.freeze(live);
  return live;
}

/** lb_source_ranges by its keys alone (every value says "allowed"; the trie has no batched read); decoded only when
 * the keys differ from `prev`. */
function readSourceRanges(m: BpfMap | undefined, prev: RawRead<SourceRange[]> | undefined): RawRead<SourceRange[]> {
  const raw = m ? Buffer.concat(m.keys()) : Buffer.alloc(0);
  if (prev && prev.raw.equals(raw)) return prev;
  const out: SourceRange[] = [];
  for (let o = 0; o < raw.length; o += 28) out.push(decodeSourceRangeKey(raw.subarray(o, o + 28)));
  return { raw, value: frozen(out.sort(compareSourceRanges)) };
}

/** Reads a ring back in real ids: the slots + 1 an inner array holds name the ids lb_real_slots holds now (each
 * slot looked up once per readLive); the rings of an older version hold the ids themselves. */
function ringReader(m: LiveMaps): (inner: BpfMap) => Uint32Array {
  if (!ringsHoldSlots(m.rings)) return readRing;
  const realSlots = m.realSlots;
  if (!realSlots) fail('lb_rings holds real slots, but lb_real_slots is not there to name them');
  const ids = new Map<number, number>();
  const idOf = (slot: number): number => {
    let id = ids.get(slot);
    if (id === undefined) ids.set(slot, (id = slot < realSlots.maxEntries ? realSlots.lookup(encodeU32(slot))?.readUInt32LE(0) ?? 0 : 0));
    return id;
  };
  return (inner) => idRing(readRing(inner), idOf);
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

export type LbDataPlaneHandle = DataPlane & {
  object(): BpfObject | null;
  /** What the last table resize did per table (entries copied before the swap, merged after it); null before one. */
  readonly resized: ResizeResult['tables'] | null;
  /** How long each phase of the last resize took (ms): for logs and bench/maps/resize.ts. */
  readonly resizeMs: ResizeResult['ms'] | null;
  /** How xdp_lb is attached and whether native XDP was seen to forward (null until attached). */
  readonly forwarding: XdpForwarding | null;
};

export async function openLbDataPlane(opts: LbDataPlaneOptions): Promise<LbDataPlaneHandle> {
  const dp = new LbDataPlane(opts);
  // an existing pinned data plane is adopted now; a fresh one loads on the first apply (its sizes come from it)
  if (existsSync(join(opts.pinRoot, 'lb_vips'))) await dp.load();
  return dp;
}
