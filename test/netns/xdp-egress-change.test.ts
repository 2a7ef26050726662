// A running lb node whose reals move behind another interface (src/bpf/dataplane/index.ts refreshEgress): the
// two-arm lab (bench/e2e/two-arm-lab.ts) with one data plane kept open across applies, as a running daemon keeps it
// (test/lib/dp-runner.ts lb-session), so nothing here restarts. It starts with the `snat` service's only real on the
// client arm (eth0, the attached interface: no egress interface), then a config change moves the service to the two
// backends behind eth1. Before egress interfaces were taken again after an apply, xdp_lb stayed off eth1 until the
// next restart and the kernel reset every SNAT reply arriving there.
import test from 'ava';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { TWO_ARM, egressLinkPin, sh, twoArmLab, type TwoArmLab } from '../../bench/e2e/two-arm-lab.js';
import { snatConnectionsOk } from '../lib/two-arm.js';
import { nodeModuleArgv } from '../../src/lab/compiled.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import type { DesiredState } from '../../src/render/state.js';
import type { XdpForwarding } from '../../src/bpf/xdp-forwarding.js';

const PREFIX = `glb${process.pid}-2e`;
const RING_SIZE = 251;
let lab: TwoArmLab;
let dir = '';
let session: ChildProcessWithoutNullStreams | null = null;
let answers: AsyncIterator<string>;

type Answer = { report?: unknown; forwarding?: XdpForwarding; error?: string; code?: string };

test.before(() => {
  dir = mkdtempSync(join(tmpdir(), 'gitlb-egress-change-'));
  lab = twoArmLab(PREFIX, { egressNapi: true });
  lab.startServers(dir);
  session = spawn('nsenter', [`--net=/run/netns/${lab.ns.lb}`, ...nodeModuleArgv(new URL('../lib/dp-runner.ts', import.meta.url).pathname),
    'lb-session', lab.pinRoot, 'eth0', 'native'], { stdio: ['pipe', 'pipe', 'pipe'] });
  session.stderr.on('data', (d) => process.stderr.write(d));
  answers = createInterface({ input: session.stdout })[Symbol.asyncIterator]();
});
test.after.always(() => {
  if (session?.pid) try { process.kill(session.pid, 'SIGKILL'); } catch { /* gone */ }
  lab?.teardown();
  rmSync(dir, { recursive: true, force: true });
});

/** The lb node's desired state: one `snat` service over `reals` (id -> address), equal shares. */
function state(reals: Record<number, string>): DesiredState {
  const ids = Object.keys(reals).map(Number);
  const ring = Array.from({ length: RING_SIZE }, (_, i) => ids[i % ids.length]!);
  const s = makeState({ reals, addresses: [TWO_ARM.lb], conntrackMaxEntries: 65536, services: [{ id: 2, vip: TWO_ARM.vip.snat, forwarding: 'snat', ring }] });
  return { ...s, interface: 'eth0', snatAddress: TWO_ARM.lb, snatPorts: { min: 32768, max: 60999 } };
}
const ON_CLIENT_ARM = { 3: TWO_ARM.client };
const BEHIND_ETH1 = { 1: TWO_ARM.backends[0], 2: TWO_ARM.backends[1] };

/** Applies `s` in the running session; its answer. */
async function apply(s: DesiredState): Promise<Answer> {
  session!.stdin.write(`${JSON.stringify(stateToJson(s))}\n`);
  const next = await answers.next();
  if (next.done) throw new Error('the data plane session ended');
  return JSON.parse(next.value) as Answer;
}

test.serial('the only real on the client arm: xdp_lb native on eth0, no egress link', async (t) => {
  const a = await apply(state(ON_CLIENT_ARM));
  t.is(a.error, undefined, a.error);
  t.is(a.forwarding?.mode, 'native');
  t.is(lab.xdpOn('eth0'), 'xdp');
  t.is(lab.xdpOn('eth1'), null);
  t.false(existsSync(egressLinkPin(lab)));
});

test.serial('a change adds reals behind eth1: xdp_lb attached there without a restart, SNAT connections complete', async (t) => {
  const a = await apply(state(BEHIND_ETH1));
  t.is(a.error, undefined, a.error);
  t.regex(a.forwarding!.detail, /xdp_lb also on eth1 \(/);
  t.not(a.forwarding!.forwards, false);
  t.is(lab.xdpOn('eth0'), 'xdp');
  t.is(lab.xdpOn('eth1'), 'xdp', 'native, like eth0');
  t.true(existsSync(egressLinkPin(lab)));
  snatConnectionsOk(t, lab, 'after the change');
});

test.serial('a change back to the client-arm real unpins the egress link and eth1 loses XDP', async (t) => {
  const a = await apply(state(ON_CLIENT_ARM));
  t.is(a.error, undefined, a.error);
  t.false(existsSync(egressLinkPin(lab)), 'egress link unpinned');
  t.is(lab.xdpOn('eth1'), null);
  t.is(lab.xdpOn('eth0'), 'xdp', 'the main link untouched');
  t.notRegex(a.forwarding!.detail, /eth1/);
});

test.serial('eth1 unable to forward native XDP (peer without NAPI): left out and reported, eth0 stays native; attached once it can', async (t) => {
  sh(lab.ns.sw, ['ethtool', '-K', 'plb', 'gro', 'off']);
  const a = await apply(state(BEHIND_ETH1));
  t.is(a.error, undefined, a.error);
  t.is(a.forwarding!.forwards, false, 'reported as not forwarding (the log warns, gitlb status lists it)');
  t.regex(a.forwarding!.detail, /NOT attached to eth1: only 0\/4 .*native XDP cannot forward there/);
  t.is(a.forwarding!.mode, 'native');
  t.is(lab.xdpOn('eth0'), 'xdp', 'the forwarding program on eth0 was not swapped to generic');
  t.is(lab.xdpOn('eth1'), null);
  // the benign change: the peer gets NAPI, and the next apply (no change to the reals) probes eth1 again
  sh(lab.ns.sw, ['ethtool', '-K', 'plb', 'gro', 'on']);
  const b = await apply(state(BEHIND_ETH1));
  t.is(b.error, undefined, b.error);
  t.not(b.forwarding!.forwards, false);
  t.regex(b.forwarding!.detail, /xdp_lb also on eth1 \(/);
  t.notRegex(b.forwarding!.detail, /NOT attached/);
  t.is(lab.xdpOn('eth1'), 'xdp');
  snatConnectionsOk(t, lab, 'after the retry');
  const c = await apply(state(ON_CLIENT_ARM));
  t.is(c.error, undefined, c.error);
  t.false(existsSync(egressLinkPin(lab)));
});
