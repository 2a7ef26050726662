// Runs inside the lb test network namespace (nsenter --net, so the host's bpffs pins are seen): opens the pinned
// lb data plane on <ifname> (generic XDP) as a daemon start does, applies the desired state from stdin and prints
// the pinned XDP link after the start and after the apply, the program the data plane holds, the pinned
// connection table's size and what a table resize did (test/netns/xdp-resize-link-netns.test.ts).
//   resize-runner.ts <pinRoot> <ifname>
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LINK_PIN, openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { pinnedXdpLink } from '../../src/bpf/attach.js';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { stateFromJson } from './xdp-harness.js';
import { planOf } from './converge.js';

const [pinRoot, ifname] = process.argv.slice(2) as [string, string];
const state = stateFromJson(JSON.parse(readFileSync(0, 'utf8')));
const pin = join(pinRoot, LINK_PIN);
const dp = await openLbDataPlane({ pinRoot, interface: ifname, xdpMode: 'generic' });
try {
  const opened = pinnedXdpLink(pin);
  const ops = (await planOf(dp, { ...state, interface: ifname })).map((o) => o.op);
  const report = await dp.execute(await planOf(dp, { ...state, interface: ifname }), { desired: { ...state, interface: ifname } });
  const ct = BpfMap.open(join(pinRoot, 'lb_conntrack'));
  const conntrack = { max: ct.maxEntries, id: ct.id() };
  ct.close();
  console.log(JSON.stringify({ opened, applied: pinnedXdpLink(pin), program: dp.object()!.program('xdp_lb').info().id,
    programMap: dp.object()!.map('lb_conntrack').id(), conntrack, ops, mapWrites: report.mapWrites, resized: dp.resized }));
} finally {
  dp.close();
}
