// Applies a desired state to a data plane from inside a network namespace (run with `ip netns exec`):
//   dp-runner.ts lb <pinRoot> <ifname> <xdpMode>   (DesiredState JSON on stdin; prints the ApplyReport)
//   dp-runner.ts lb-session <pinRoot> <ifname> <xdpMode>   (one data plane kept open, as a running daemon keeps it:
//                                                   a DesiredState JSON per stdin line; per line it prints
//                                                   {report, forwarding} or {error, code})
//   dp-runner.ts lb-counters <pinRoot>             (prints counters())
//   dp-runner.ts backend <pinRoot> <ifname>        (DesiredState JSON on stdin)
// Programs stay attached through their pinned links after this process exits.
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { openBackendDataPlane } from '../../src/bpf/backend/index.js';
import type { DesiredState } from '../../src/render/state.js';
import { applyTo } from './converge.js';

function stateFromStdin(): DesiredState {
  return stateOf(JSON.parse(readFileSync(0, 'utf8')));
}

function stateOf(j: any): DesiredState {
  return { ...j, services: j.services.map((x: any) => ({ ...x, ring: Uint32Array.from(x.ring) })) };
}

const [cmd, pinRoot, ifname, mode] = process.argv.slice(2);
if (cmd === 'lb') {
  const dp = await openLbDataPlane({ pinRoot: pinRoot!, interface: ifname, xdpMode: (mode as 'generic') ?? 'generic' });
  try {
    console.log(JSON.stringify(await applyTo(dp, { ...stateFromStdin(), interface: ifname! })));
  } finally {
    dp.close();
  }
} else if (cmd === 'lb-session') {
  const dp = await openLbDataPlane({ pinRoot: pinRoot!, interface: ifname, xdpMode: (mode as 'generic') ?? 'generic' });
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      if (!line.trim()) continue;
      try {
        const report = await applyTo(dp, { ...stateOf(JSON.parse(line)), interface: ifname! });
        console.log(JSON.stringify({ report, forwarding: dp.forwarding }));
      } catch (e) {
        console.log(JSON.stringify({ error: (e as Error).message, code: (e as { code?: string }).code }));
      }
    }
  } finally {
    dp.close();
  }
} else if (cmd === 'lb-counters') {
  const dp = await openLbDataPlane({ pinRoot: pinRoot! });
  try {
    console.log(JSON.stringify(await dp.counters()));
  } finally {
    dp.close();
  }
} else if (cmd === 'backend') {
  const dp = await openBackendDataPlane({ pinRoot: pinRoot!, interface: ifname! });
  try {
    console.log(JSON.stringify(await applyTo(dp, { ...stateFromStdin(), role: 'backend', node: 'backend-test', interface: ifname! })));
  } finally {
    dp.close();
  }
} else {
  console.error(`unknown command ${cmd}`);
  process.exit(2);
}
