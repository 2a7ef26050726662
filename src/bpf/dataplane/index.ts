// The LB node's data plane: loads/adopts build/bpf/xdp_lb.o with its maps pinned under pinRoot, reads what the
// maps hold (LiveState, table sizes), executes the ops converge planned (src/reconciler/converge.ts) in their order
// with undo (one outer-map update per ring switch, a run of switches or service deletes in one batch), and sums the
// counters. One job per module: ./validate.ts (can it hold a desired state), ./maps.ts (which maps, keys, slots),
// ./live.ts (read what they hold), ./execute.ts (write ops with undo), ./resize.ts, ./migrate.ts; this file loads,
// attaches and ties them together. Map layout: docs/datapath.md.
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, BpfObject, type XdpAttachment } from '../libbpf.js';
import { pinnedXdpLink } from '../attach.js';
import { checkXdpForwarding, type ForwardingCheck, type XdpForwarding } from '../xdp-forwarding.js';
import { adoptedGeneric, readAttachRecord, removeAttachRecord, writeAttachRecord } from '../xdp-attach-record.js';
import { perCpuCounters, trafficAt } from '../counters.js';
import type { DesiredState } from '../../render/state.js';
import { EMPTY_LIVE } from '../../render/ops.js';
import { AFFINITY_COUNTER_NAMES, AFFINITY_MAPS, COUNTER_NAMES, QUIC_COUNTER_NAMES, QUIC_MAPS, encodeRealSlot, encodeU32, realSlotOf } from './codec.js';
import { RingCache } from './rings.js';
import { snatCounters } from './snat.js';
import { openOldRings, readOldPins, restoreOldPins, restoreOldRings } from './migrate.js';
import { RESIZABLE_TABLES, desiredTableSizes, removeStaleNextPins, resizeTables, type ResizeResult, type TableResize } from './resize.js';
import { EMPTY_REPORT, type ApplyReport, type DataPlane, type DataPlaneTarget, type ExecuteOptions, type LiveState, type Op, type ReadLiveOptions } from './types.js';
import { einval } from './validate.js';
import { SYNC_COUNTER_NAMES, SYNC_MAPS, SYNC_RING_BOUNDS, checkSyncRingBytes } from './flow-events.js';
import { OBJECT_NAME, serviceSlots, ZERO_REAL_TRAFFIC, type LbMaps, checkedMaps, liveSlotOf } from './maps.js';
import { LiveMemo, readLbLive } from './live.js';
import { executeOps } from './execute.js';
import { attachEgress, egressInterfaces, type EgressLink } from './egress-links.js';

export type { ApplyReport, DataPlane, DataPlaneTarget, ExecuteOptions, LiveSource, LiveState, Op, ReadLiveOptions } from './types.js';
export { LB_CAPACITY, validateDesired } from './validate.js';
export { RING_ROTATION_CHECKS } from './types.js';
export { ringDigest } from './rings.js';
export { OBJECT_NAME, compareVips } from './maps.js';
export { LiveMemo, readPinnedLbLive } from './live.js';

export interface LbDataPlaneOptions {
  pinRoot: string;
  /** Bytes of the ring of published entries (lb_sync_events, connection-state sync): a power of two within
   * SYNC_RING_BOUNDS; default SYNC_RING_BOUNDS.default. */
  syncRingBytes?: number;
  interface?: string;
  xdpMode?: 'native' | 'generic' | 'auto';
  netns?: never;
}

export const PROGRAM_NAME = 'xdp_lb';
export const LINK_PIN = 'xdp_link';
const GENERIC_DETAIL = 'generic XDP transmits through the stack; not probed';

class LbDataPlane implements DataPlane {
  private obj: BpfObject | null = null;
  private maps!: LbMaps;
  private attachment: XdpAttachment | null = null;
  /** xdp_lb on the interfaces the routes to the reals leave by (egress-links.ts), by interface name */
  private egress: EgressLink[] = [];
  /** What the attach-time probe found, before the egress interfaces' part of the detail. */
  private probed: ForwardingCheck | null = null;
  /** Egress interfaces a runtime change found native XDP unable to forward into, with the probe's words. */
  private unfit: string[] = [];
  private readonly rings = new RingCache();
  /** The previous read of the maps (see LiveMemo). */
  private readonly memo = new LiveMemo();

  constructor(private readonly opts: LbDataPlaneOptions) {}

  /** Loads the object; adopts pinned maps (their sizes win, so pins stay compatible). */
  async load(desired?: DesiredState): Promise<void> {
    const pinned = (name: string) => join(this.opts.pinRoot, name);
    const mapMaxEntries: Record<string, number> = {};
    for (const name of RESIZABLE_TABLES) {
      if (existsSync(pinned(name))) {
        const m = BpfMap.open(pinned(name));
        mapMaxEntries[name] = m.maxEntries;
        m.close();
      }
    }
    if (desired) {
      for (const [name, n] of Object.entries(desiredTableSizes(desired))) mapMaxEntries[name] ??= n;
    }
    Object.assign(mapMaxEntries, this.ringSize());
    // sizes come from the pins, so a pin is incompatible only when a newer program changed its layout or flags
    // (value size, BPF_F_NO_COMMON_LRU): that map starts empty once instead of the load failing; listeners and
    // settings in an older layout are carried over (migrate.ts)
    const old = readOldPins(this.opts.pinRoot);
    // lb_rings of an older layout (rings of real ids, or one word per element): held open across the load, which
    // replaces the pin
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

  /** The size of each loaded program's own ring of published entries (not pinned: every load makes one). */
  private ringSize(): Record<string, number> {
    return { [SYNC_MAPS.events]: checkSyncRingBytes(this.opts.syncRingBytes ?? SYNC_RING_BOUNDS.default) };
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
      if (next >= m.realSlots.maxEntries) einval(`reals: all ${m.realSlots.maxEntries} real slots are in use`);
      owner.set(next, k.readUInt32LE(0));
      const value = Buffer.from(v);
      value.writeUInt16LE(next, 18);
      m.realStats.update(encodeU32(next), ZERO_REAL_TRAFFIC);
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
   * cannot probe still reports a fallback as one. An lb node whose reals are routed out of other interfaces gets
   * xdp_lb there too, in the same mode, and those interfaces are probed as well (egress-links.ts): native XDP
   * redirects into them, and SNAT replies arrive on them. Applies that change the reals take that set again
   * (refreshEgress).
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
    let egress: string[] = [];
    let egressError = '';
    try {
      egress = await egressInterfaces(this.maps, ifname);
    } catch (e) {
      // a node whose reals all leave by `ifname` needs none: attach the main link all the same, and say it
      egressError = `; egress interfaces not found (${(e as Error).message})`;
    }
    this.attachment = prog.attachXdp(ifname, mode, pin);
    const a = this.attachment;
    if (a.mode !== 'native') {
      const rec = a.replacement?.how === 'program' ? prevRec : null;
      this.forwarding = rec !== null ? adoptedGeneric(rec, mode)
        : { mode: a.mode, requested: mode, fellBack: false, forwards: null, detail: GENERIC_DETAIL };
      this.record(typeof rec === 'object' && rec ? { probe: rec.probe, at: rec.at } : { probe: this.forwarding.detail, at });
      return this.startEgress(egress, a.mode, egressError);
    }
    const check = await checkAll([ifname, ...egress]);
    this.forwarding = { mode: 'native', requested: mode, fellBack: false, ...check };
    if (check.forwards !== false) {
      this.record({ probe: check.detail, at });
      return this.startEgress(egress, 'native', egressError);
    }
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
    this.startEgress(egress, 'generic', egressError);
  }

  /** xdp_lb on the egress interfaces (egress-links.ts) in `mode` at attach time; the probe's outcome as it stands
   * now is what later egress changes (refreshEgress) add their part to. */
  private startEgress(ifnames: string[], mode: 'native' | 'generic', egressError: string): void {
    const f = this.forwarding!;
    this.probed = { forwards: f.forwards, detail: f.detail + egressError };
    this.linkEgress(ifnames, mode, []);
  }

  /** Attaches xdp_lb to `ifnames` (and unpins links of the others); what was attached, refused because another
   * program holds the interface, or left out because native XDP cannot forward there (`unfit`) goes into the
   * forwarding detail the reconciler logs and reports. */
  private linkEgress(ifnames: string[], mode: 'native' | 'generic', unfit: string[]): void {
    for (const e of this.egress) e.link.close();
    const { links, refused } = attachEgress(this.obj!, PROGRAM_NAME, this.opts.pinRoot, ifnames, mode);
    this.egress = links;
    this.unfit = unfit;
    const attached = links.map((l) => l.name);
    const f = this.forwarding!;
    f.detail = this.probed!.detail;
    f.forwards = unfit.length ? false : this.probed!.forwards;
    if (attached.length) f.detail += `; xdp_lb also on ${attached.join(', ')} (the routes to the reals leave by it; SNAT replies arrive there)`;
    if (refused.length) f.detail += `; NOT attached to ${refused.join('; ')}: SNAT replies arriving there reach the kernel, which resets them`;
    if (unfit.length) f.detail += `; NOT attached to ${unfit.join('; ')} (a real added while running is routed out of it and ` +
      `native XDP cannot forward there): redirects into it are dropped and SNAT replies arriving there are reset by the kernel; ` +
      `xdp_lb stays native elsewhere, the probe is retried at every apply, and a restart with --xdp-mode auto falls back to generic`;
  }

  /**
   * After an apply that changed the reals (or while an egress interface is left out): the interfaces the routes to
   * the reals leave by now, taken again like at attach time. New ones get xdp_lb in the main link's mode, in native
   * only once they pass the same forwarding probe as at start. One that fails it is left out and reported
   * (forwards: false, so the log warns and `gitlb status` shows it) rather than the node falling back to generic:
   * that would swap the mode of the link that forwards everything else. Links of interfaces no longer used are
   * unpinned (their XDP detaches).
   */
  private async refreshEgress(): Promise<void> {
    const a = this.attachment;
    if (!a || !this.forwarding || !this.probed) return;
    const want = await egressInterfaces(this.maps, this.opts.interface!);
    const have = this.egress.map((e) => e.name);
    if (!this.unfit.length && want.join() === have.join()) return;
    const fresh = want.filter((n) => !have.includes(n));
    const left = new Set<string>();
    const unfit: string[] = [];
    if (a.mode === 'native') {
      for (const n of fresh) {
        const c = await checkXdpForwarding(n);
        if (c.forwards === false) {
          left.add(n);
          unfit.push(c.detail);
        }
      }
    }
    this.linkEgress(want.filter((n) => !left.has(n)), a.mode, unfit);
  }

  /**
   * Resizes tables sized by conntrackMaxEntries without an outage (resize.ts): a new instance of xdp_lb using the
   * new tables replaces the running one in its pinned link. Not undone when a later op of the same execute fails:
   * the new tables hold every flow, and an apply of the old size resizes back.
   */
  private async resize(resizes: TableResize[], report: ApplyReport): Promise<void> {
    const pinRoot = this.opts.pinRoot;
    if (!this.attachment && existsSync(join(pinRoot, LINK_PIN)))
      einval(`${resizes[0]!.map}: xdp_lb runs in the link pinned at ${join(pinRoot, LINK_PIN)}, which this data plane ` +
        `(opened without an interface) does not hold; the resize needs the program swapped in that link`);
    const { obj, tables, ms } = await resizeTables({
      pinRoot, obj: this.obj!, resizes,
      load: async (mapFds) => {
        const o = await BpfObject.load(OBJECT_NAME, { pinRoot, reusePinnedMaps: true, mapFds, mapMaxEntries: this.ringSize() });
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
    // the egress links too, in place: none may keep the old instance and its old tables
    this.egress = this.egress.map(({ name, link }) => {
      const swapped = obj.program(PROGRAM_NAME).attachXdp(name, link.mode, link.pinPath);
      link.close();
      return { name, link: swapped };
    });
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
    executeOps(this.maps, this.rings, ops, report, opts);
    const attached = !!this.attachment;
    await this.attach();
    // the reals changed: they may now be routed out of other interfaces (a fresh attach has just taken the set)
    // (only an address decides where a real is routed: a weight or state change needs no new look)
    const moved = ops.some((o) => o.op === 'real.delete' || (o.op === 'real.put' && o.before?.address !== o.real.address));
    if (attached && (this.unfit.length || moved)) {
      try {
        await this.refreshEgress();
      } catch (e) {
        // the maps are written and xdp_lb forwards: say it rather than fail an apply that cannot be undone now
        const f = this.forwarding!;
        f.detail = `${f.detail.replace(/; egress interfaces not taken again .*$/s, '')}; egress interfaces not taken again (${(e as Error).message}): kept as they were`;
      }
    }
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
    Object.assign(out, snatCounters(this.obj), perCpuCounters(this.obj.map(AFFINITY_MAPS.stats), AFFINITY_COUNTER_NAMES),
      perCpuCounters(this.obj.map(QUIC_MAPS.stats), QUIC_COUNTER_NAMES), perCpuCounters(this.obj.map(SYNC_MAPS.stats), SYNC_COUNTER_NAMES));
    return out;
  }

  /** Test and bench access to the loaded object (program for BPF_PROG_TEST_RUN, maps for inspection). */
  object(): BpfObject | null {
    return this.obj;
  }

  close(): void {
    this.attachment?.close();
    this.attachment = null;
    for (const e of this.egress) e.link.close();
    this.egress = [];
    this.obj?.close();
    this.obj = null;
  }
}

/** The forwarding check of every interface xdp_lb sends out of: forwards only when each does (null when none
 * could be verified), the details joined. */
async function checkAll(ifnames: string[]): Promise<ForwardingCheck> {
  const checks = [];
  for (const n of ifnames) checks.push(await checkXdpForwarding(n));
  const forwards = checks.some((c) => c.forwards === false) ? false : checks.some((c) => c.forwards === true) ? true : null;
  return { forwards, detail: checks.map((c) => c.detail).join('; ') };
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
