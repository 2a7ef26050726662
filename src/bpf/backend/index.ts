// The data plane of a backend node: the TC programs of build/bpf/tc_backend.o on the node's interface and
// the be_vips map they read. The first execute() attaches ingress and egress once (tcx links pinned under pinRoot, so
// they outlive the daemon; a restarted daemon switches the pinned links to its freshly loaded programs) and
// keeps be_vips equal to what the desired state asks for. VIP addresses themselves are handled by
// src/reconciler/host/backend-vips.ts. See docs/backend.md.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, BpfObject, type TcAttachment } from '../libbpf.js';
import { EMPTY_LIVE, type BackendVip } from '../../render/ops.js';
import { checkBtfLayout } from '../codec.js';
import { perCpuCounters } from '../counters.js';
import { EMPTY_REPORT, UndoLog, undoableMapWrites, type ApplyReport, type DataPlane, type LiveState, type Op } from '../dataplane/types.js';
import {
  BTF_LAYOUTS,
  STAT_NAMES,
  VIP_FLAG_IPIP,
  VIP_FLAG_IPOPT,
  decodeConnEntry,
  decodeVipEntry,
  encodeVipKey,
  encodeVipValue,
  vipEntryId,
  vipEntryOf,
  asBackendTunnel,
  decodeAddrEntry,
  encodeAddrKey,
  encodeAddrValue,
  tunnelEntryOf,
  monotonicNs,
  previousTargetLive,
  type ConnEntry,
  type VipEntry,
} from './codec.js';
import { readOldBackendPins, restoreOldBackendPins } from './migrate.js';

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

/** be_vips entry <-> the planner's BackendVip (flags say which kind; a previous targetPort only while trusted). */
function asBackendVip(e: VipEntry): BackendVip {
  const b: BackendVip = { kind: (e.flags & VIP_FLAG_IPOPT) !== 0 ? 'listener' : 'address', address: e.address, family: e.family,
    port: e.port, protocol: e.protocol, targetPort: e.targetPort };
  if (b.kind === 'listener' && previousTargetLive(e)) b.previousTargetPort = e.previousTargetPort;
  return b;
}

/** The LiveState of a backend node from its pinned be_vips alone (nothing loaded or written); none without pins. */
export function readPinnedBackendLive(pinRoot: string): LiveState {
  const pin = join(pinRoot, 'be_vips');
  if (!existsSync(pin)) return { ...EMPTY_LIVE };
  const vips = BpfMap.open(pin, 'be_vips');
  try {
    return { ...EMPTY_LIVE, backendVips: [...entriesById(vips).values()].map((x) => asBackendVip(x.entry)) };
  } finally {
    vips.close();
  }
}

export async function openBackendDataPlane(opts: BackendDataPlaneOptions): Promise<BackendDataPlane> {
  // Pins of an older layout are re-created (an upgrade must not fail the load) and their contents carried over.
  const old = readOldBackendPins(opts.pinRoot);
  const obj = await BpfObject.load(opts.objectPath ?? BACKEND_OBJECT, { pinRoot: opts.pinRoot, reusePinnedMaps: true,
    replaceIncompatiblePins: true });
  try {
    checkBackendLayouts(obj);
    restoreOldBackendPins(old, { vips: obj.map('be_vips'), stats: obj.map('be_stats') });
  } catch (e) {
    obj.close();
    throw e;
  }
  const vips = obj.map('be_vips');
  const conns = obj.map('be_conns');
  const tunnelAddrs = obj.map('be_tunnel_addrs');
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

  async function readLive(): Promise<LiveState> {
    return {
      ...EMPTY_LIVE,
      backendVips: [...entriesById(vips).values()].map((x) => asBackendVip(x.entry)),
      backendTunnels: [...tunnelAddrs.entries()].map(([k, v]) => asBackendTunnel(decodeAddrEntry(k, v))),
    };
  }

  async function execute(ops: Op[]): Promise<ApplyReport> {
    const report: ApplyReport = { ...EMPTY_REPORT };
    const log = new UndoLog();
    const { put, del } = undoableMapWrites(log, report); // every write is undone if a later one fails
    const now = monotonicNs(); // starts the grace of a previous targetPort (the program's clock)
    try {
      for (const o of ops) {
        report.ops++;
        if (o.op === 'backend-vip.put') {
          const e = vipEntryOf(o.entry, now);
          put(vips, encodeVipKey(e), encodeVipValue(e));
        } else if (o.op === 'backend-vip.delete') {
          del(vips, encodeVipKey(vipEntryOf(o.entry)));
        } else if (o.op === 'backend-tunnel.put') {
          const e = tunnelEntryOf(o.entry);
          put(tunnelAddrs, encodeAddrKey(e), encodeAddrValue(e));
        } else if (o.op === 'backend-tunnel.delete') {
          del(tunnelAddrs, encodeAddrKey(tunnelEntryOf(o.entry)));
        } else {
          throw new Error(`the backend data plane cannot execute '${o.op}'`);
        }
      }
    } catch (e) {
      log.rollback(); // a failure leaves the previous state intact
      throw e;
    }
    log.commit();
    // Maps first, then the programs: their first packet already sees the complete VIP set.
    if (links.length === 0) attach();
    return report;
  }

  return {
    get attached() {
      return links.length === 2;
    },

    /** What converge validates desired states against: backend nodes, on the interface opened. */
    target: { role: 'backend', interface: opts.interface },
    readLive,
    /** No table of a backend is sized by the desired state. */
    tableSizes: () => ({}),
    execute,

    async counters() {
      const out: Record<string, number> = perCpuCounters(stats, STAT_NAMES);
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
