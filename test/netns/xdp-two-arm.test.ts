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
import { join } from 'node:path';
import { TWO_ARM, sh, twoArmLab, type TwoArmLab } from '../../bench/e2e/two-arm-lab.js';
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

/** `n` HTTP requests, each on a new connection; the answers (`backend=.. local=.. client=..`) or `FAIL`. */
function requests(vip: string, n: number): string[] {
  const script = `for i in $(seq ${n}); do curl -s --max-time 5 http://${vip}:${TWO_ARM.port}/ || echo FAIL; done`;
  return sh(lab.ns.client, ['bash', '-c', script]).trim().split('\n');
}

/** The lb node's TCP resets sent and its interfaces' receive-queue drops (where dropped redirects show). */
function lbDrops(): { rsts: number; rxDrops: number } {
  const snmp = sh(lab.ns.lb, ['cat', '/proc/net/snmp']).split('\n').filter((l) => l.startsWith('Tcp:'));
  const rsts = Number(snmp[1]!.split(/\s+/)[snmp[0]!.split(/\s+/).indexOf('OutRsts')]);
  let rxDrops = 0;
  for (const d of ['eth0', 'eth1']) for (const m of sh(lab.ns.lb, ['ethtool', '-S', d]).matchAll(/rx_queue_\d+_drops:\s*(\d+)/g)) rxDrops += Number(m[1]);
  return { rsts, rxDrops };
}

/** Every SNAT and dsr-l2 connection answers, from both backends; SNAT's backends saw the snatAddress; the lb
 * translated every connection, sent no reset and its drivers dropped nothing. */
function trafficOk(t: import('ava').ExecutionContext, label: string): void {
  lab.refreshNeighbours();
  const before = { c: lab.counters(), d: lbDrops() };
  const snat = requests(TWO_ARM.vip.snat, 20);
  const l2 = requests(TWO_ARM.vip.l2, 10);
  const after = { c: lab.counters(), d: lbDrops() };
  t.deepEqual(snat.filter((a) => !new RegExp(`^backend=b[12] local=198\\.51\\.100\\.1[12]:80 client=${TWO_ARM.lb.replace(/\./g, '\\.')}:\\d+$`).test(a)), [],
    `${label}: every SNAT connection answered by a backend that saw the snatAddress`);
  t.deepEqual([...new Set(snat.map((a) => a.slice(0, 10)))].sort(), ['backend=b1', 'backend=b2'], `${label}: both backends`);
  t.deepEqual(l2.filter((a) => !new RegExp(`^backend=b[12] local=${TWO_ARM.vip.l2.replace(/\./g, '\\.')}:80 client=192\\.0\\.2\\.2:\\d+$`).test(a)), [],
    `${label}: every dsr-l2 connection answered from the VIP`);
  t.is(after.c.snat_new! - before.c.snat_new!, 20, `${label}: one translation per SNAT connection`);
  t.true(after.c.snat_reply! - before.c.snat_reply! >= 40, `${label}: the replies were translated by xdp_lb (+${after.c.snat_reply! - before.c.snat_reply!})`);
  t.is(after.d.rsts - before.d.rsts, 0, `${label}: the lb node's kernel reset nothing`);
  t.is(after.d.rxDrops - before.d.rxDrops, 0, `${label}: no frame dropped by the lb node's drivers`);
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
    t.deepEqual(r.links.map((l) => l.replace(/ \(.*/, '')).sort(), [egressPinName(), 'xdp_link'].sort(), r.links.join('; '));
  } finally {
    rmSync(cacheDir, { recursive: true, force: true });
  }
  t.is(lab.xdpOn('eth0'), null);
  t.is(lab.xdpOn('eth1'), null);
});

/** The egress link's pin name: xdp_egress<ifindex of eth1 in the lb namespace>_link. */
function egressPinName(): string {
  const [l] = JSON.parse(sh(lab.ns.lb, ['ip', '-j', 'link', 'show', 'dev', 'eth1'])) as Array<{ ifindex: number }>;
  return `xdp_egress${l!.ifindex}_link`;
}
