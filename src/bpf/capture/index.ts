// `gitlb capture`'s kernel side. xdp_lb_capture.o is xdp_lb built with the capture (src/bpf/include/lb_capture.h).
// Capturing swaps it into the running XDP link over the very maps the running program uses (its connection table,
// rings, counters: one data plane, not a copy), with the link's compare-and-swap update, so no frame goes
// unhandled; stopping swaps the original back the same way. The filter is written into the capture object's own
// config map before the swap, so the first frame the capture build sees is already filtered. xdp_lb.o, which the
// daemon runs, carries none of it.
// If the daemon replaces the program meanwhile (a restart, a resize), the swap back is refused and the daemon's
// program stays: capture only ever undoes its own change.
import { join } from 'node:path';
import { native } from '../addon.js';
import { BpfMap, BpfObject } from '../libbpf.js';
import { checkBtfLayout, u32 } from '../codec.js';
import { perCpuCounters } from '../counters.js';
import { bpfObjectPath } from '../paths.js';
import { LINK_PIN, PROGRAM_NAME } from '../dataplane/index.js';
import { decodeReal } from '../dataplane/codec.js';
import { canonicalIp } from '../../render/ip.js';
import { BACKEND_COUNTER_BITS, CAPTURE_RECORD_LAYOUT, TC_VERDICTS, decodeRecord, type CaptureRecord } from './record.js';
import { EGRESS_LINK_PIN, EGRESS_PROGRAM, INGRESS_LINK_PIN, INGRESS_PROGRAM } from '../backend/index.js';
import { CAPTURE_CONFIG_LAYOUTS, encodeCaptureConfig, type CaptureFilter } from './filter.js';

export { summarizeFrame } from './frame-summary.js';
export { pcapHeader, pcapRecord } from './pcap.js';
export { pcapngHeader, pcapngPacket, readPcapng } from './pcapng.js';
export { CAPTURE_SNAPLEN, verdictText, type CaptureRecord } from './record.js';
export { NO_FILTER, type CaptureFilter } from './filter.js';

export const CAPTURE_OBJECT = 'xdp_lb_capture';
export const BACKEND_CAPTURE_OBJECT = 'tc_backend_capture';
/** The capture build's own maps (lb_capture.h): fresh per capture, never the running program's. */
const OWN_MAP_PREFIX = 'lb_cap_';
export const CAPTURE_MAPS = { events: 'lb_cap_events', config: 'lb_cap_config', stats: 'lb_cap_stats' } as const;
/** enum lb_cap_stat order (lb_capture.h). */
export const CAPTURE_STAT_NAMES = ['seen', 'matched', 'sampled_out', 'rate_limited', 'captured', 'output_failed'] as const;
export type CaptureStats = Record<(typeof CAPTURE_STAT_NAMES)[number], number>;
const PAGES_PER_CPU = 64;
/** Kernel map names are cut to 15 characters (BPF_OBJ_NAME_LEN). */
const KERNEL_NAME_LEN = 15;

export interface Poll {
  records: CaptureRecord[];
  /** Records the kernel or the reader dropped (a full buffer, a record that was not ours). */
  lost: number;
  /** False once a link no longer runs the capture program (the daemon replaced it). */
  attached: boolean;
}

/** The capture build loaded over the maps of a running xdp_lb (`progFd`), with `filter` written, and a perf
 * buffer reading its records. The caller runs its program (a link swap, or BPF_PROG_TEST_RUN in tests). */
export class CaptureProgram {
  private closed = false;

  private constructor(readonly obj: BpfObject, private readonly used: BpfMap[], private readonly perf: unknown) {}

  static loadOver(progFd: number, filter: CaptureFilter): Promise<CaptureProgram> {
    return CaptureProgram.load(CAPTURE_OBJECT, [progFd], encodeCaptureConfig(filter));
  }

  /** `object` (a capture build) over the maps the running programs `progFds` use, its config map set to `config`. */
  static async load(object: string, progFds: number[], config: Buffer): Promise<CaptureProgram> {
    const n = native();
    const used = [...new Set(progFds.flatMap((fd) => n.progMapIds(fd)))].map((id) => BpfMap.fromId(id));
    let obj: BpfObject | undefined;
    try {
      const byKernelName = new Map(used.map((m) => [m.name, m]));
      // The build must run over exactly the maps the running programs use; a running program older than the
      // object on disk (an upgrade before the daemon restarted) is refused rather than given fresh, empty maps.
      obj = await BpfObject.load(object, { mapFds: Object.fromEntries(mapsOf(object, byKernelName)) });
      checkBtfLayout(obj, 'lb_cap_record', CAPTURE_RECORD_LAYOUT);
      for (const [name, layout] of Object.entries(CAPTURE_CONFIG_LAYOUTS)) checkBtfLayout(obj, name, layout);
      obj.map(CAPTURE_MAPS.config).update(u32.encode(0), config);
      const perf = n.perfBufferOpen(obj.map(CAPTURE_MAPS.events).fd, PAGES_PER_CPU);
      return new CaptureProgram(obj, used, perf);
    } catch (e) {
      obj?.close();
      for (const m of used) m.close();
      throw e;
    }
  }

  /** The capture build of xdp_lb's program. */
  get program() {
    return this.obj.program(PROGRAM_NAME);
  }

  programNamed(name: string) {
    return this.obj.program(name);
  }

  /** Waits up to `timeoutMs` for records. */
  read(timeoutMs: number): { records: CaptureRecord[]; lost: number } {
    if (this.closed) return { records: [], lost: 0 };
    const r = native().perfBufferPoll(this.perf, timeoutMs);
    const records: CaptureRecord[] = [];
    let lost = r.lost;
    for (const s of r.samples) {
      const d = decodeRecord(s.data, s.cpu);
      if (d) records.push(d);
      else lost++;
    }
    return { records, lost };
  }

  /** What the program counted: frames seen, matched, sampled out, over the rate bound, captured, refused by the buffer. */
  stats(): CaptureStats {
    return perCpuCounters(this.obj.map(CAPTURE_MAPS.stats), CAPTURE_STAT_NAMES);
  }

  /** Address of a real id in the running data plane (lb_reals), undefined when it holds no such real. */
  realAddress(id: number): string | undefined {
    const v = this.obj.map('lb_reals').lookup(u32.encode(id));
    return v ? decodeReal(v).address : undefined;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    native().perfBufferClose(this.perf);
    this.obj.close();
    for (const m of this.used) m.close();
  }
}

/** Real ids of the running data plane's reals with these addresses (lb_reals); an address it has no real for is
 * an error naming it. */
export function realIdsOf(progFd: number, addresses: string[]): number[] {
  if (!addresses.length) return [];
  const reals = native().progMapIds(progFd).map((id) => BpfMap.fromId(id));
  try {
    const m = reals.find((x) => x.name === 'lb_reals');
    if (!m) throw new Error(`the running ${PROGRAM_NAME} has no lb_reals map`);
    const byAddress = new Map<string, number[]>();
    for (const [k, v] of m.entries()) {
      const a = decodeReal(v).address;
      byAddress.set(a, [...(byAddress.get(a) ?? []), k.readUInt32LE(0)]);
    }
    return addresses.flatMap((a) => {
      const ids = byAddress.get(canonicalIp(a) ?? a);
      if (!ids) throw new Error(`--real ${a}: the running data plane has no real with this address`);
      return ids;
    });
  } finally {
    for (const m of reals) m.close();
  }
}

interface Swap {
  linkFd: number;
  /** The program the link ran before the capture (put back at the end). */
  originalFd: number;
  originalId: number;
  /** The capture build's program for this link. */
  name: string;
}

/** The running program of the link pinned at `linkPath`, checked to be `name`: the link's fd, the program's fd and id. */
function running(linkPath: string, name: string): Swap {
  const n = native();
  const linkFd = n.objGet(linkPath);
  try {
    const progId = n.linkInfo(linkFd).progId;
    const progFd = n.progGetFdById(progId);
    const info = n.progInfo(progFd);
    if (info.name !== name) {
      n.closeFd(progFd);
      throw new Error(`${linkPath} runs program '${info.name}' (id ${progId}), not ${name}`);
    }
    return { linkFd, originalFd: progFd, originalId: progId, name };
  } catch (e) {
    n.closeFd(linkFd);
    throw e;
  }
}

/** A capture on a data plane pinned under a pin root: the capture build swapped into its pinned links (an lb node's
 * XDP link, or a backend's two tcx links), each with the link's compare-and-swap update. */
export class PinnedCapture {
  private restored = false;

  private constructor(private readonly swaps: Swap[], readonly capture: CaptureProgram) {}

  /** Captures what `filter` selects on the lb data plane pinned under `pinRoot`. `realAddresses` (--real) are
   * resolved against the running data plane into the filter's real ids. */
  static xdp(pinRoot: string, filter: CaptureFilter, realAddresses: string[] = []): Promise<PinnedCapture> {
    return PinnedCapture.start(CAPTURE_OBJECT, [[join(pinRoot, LINK_PIN), PROGRAM_NAME]], (fds) =>
      encodeCaptureConfig({ ...filter, reals: [...filter.reals, ...realIdsOf(fds[0]!, realAddresses)] }));
  }

  /** Captures what `filter` selects on the backend data plane pinned under `pinRoot` (ingress and egress). Its
   * counters and verdicts are a backend's (be_stats, TC actions); it has no address or real filters. */
  static backend(pinRoot: string, filter: CaptureFilter): Promise<PinnedCapture> {
    if (filter.vips.length || filter.clients.length || filter.reals.length)
      throw new Error('--vip, --client and --real select frames of an lb node; a backend\'s capture takes --reason, --action, --sample and --rate');
    return PinnedCapture.start(BACKEND_CAPTURE_OBJECT,
      [[join(pinRoot, INGRESS_LINK_PIN), INGRESS_PROGRAM], [join(pinRoot, EGRESS_LINK_PIN), EGRESS_PROGRAM]],
      () => encodeCaptureConfig(filter, BACKEND_COUNTER_BITS, TC_VERDICTS));
  }

  private static async start(object: string, links: Array<[string, string]>, config: (progFds: number[]) => Buffer): Promise<PinnedCapture> {
    const n = native();
    const swaps: Swap[] = [];
    let capture: CaptureProgram | undefined;
    const swapped: Swap[] = [];
    try {
      for (const [path, name] of links) swaps.push(running(path, name));
      capture = await CaptureProgram.load(object, swaps.map((s) => s.originalFd), config(swaps.map((s) => s.originalFd)));
      // Compare-and-swap: only if each link still runs the program we looked at.
      for (const s of swaps) {
        n.linkUpdate(s.linkFd, capture.programNamed(s.name).fd, s.originalFd);
        swapped.push(s);
      }
      return new PinnedCapture(swaps, capture);
    } catch (e) {
      // a link swapped before a later one failed gets its program back
      for (const s of swapped) try { n.linkUpdate(s.linkFd, s.originalFd, capture!.programNamed(s.name).fd); } catch { /* replaced meanwhile */ }
      capture?.close();
      for (const s of swaps) { n.closeFd(s.originalFd); n.closeFd(s.linkFd); }
      throw e;
    }
  }

  /** Waits up to `timeoutMs` for records. */
  poll(timeoutMs: number): Poll {
    if (this.restored) return { records: [], lost: 0, attached: false };
    const r = this.capture.read(timeoutMs);
    const n = native();
    const attached = this.swaps.every((s) => n.linkInfo(s.linkFd).progId === this.capture.programNamed(s.name).info().id);
    return { ...r, attached };
  }

  /** Swaps the original programs back (a link that runs another program by now keeps it) and frees everything.
   * Returns whether every original program was put back, and the capture program's counters. */
  stop(): { putBack: boolean; stats: CaptureStats } {
    if (this.restored) throw new Error('capture already stopped');
    this.restored = true;
    const n = native();
    let putBack = true;
    for (const s of this.swaps) {
      try {
        n.linkUpdate(s.linkFd, s.originalFd, this.capture.programNamed(s.name).fd);
      } catch {
        putBack = false; // EPERM: the link runs another program (the daemon replaced ours): that one stays
      }
    }
    // read after the swap back: nothing counts any more, and nothing is read twice
    const stats = this.capture.stats();
    this.capture.close();
    for (const s of this.swaps) { n.closeFd(s.originalFd); n.closeFd(s.linkFd); }
    return { putBack, stats };
  }

  /** The ids of the programs the links ran before the capture. */
  get originalPrograms(): number[] {
    return this.swaps.map((s) => s.originalId);
  }
}

/** The running program's maps by the capture object's map names (all but the capture's own). */
function mapsOf(object: string, byKernelName: Map<string, BpfMap>): [string, BpfMap][] {
  const names = native().objectMapNames(bpfObjectPath(object));
  const out: [string, BpfMap][] = [];
  const missing: string[] = [];
  for (const name of names) {
    if (name.startsWith(OWN_MAP_PREFIX)) continue;
    const m = byKernelName.get(name.slice(0, KERNEL_NAME_LEN));
    if (m) out.push([name, m]);
    else missing.push(name);
  }
  if (missing.length)
    throw new Error(`the running ${PROGRAM_NAME} does not use map(s) ${missing.join(', ')} of ${object}.o: it is another ` +
      'build than this gitlb (restart gitlb run with this version, then capture)');
  return out;
}
