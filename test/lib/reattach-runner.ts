// Runs inside a test network namespace (nsenter --net, so the host's bpffs pins are seen): one start of an lb data
// plane, as a restarted daemon does it. Opens the pinned data plane on <ifname> in <mode> (loading xdp_lb.o again:
// a new program), applies the desired state from stdin and prints the pinned XDP link before and after, how the
// program is attached (LbDataPlane.forwarding) and the apply's map writes.
//   reattach-runner.ts <pinRoot> <ifname> <native|generic|auto>
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LINK_PIN, openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { pinnedXdpLink } from '../../src/bpf/attach.js';
import { stateFromJson } from './xdp-harness.js';
import { applyTo } from './converge.js';

const [pinRoot, ifname, mode] = process.argv.slice(2) as [string, string, 'native' | 'generic' | 'auto'];
const state = stateFromJson(JSON.parse(readFileSync(0, 'utf8')));
const pin = join(pinRoot, LINK_PIN);
const before = pinnedXdpLink(pin);
const dp = await openLbDataPlane({ pinRoot, interface: ifname, xdpMode: mode });
try {
  const report = await applyTo(dp, { ...state, interface: ifname });
  console.log(JSON.stringify({ before, after: pinnedXdpLink(pin), forwarding: dp.forwarding, mapWrites: report.mapWrites }));
} finally {
  dp.close();
}
