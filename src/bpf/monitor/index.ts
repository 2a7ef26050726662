// `gitlb monitor`'s capture. xdp_lb_monitor.o is xdp_lb built with packet samples (src/bpf/include/lb_monitor.h).
// Watching swaps it into the running XDP link over the very maps the running program uses (its connection table,
// rings, counters: one data plane, not a copy), with the link's compare-and-swap update, so no frame goes
// unhandled; stopping swaps the original back the same way. The normal xdp_lb.o never carries the samples.
// If the daemon replaces the program meanwhile (a restart, a resize), the swap back is refused and the daemon's
// program stays: the monitor only ever undoes its own change.
import { join } from 'node:path';
import { native } from '../addon.js';
import { BpfMap, BpfObject } from '../libbpf.js';
import { bpfObjectPath } from '../paths.js';
import { LINK_PIN, PROGRAM_NAME } from '../dataplane/index.js';
import { decodeSample, type MonitorSample } from './sample.js';

export { summarizeFrame } from './frame-summary.js';
export { pcapHeader, pcapRecord } from './pcap.js';
export type { MonitorSample } from './sample.js';

export const MONITOR_OBJECT = 'xdp_lb_monitor';
export const MONITOR_EVENTS_MAP = 'lb_monitor_events';
/** LB_MONITOR_SNAPLEN in lb_monitor.h: the bytes of each frame a sample carries. */
export const MONITOR_SNAPLEN = 192;
const PAGES_PER_CPU = 64;
/** Kernel map names are cut to 15 characters (BPF_OBJ_NAME_LEN). */
const KERNEL_NAME_LEN = 15;

export interface Poll {
  samples: MonitorSample[];
  /** Samples the kernel or the reader dropped (a full buffer, a record that was not ours). */
  lost: number;
  /** False once the link no longer runs the monitor's program (the daemon replaced it). */
  attached: boolean;
}

export class XdpMonitor {
  private restored = false;

  private constructor(
    private readonly linkFd: number,
    private readonly originalProgFd: number,
    private readonly originalProgId: number,
    private readonly obj: BpfObject,
    private readonly used: BpfMap[],
    private readonly perf: unknown,
  ) {}

  /** Starts watching the data plane pinned under `pinRoot` (its XDP link `xdp_link`). */
  static async start(pinRoot: string): Promise<XdpMonitor> {
    const n = native();
    const linkPath = join(pinRoot, LINK_PIN);
    const linkFd = n.objGet(linkPath);
    const opened: { progFd?: number; used: BpfMap[]; obj?: BpfObject; perf?: unknown } = { used: [] };
    try {
      const progId = n.linkInfo(linkFd).progId;
      opened.progFd = n.progGetFdById(progId);
      const info = n.progInfo(opened.progFd);
      if (info.name !== PROGRAM_NAME) throw new Error(`${linkPath} runs program '${info.name}' (id ${progId}), not ${PROGRAM_NAME}`);
      opened.used = n.progMapIds(opened.progFd).map((id) => BpfMap.fromId(id));
      const byKernelName = new Map(opened.used.map((m) => [m.name, m]));
      // The variant must run over exactly the maps the running program uses; a running program older than the
      // object on disk (an upgrade before the daemon restarted) is refused rather than given fresh, empty maps.
      const obj = (opened.obj = await BpfObject.load(MONITOR_OBJECT, {
        mapFds: Object.fromEntries(mapsOf(MONITOR_OBJECT, byKernelName)),
      }));
      const events = obj.map(MONITOR_EVENTS_MAP);
      opened.perf = n.perfBufferOpen(events.fd, PAGES_PER_CPU);
      // Compare-and-swap: only if the link still runs the program we looked at.
      n.linkUpdate(linkFd, obj.program(PROGRAM_NAME).fd, opened.progFd);
      return new XdpMonitor(linkFd, opened.progFd, progId, obj, opened.used, opened.perf);
    } catch (e) {
      if (opened.perf) n.perfBufferClose(opened.perf);
      opened.obj?.close();
      for (const m of opened.used) m.close();
      if (opened.progFd !== undefined) n.closeFd(opened.progFd);
      n.closeFd(linkFd);
      throw e;
    }
  }

  /** Waits up to `timeoutMs` for samples. */
  poll(timeoutMs: number): Poll {
    if (this.restored) return { samples: [], lost: 0, attached: false };
    const n = native();
    const r = n.perfBufferPoll(this.perf, timeoutMs);
    const samples: MonitorSample[] = [];
    let lost = r.lost;
    for (const s of r.samples) {
      const d = decodeSample(s.data, s.cpu);
      if (d) samples.push(d);
      else lost++;
    }
    const attached = n.linkInfo(this.linkFd).progId === this.obj.program(PROGRAM_NAME).info().id;
    return { samples, lost, attached };
  }

  /** Swaps the original program back (unless the link runs another program by now) and frees everything.
   * Returns whether the original program was put back. */
  stop(): boolean {
    if (this.restored) return false;
    this.restored = true;
    const n = native();
    let putBack = false;
    try {
      n.linkUpdate(this.linkFd, this.originalProgFd, this.obj.program(PROGRAM_NAME).fd);
      putBack = true;
    } catch {
      // EPERM: the link runs another program (the daemon replaced ours): that one stays.
    }
    n.perfBufferClose(this.perf);
    this.obj.close();
    for (const m of this.used) m.close();
    n.closeFd(this.originalProgFd);
    n.closeFd(this.linkFd);
    return putBack;
  }

  get originalProgram(): number {
    return this.originalProgId;
  }
}

/** The running program's maps by the monitor object's map names (all but the monitor's own event map). */
function mapsOf(object: string, byKernelName: Map<string, BpfMap>): [string, BpfMap][] {
  const names = native().objectMapNames(bpfObjectPath(object));
  const out: [string, BpfMap][] = [];
  const missing: string[] = [];
  for (const name of names) {
    if (name === MONITOR_EVENTS_MAP) continue;
    const m = byKernelName.get(name.slice(0, KERNEL_NAME_LEN));
    if (m) out.push([name, m]);
    else missing.push(name);
  }
  if (missing.length)
    throw new Error(`the running ${PROGRAM_NAME} does not use map(s) ${missing.join(', ')} of ${object}.o: it is another ` +
      'build than this gitlb (restart gitlb run with this version, then watch)');
  return out;
}
