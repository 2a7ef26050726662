// xdp_lb on the lb node's other interfaces: the ones its routes to the reals leave by ("egress interfaces").
//
// An lb node with two arms (clients on one interface, backends behind another) breaks two things when xdp_lb runs
// on the client-side interface only:
// - native XDP sends towards the backends with bpf_redirect into the other interface, whose driver must accept XDP
//   frames (on a veth: its peer runs NAPI, an XDP program or GRO). If it does not, every frame is dropped after the
//   program counted it `redirect` (the receiving interface's rx drops are the only trace), so the forwarding probe
//   (xdp-forwarding.ts) has to test the egress interfaces as well as the attached one;
// - a `snat` listener's replies come back from the backends on the egress interface. Without xdp_lb there they
//   reach the kernel, which owns the SNAT address and answers them with a TCP reset: no SNAT connection through a
//   two-arm node ever completed. So xdp_lb is attached to every egress interface too, in the attached interface's
//   mode, each through a link pinned at `xdp_egress<ifindex>_link` beside the main link (bpffs names hold no dot,
//   an interface name may; `_link` at the end is how `gitlb down` tells links from maps). On those interfaces it translates SNAT replies (and balances a VIP packet should one
//   arrive there); everything else (DSR replies on their way to the clients, health checks) it passes, as on the
//   main interface.
// The set is found from the kernel's routes (`ip route get <real>`) when xdp_lb is attached, and again after every
// apply that changes the reals (LbDataPlane.refreshEgress): a real added behind yet another interface gets xdp_lb
// there without a restart, once that interface passes the forwarding probe (docs/datapath.md).
import { execFile } from 'node:child_process';
import { readdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { native } from '../addon.js';
import type { BpfObject, XdpAttachment } from '../libbpf.js';
import { decodeReal } from './codec.js';
import type { LbMaps } from './maps.js';

const EGRESS_LINK = /^xdp_egress(\d+)_link$/;
const execFileAsync = promisify(execFile);

/** Interfaces other than `main` and lo that the kernel's routes to the reals in lb_reals leave by, sorted. One `ip`
 * for all of them (`-batch`, `-force`: a real without a route prints nothing and the rest go on), so a node with tens
 * of thousands of reals pays one process, not one per real; only the set of interfaces matters, not which real
 * uses which. */
export async function egressInterfaces(maps: LbMaps, main: string): Promise<string[]> {
  const lines: string[] = [];
  for (const [, v] of maps.reals.entries()) lines.push(`route get ${decodeReal(v).address}`);
  if (!lines.length) return [];
  let out = '';
  // asynchronous: the apply runs on the event loop that health checks and the peer channels share
  const ip = execFileAsync('ip', ['-force', '-j', '-batch', '-'], { timeout: 30_000, maxBuffer: 64 << 20 });
  ip.child.stdin?.end(`${lines.join('\n')}\n`);
  try {
    out = (await ip).stdout;
  } catch (e) {
    out = String((e as { stdout?: string }).stdout ?? ''); // -force: some failed, the others answered
  }
  const devs = new Set<string>();
  for (const line of out.split('\n')) {
    if (!line.trim()) continue;
    for (const r of JSON.parse(line) as Array<{ dev?: string }>) if (r.dev && r.dev !== 'lo' && r.dev !== main) devs.add(r.dev);
  }
  return [...devs].sort();
}


/** xdp_lb's link on one egress interface, with the interface's name (a program swap re-attaches by name). */
export interface EgressLink { name: string; link: XdpAttachment }

export const egressPin = (pinRoot: string, ifindex: number) => join(pinRoot, `xdp_egress${ifindex}_link`);

/**
 * Attaches `obj`'s xdp_lb to each of `ifnames` in `mode` (its pinned link swapped in place when there is one) and
 * unpins links of interfaces no longer among them (an unpinned link with no fd left detaches). Returns the
 * links made and, per interface that refused (another XDP program already there, or gone), why.
 */
export function attachEgress(obj: BpfObject, program: string, pinRoot: string, ifnames: string[], mode: 'native' | 'generic'):
  { links: EgressLink[]; refused: string[] } {
  const links: EgressLink[] = [];
  const refused: string[] = [];
  const keep = new Set<string>();
  for (const name of ifnames) {
    try {
      const pin = egressPin(pinRoot, native().ifNameToIndex(name)); // if_nametoindex: the caller's namespace
      keep.add(pin);
      links.push({ name, link: obj.program(program).attachXdp(name, mode, pin) });
    } catch (e) {
      refused.push(`${name}: ${(e as Error).message}`);
    }
  }
  for (const f of readdirSync(pinRoot)) {
    const pin = join(pinRoot, f);
    if (EGRESS_LINK.test(f) && !keep.has(pin)) unlinkSync(pin);
  }
  return { links, refused };
}
