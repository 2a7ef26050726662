// Runs inside a test network namespace: opens the LB data plane on an interface with an XDP mode, applies the
// desired state from stdin, and prints how the program ended up attached (LbDataPlane.forwarding) or the error.
import { readFileSync } from 'node:fs';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { stateFromJson } from './xdp-harness.js';
import { applyTo } from './converge.js';

const [pinRoot, ifname, mode] = process.argv.slice(2) as [string, string, 'native' | 'generic' | 'auto'];
let dp: Awaited<ReturnType<typeof openLbDataPlane>> | undefined;
try {
  // with pins present the data plane is adopted and attached here (a restart), else at the first apply
  dp = await openLbDataPlane({ pinRoot, interface: ifname, xdpMode: mode });
  await applyTo(dp, { ...stateFromJson(JSON.parse(readFileSync(0, 'utf8'))), interface: ifname });
  console.log(JSON.stringify({ forwarding: dp.forwarding }));
} catch (e) {
  console.log(JSON.stringify({ error: String((e as Error).message), code: (e as { code?: string }).code }));
} finally {
  dp?.close();
}
