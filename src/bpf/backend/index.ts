// The data plane of a backend node: the TC programs of build/bpf/tc_backend.o on the node's interface and
// the be_vips map they read. apply() attaches ingress and egress once (tcx links pinned under pinRoot, so
// they outlive the daemon; a restarted daemon switches the pinned links to its freshly loaded programs) and
// keeps be_vips equal to what the desired state asks for. VIP addresses themselves are handled by
// src/reconciler/backend-vips.ts. See docs/backend.md.
import { join } from 'node:path';
import { BpfObject, type BpfMap, type TcAttachment } from '../libbpf.js';
import type { DesiredState, DesiredVip } from '../../render/state.js';
import { checkBtfLayout } from '../codec.js';
import type { ApplyReport, DataPlane, LiveState } from '../dataplane/index.js';
import {
  BTF_LAYOUTS,
  STAT_NAMES,
  VIP_FLAG_IPOPT,
  decodeConnEntry,
  decodeVipEntry,
  desiredVipEntries,
  encodeVipKey,
  encodeVipValue,
  vipEntryId,
  type ConnEntry,
  type VipEntry,
} from './codec.js';

export const BACKEND_OBJECT = 'tc_backend';
export const INGRESS_PROGRAM = 'backend_ingress';
export const EGRESS_PROGRAM = 'backend_egress';
export const INGRESS_LINK_PIN = 'tc_ingress_link';
export const EGRESS_LINK_PIN = 'tc_egress_link';

/** The backend data plane, with a few backend-only views on top of the common contract. */
export type { ApplyReport, DataPlane, LiveState };

export interface BackendDataPlane extends DataPlane {
  /** be_vips as entries (sorted by identity). */
  readVipEntries(): VipEntry[];
  /** Recorded ipopt flows (at most `limit`). */
  readConnections(limit?: number): ConnEntry[];
  /** Whether the TC programs are attached (after the first successful apply). */
  readonly attached: boolean;
}

export interface BackendDataPlaneOptions {
  /** Directory on bpffs for maps and links, e.g. /sys/fs/bpf/gitlb/<node>. */
  pinRoot: string;
  /** The node's interface (resolved in the caller's network namespace). */
  interface: string;
  /** Object file; default build/bpf/tc_backend.o. */
  objectPath?: string;
}

/** Checks the object's BTF against the codec layouts so a struct change on either side fails at load. */
export function checkBackendLayouts(obj: BpfObject): void {
  for (const [name, expected] of Object.entries(BTF_LAYOUTS)) checkBtfLayout(obj, name, expected);
}

function entriesById(map: BpfMap): Map<string, { key: Buffer; value: Buffer; entry: VipEntry }> {
  const out = new Map<string, { key: Buffer; value: Buffer; entry: VipEntry }>();
  for (const [key, value] of map.entries()) {
    const entry = decodeVipEntry(key, value);
    out.set(vipEntryId(entry), { key: Buffer.from(key), value: Buffer.from(value), entry });
  }
  return out;
}

/** A live be_vips entry as a DesiredVip, for the common LiveState shape (service ids are not kept in BPF). */
function vipEntryAsDesiredVip(e: VipEntry): DesiredVip {
  const listener = (e.flags & VIP_FLAG_IPOPT) !== 0;
  return {
    vip: e.address,
    family: e.family,
    port: e.port,
    protocol: e.protocol ?? 'TCP',
    targetPort: e.targetPort,
    serviceId: 0,
    forwarding: listener ? 'dsr-ipopt' : 'dsr-ipip',
    hashSourcePort: false,
  };
}

export async function openBackendDataPlane(opts: BackendDataPlaneOptions): Promise<BackendDataPlane> {
  const obj = await BpfObject.load(opts.objectPath ?? BACKEND_OBJECT, { pinRoot: opts.pinRoot, reusePinnedMaps: true });
  try {
    checkBackendLayouts(obj);
  } catch (e) {
    obj.close();
    throw e;
  }
  const vips = obj.map('be_vips');
  const conns = obj.map('be_conns');
  const stats = obj.map('be_stats');
  const links: TcAttachment[] = [];

  function attach(): void {
    const ingress = obj.program(INGRESS_PROGRAM).attachTc(opts.interface, 'ingress', join(opts.pinRoot, INGRESS_LINK_PIN));
    links.push(ingress);
    try {
      links.push(obj.program(EGRESS_PROGRAM).attachTc(opts.interface, 'egress', join(opts.pinRoot, EGRESS_LINK_PIN)));
    } catch (e) {
      // Leave no half-installed pair behind, unless the ingress link predates us (then it keeps working).
      if (!ingress.replaced) ingress.detach();
      else ingress.close();
      links.length = 0;
      throw e;
    }
  }

  function writeEntries(desired: VipEntry[]): ApplyReport {
    const live = entriesById(vips);
    const want = new Map(desired.map((e) => [vipEntryId(e), e]));
    const writes: Array<{ key: Buffer; value: Buffer; previous: Buffer | null }> = [];
    for (const [id, e] of want) {
      const value = encodeVipValue(e);
      const cur = live.get(id);
      if (cur && cur.value.equals(value)) continue;
      writes.push({ key: encodeVipKey(e), value, previous: cur ? cur.value : null });
    }
    const deletes = [...live.entries()].filter(([id]) => !want.has(id)).map(([, l]) => l);
    const done: typeof writes = [];
    const deleted: typeof deletes = [];
    try {
      // New and changed entries first, removals last: a VIP that stays is never missing in between.
      for (const w of writes) {
        vips.update(w.key, w.value);
        done.push(w);
      }
      for (const d of deletes) {
        vips.delete(d.key);
        deleted.push(d);
      }
    } catch (e) {
      // Put back what was there before this apply, so a failure leaves the previous state intact.
      for (const d of deleted) vips.update(d.key, d.value);
      for (const w of done.reverse()) {
        if (w.previous) vips.update(w.key, w.previous);
        else vips.delete(w.key);
      }
      throw e;
    }
    return { mapWrites: writes.length, mapDeletes: deletes.length, ringSwitches: 0, changedRingEntries: 0 };
  }

  return {
    get attached() {
      return links.length === 2;
    },

    async apply(desired: DesiredState): Promise<ApplyReport> {
      if (desired.role !== 'backend') throw new Error(`backend data plane: desired state of node '${desired.node}' has role '${desired.role}', expected 'backend'`);
      if (desired.interface !== opts.interface)
        throw new Error(`backend data plane: desired.interface '${desired.interface}' differs from the interface opened, '${opts.interface}'`);
      const report = writeEntries(desiredVipEntries(desired));
      // Maps first, then the programs: their first packet already sees the complete VIP set.
      if (links.length === 0) attach();
      return report;
    },

    async readLive(): Promise<LiveState> {
      const entries = [...entriesById(vips).values()].map((x) => x.entry);
      return { reals: [], services: [], vips: entries.map(vipEntryAsDesiredVip), hashSeed: 0 };
    },

    async counters() {
      const key = Buffer.alloc(4);
      const out: Record<string, number> = {};
      STAT_NAMES.forEach((name, i) => {
        key.writeUInt32LE(i);
        out[name] = Number(stats.lookupPerCpuSum(key)?.[0] ?? 0n);
      });
      out.vip_entries = vips.keys().length;
      out.connections = conns.keys().length;
      return out;
    },

    readVipEntries(): VipEntry[] {
      return [...entriesById(vips).entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, x]) => x.entry);
    },

    readConnections(limit = 10_000): ConnEntry[] {
      const out: ConnEntry[] = [];
      for (const [k, v] of conns.entries()) {
        if (out.length >= limit) break;
        out.push(decodeConnEntry(k, v));
      }
      return out;
    },

    close(): void {
      for (const l of links) l.close(); // pinned links stay attached
      links.length = 0;
      obj.close();
    },
  };
}
