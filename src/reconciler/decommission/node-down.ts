// Taking a node's data plane down on purpose (`gitlb down`): the VIPs it put on a local device, then its pins —
// the pinned XDP / TC links are the last reference to the attachments, so unpinning them detaches the programs.
// A link that a running process still holds would stay attached: that is refused before anything is removed.
import { existsSync, readFileSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { reconcileBackendVips } from '../host/backend-vips.js';
import { runFile } from '../host/run-file.js';
import { nodeAliveEvidence } from './node-alive.js';
import { removeInterfaceAddress } from '../flows/snat-takeover.js';
import { BpfMap } from '../../bpf/libbpf.js';
import { servedAddressesIn } from '../../bpf/dataplane/flow-state.js';
import { SNAT_MAPS } from '../../bpf/dataplane/snat.js';

/** The addresses a pinned lb_snat_served map lists. */
function servedAddressesAt(pin: string): string[] {
  const m = BpfMap.open(pin);
  try {
    return servedAddressesIn(m);
  } finally {
    m.close();
  }
}

export interface NodeDownOptions {
  node: string;
  /** Root of the pins; the node's live in <pinRoot>/<node>. */
  pinRoot: string;
  /** The node's state directory (backend-vips.json is read from it). */
  cacheDir: string;
  /** Needed when the node added VIPs (backend nodes): the interface the daemon ran with. */
  interface?: string;
}

export interface NodeDownReport {
  pinDir: string;
  /** Link pins found and verified detached, e.g. `xdp_link (xdp, id 42)`. */
  links: string[];
  /** Every pin removed (maps, programs, links). */
  pins: string[];
  /** VIPs removed from the local device. */
  vips: string[];
  /** Lost lb nodes' SNAT addresses this node served (snat-takeover.ts), removed from its interface. */
  snatAddresses: string[];
  nothingToDo: boolean;
}

/** Thrown when nothing was found under the pin root but the node shows signs of life (nothing removed or recorded). */
export class AliveElsewhereError extends Error {}

const bpftool = (args: string[]) => runFile('bpftool', ['-j', ...args], 15_000);

interface BpfObjectInfo {
  id: number;
  type?: string;
}

type Kind = 'map' | 'link';

/** Processes (this one excluded) holding a file descriptor of one of these BPF maps or links, from /proc/<pid>/fdinfo. */
export function bpfHolders(ids: { kind: Kind; id: number }[]): { pid: number; comm: string }[] {
  const wanted = new Set(ids.map((o) => `${o.kind}:${o.id}`));
  const out: { pid: number; comm: string }[] = [];
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    if (Number(pid) === process.pid) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone meanwhile
    }
    for (const fd of fds) {
      try {
        const kind = /^anon_inode:bpf-(map|link)$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1] as Kind | undefined;
        if (!kind) continue;
        const id = new RegExp(`^${kind}_id:\\s*(\\d+)$`, 'm').exec(readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'))?.[1];
        if (!id || !wanted.has(`${kind}:${id}`)) continue;
        out.push({ pid: Number(pid), comm: readFileSync(`/proc/${pid}/comm`, 'utf8').trim() });
        break;
      } catch {
        // closed meanwhile
      }
    }
  }
  return out;
}

async function pinnedInfo(kind: Kind, pin: string): Promise<BpfObjectInfo> {
  const r = await bpftool([kind, 'show', 'pinned', pin]);
  if (r.code !== 0) throw new Error(`bpftool ${kind} show pinned ${pin}: ${r.stderr.trim() || `exit ${r.code}`}`);
  return JSON.parse(r.stdout) as BpfObjectInfo;
}

/** Removes the node's data plane; throws (having removed nothing) when a live process still holds one of its links. */
export async function takeNodeDown(o: NodeDownOptions): Promise<NodeDownReport> {
  const pinDir = join(o.pinRoot, o.node);
  const vipState = join(o.cacheDir, 'backend-vips.json');
  const pins = existsSync(pinDir) ? readdirSync(pinDir).sort() : [];
  const report: NodeDownReport = { pinDir, links: [], pins, vips: [], snatAddresses: [], nothingToDo: pins.length === 0 && !existsSync(vipState) };
  if (report.nothingToDo) {
    // Nothing here is also what a wrong --pin-root looks like: refuse when the node looks alive.
    const alive = await nodeAliveEvidence(o.node, o.interface, o.cacheDir);
    if (alive.length)
      throw new AliveElsewhereError(`found no data plane of ${o.node} under ${pinDir}, but it looks alive: ${alive.join('; ')}. Wrong --pin-root (give the one gitlb run uses)? Nothing removed, nothing recorded`);
    return report;
  }

  // Links detach when their last reference goes; a running daemon holds the maps (and maybe the links), and
  // would keep a half-removed data plane or attach it again: refuse while any process holds any of them.
  const objects: { pin: string; kind: Kind; info: BpfObjectInfo }[] = [];
  for (const pin of pins) {
    const kind: Kind = pin.endsWith('_link') ? 'link' : 'map';
    objects.push({ pin, kind, info: await pinnedInfo(kind, join(pinDir, pin)) });
  }
  const holders = bpfHolders(objects.map((o) => ({ kind: o.kind, id: o.info.id })));
  if (holders.length) {
    const who = holders.map((p) => `${p.comm}(${p.pid})`).join(', ');
    throw new Error(`the data plane of ${o.node} is in use by ${who}: stop that process first (the daemon: systemctl stop gitlb); nothing was removed`);
  }
  const links = objects.filter((x) => x.kind === 'link');

  // SNAT addresses of lost lb nodes this node took over are on its interface: once the data plane is gone its
  // kernel would keep answering ARP for them and reset the replies. Read before anything is removed, so a missing
  // --interface refuses with nothing changed.
  const servedPin = join(pinDir, SNAT_MAPS.served);
  const served = existsSync(servedPin) ? servedAddressesAt(servedPin) : [];
  if (served.length && !o.interface)
    throw new Error(`${servedPin}: this node serves the SNAT addresses of lost lb nodes (${served.join(', ')}) on its interface: give --interface (the node's interface) to remove them; nothing was removed`);

  if (existsSync(vipState)) {
    if (!o.interface) throw new Error(`${vipState} records VIPs this node added: give --interface (the node's interface) to remove them`);
    const r = await reconcileBackendVips([], { stateFile: vipState, nodeInterface: o.interface });
    report.vips = r.removed;
    rmSync(vipState, { force: true });
  }

  for (const address of served) await removeInterfaceAddress(o.interface!, address);
  report.snatAddresses = served;

  rmSync(pinDir, { recursive: true, force: true });
  for (const { pin, info } of links) {
    // The link object must be gone: had anything else kept it, the program would still be attached.
    if (!(await linkGone(info.id))) throw new Error(`${pin} (link id ${info.id}) is still attached after unpinning: some process holds it`);
    report.links.push(`${pin} (${info.type ?? 'link'}, id ${info.id})`);
  }
  return report;
}

/** How long an unpinned link may take to go: the kernel frees a link whose last reference was its pin from a
 * workqueue (bpf_link_put defers), so its id can still be shown for a moment after the unlink. */
const LINK_RELEASE_WAIT_MS = 3_000;

/** Whether the kernel no longer knows link `id`, re-checked every 100 ms for up to LINK_RELEASE_WAIT_MS. */
async function linkGone(id: number): Promise<boolean> {
  const deadline = Date.now() + LINK_RELEASE_WAIT_MS;
  for (;;) {
    if ((await bpftool(['link', 'show', 'id', String(id)])).code !== 0) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
}
