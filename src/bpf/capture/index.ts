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
import { CAPTURE_RECORD_LAYOUT, decodeRecord, type CaptureRecord } from './record.js';
import { CAPTURE_CONFIG_LAYOUTS, encodeCaptureConfig, type CaptureFilter } from './filter.js';

export { summarizeFrame } from './frame-summary.js';
export { pcapHeader, pcapRecord } from './pcap.js';
export { pcapngHeader, pcapngPacket, readPcapng } from './pcapng.js';
export { CAPTURE_SNAPLEN, verdictText, type CaptureRecord } from './record.js';
export { NO_FILTER, type CaptureFilter } from './filter.js';

export const CAPTURE_OBJECT = 'xdp_lb_capture';
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
  /** False once the link no longer runs the capture program (the daemon replaced it). */
  attached: boolean;
}

/** The capture build loaded over the maps of a running xdp_lb (`progFd`), with `filter` written, and a perf
 * buffer reading its records. The caller runs its program (a link swap, or BPF_PROG_TEST_RUN in tests). */
export class CaptureProgram {
  private closed = false;

  private constructor(readonly obj: BpfObject, private readonly used: BpfMap[], private readonly perf: unknown) {}

  static async loadOver(progFd: number, filter: CaptureFilter): Promise<CaptureProgram> {
    const n = native();
    const config = encodeCaptureConfig(filter); // bad input fails before anything is loaded
    const used = n.progMapIds(progFd).map((id) => BpfMap.fromId(id));
    let obj: BpfObject | undefined;
    try {
      const byKernelName = new Map(used.map((m) => [m.name, m]));
      // The build must run over exactly the maps the running program uses; a running program older than the
      // object on disk (an upgrade before the daemon restarted) is refused rather than given fresh, empty maps.
      obj = await BpfObject.load(CAPTURE_OBJECT, { mapFds: Object.fromEntries(mapsOf(CAPTURE_OBJECT, byKernelName)) });
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

  get program() {
    return this.obj.program(PROGRAM_NAME);
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

/** A capture on the data plane pinned under a pin root: the capture build swapped into its XDP link. */
export class XdpCapture {
  private restored = false;

  private constructor(
    private readonly linkFd: number,
    private readonly originalProgFd: number,
    private readonly originalProgId: number,
    readonly capture: CaptureProgram,
  ) {}

  /** The running program of the link pinned under `pinRoot` (`xdp_link`), checked to be xdp_lb: its fd and id. */
  static running(pinRoot: string): { linkFd: number; progFd: number; progId: number } {
    const n = native();
    const linkPath = join(pinRoot, LINK_PIN);
    const linkFd = n.objGet(linkPath);
    try {
      const progId = n.linkInfo(linkFd).progId;
      const progFd = n.progGetFdById(progId);
      const info = n.progInfo(progFd);
      if (info.name !== PROGRAM_NAME) {
        n.closeFd(progFd);
        throw new Error(`${linkPath} runs program '${info.name}' (id ${progId}), not ${PROGRAM_NAME}`);
      }
      return { linkFd, progFd, progId };
    } catch (e) {
      n.closeFd(linkFd);
      throw e;
    }
  }

  /** Starts capturing what `filter` selects on the data plane pinned under `pinRoot`. `realAddresses` (--real)
   * are resolved against the running data plane into the filter's real ids. */
  static async start(pinRoot: string, filter: CaptureFilter, realAddresses: string[] = []): Promise<XdpCapture> {
    const n = native();
    const { linkFd, progFd, progId } = XdpCapture.running(pinRoot);
    let capture: CaptureProgram | undefined;
    try {
      const reals = [...filter.reals, ...realIdsOf(progFd, realAddresses)];
      capture = await CaptureProgram.loadOver(progFd, { ...filter, reals });
      // Compare-and-swap: only if the link still runs the program we looked at.
      n.linkUpdate(linkFd, capture.program.fd, progFd);
      return new XdpCapture(linkFd, progFd, progId, capture);
    } catch (e) {
      capture?.close();
      n.closeFd(progFd);
      n.closeFd(linkFd);
      throw e;
    }
  }

  /** Waits up to `timeoutMs` for records. */
  poll(timeoutMs: number): Poll {
    if (this.restored) return { records: [], lost: 0, attached: false };
    const r = this.capture.read(timeoutMs);
    const attached = native().linkInfo(this.linkFd).progId === this.capture.program.info().id;
    return { ...r, attached };
  }

  /** Swaps the original program back (unless the link runs another program by now) and frees everything but the
   * counters' last reading. Returns whether the original program was put back, and the program's counters. */
  stop(): { putBack: boolean; stats: CaptureStats } {
    if (this.restored) throw new Error('capture already stopped');
    this.restored = true;
    const n = native();
    let putBack = false;
    try {
      n.linkUpdate(this.linkFd, this.originalProgFd, this.capture.program.fd);
      putBack = true;
    } catch {
      // EPERM: the link runs another program (the daemon replaced ours): that one stays.
    }
    // read after the swap back: nothing counts any more, and nothing is read twice
    const stats = this.capture.stats();
    this.capture.close();
    n.closeFd(this.originalProgFd);
    n.closeFd(this.linkFd);
    return { putBack, stats };
  }

  get originalProgram(): number {
    return this.originalProgId;
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
