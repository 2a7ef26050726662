// An lb node with two interfaces (clients on eth0, backends behind eth1; bench/e2e/two-arm-lab.ts) and gitlb's data
// plane on eth0 in native XDP on veth. Two ways it lost packets before xdp_lb was also attached to the interfaces
// the routes to the reals leave by (src/bpf/dataplane/egress-links.ts):
// - native XDP redirects into eth1; with no NAPI on eth1's peer the driver dropped every such frame after the
//   program had counted it `redirect` (only eth0's rx drops showed it), while the probe of eth0 said "forwards";
// - SNAT replies come back on eth1, where xdp_lb did not run: the kernel, which owns the SNAT address, reset them,
//   so no SNAT connection ever completed.
// Real traffic: curl from the client namespace, haproxy on the backends.
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { TWO_ARM, egressLinkPin, lbResets, lbRxDrops, requests, sh, twoArmLab, type TwoArmLab } from '../../bench/e2e/two-arm-lab.js';
import { snatConnectionsOk } from '../lib/two-arm.js';
import { takeNodeDown } from '../../src/reconciler/decommission/node-down.js';

const PREFIX = `glb${process.pid}-2a`;
let lab: TwoArmLab;
let dir = '';

test.before(() => {
  dir = mkdtempSync(join(tmpdir(), 'gitlb-two-arm-'));
  lab = twoArmLab(PREFIX, { egressNapi: false });
  lab.startServers(dir);
});
test.after.always(() => {
  lab?.teardown();
  rmSync(dir, { recursive: true, force: true });
});

/** Every SNAT and dsr-l2 connection answers (snatConnectionsOk; dsr-l2 from the VIP), and the lb node's kernel reset
 * nothing and its drivers dropped nothing meanwhile. */
function trafficOk(t: import('ava').ExecutionContext, label: string): void {
  const before = { rsts: lbResets(lab), rxDrops: lbRxDrops(lab) };
  snatConnectionsOk(t, lab, label);
  const l2 = requests(lab, TWO_ARM.vip.l2, 10);
  t.deepEqual(l2.filter((a) => !new RegExp(`^backend=b[12] local=${TWO_ARM.vip.l2.replace(/\./g, '\\.')}:80 client=192\\.0\\.2\\.2:\\d+$`).test(a)), [],
    `${label}: every dsr-l2 connection answered from the VIP`);
  t.is(lbResets(lab) - before.rsts, 0, `${label}: the lb node's kernel reset nothing`);
  t.is(lbRxDrops(lab) - before.rxDrops, 0, `${label}: no frame dropped by the lb node's drivers`);
}

test.serial('native, the egress interface\'s peer without NAPI: refused, naming the egress interface (not a silent drop)', (t) => {
  const e = t.throws(() => lab.applyDataPlane('native'));
  t.is((e as { code?: string }).code, 'ENOTSUP');
  t.regex(e!.message, /eth0: 4\/4 XDP_TX probe frames transmitted; eth1: only 0\/4/);
  t.is(lab.xdpOn('eth0'), null, 'nothing left attached');
  t.is(lab.xdpOn('eth1'), null);
});

test.serial('auto, the same: generic on both interfaces, and SNAT and dsr-l2 connections all complete', (t) => {
  lab.applyDataPlane('auto');
  t.is(lab.xdpOn('eth0'), 'xdpgeneric');
  t.is(lab.xdpOn('eth1'), 'xdpgeneric', 'xdp_lb on the interface the SNAT replies arrive on');
  trafficOk(t, 'generic');
});

test.serial('native with NAPI on the egress peer: native on both interfaces, SNAT and dsr-l2 connections all complete', (t) => {
  sh(lab.ns.sw, ['ethtool', '-K', 'plb', 'gro', 'on']);
  lab.applyDataPlane('native');
  t.is(lab.xdpOn('eth0'), 'xdp');
  t.is(lab.xdpOn('eth1'), 'xdp');
  trafficOk(t, 'native');
});

test.serial('gitlb down\'s removal (takeNodeDown) finds the egress link by its `_link` pin, verifies it detached, and leaves no XDP on either interface', async (t) => {
  t.is(lab.xdpOn('eth1'), 'xdp');
  const cacheDir = mkdtempSync(join(tmpdir(), 'gitlb-two-arm-cache-'));
  try {
    // the data plane's pins are <pinRoot>/<node>: here /sys/fs/bpf/<lb namespace>
    const r = await takeNodeDown({ node: lab.ns.lb, pinRoot: '/sys/fs/bpf', cacheDir });
    t.deepEqual(r.links.map((l) => l.replace(/ \(.*/, '')).sort(), [basename(egressLinkPin(lab)), 'xdp_link'].sort(), r.links.join('; '));
  } finally {
    rmSync(cacheDir, { recursive: true, force: true });
  }
  t.is(lab.xdpOn('eth0'), null);
  t.is(lab.xdpOn('eth1'), null);
});
