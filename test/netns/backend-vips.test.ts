// VIP ownership on a backend node (src/reconciler/host/backend-vips.ts), in a real network namespace: addresses added
// and removed, ARP/rp_filter sysctls set and restored, and nothing touched that the module did not create.
import test from 'ava';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { reconcileBackendVips, withBackendVips, VIP_DEVICE } from '../../src/reconciler/host/backend-vips.js';
import { openBackendDataPlane } from '../../src/bpf/backend/index.js';
import type { DesiredState } from '../../src/render/state.js';
import { cleanupRun, createBridge, createNetns, exec, getSysctl, nsExec, nsName, runPrefix, setSysctl } from '../../src/lab/netns.js';
import { applyTo } from '../lib/converge.js';

const NS = nsName('bvips');
const PROBE = nsName('bvips-probe');
const work = mkdtempSync(join(tmpdir(), `${runPrefix()}bvips-`));
const stateFile = join(work, 'state', 'backend-vips.json');
const opts = { stateFile, nodeInterface: 'n0', netns: NS };
let expectedDevice = 'lo';

async function addrsOn(dev: string): Promise<string[]> {
  const r = await nsExec(NS, ['ip', '-j', 'addr', 'show', 'dev', dev]);
  if (r.code !== 0) return [];
  return (JSON.parse(r.stdout) as Array<{ addr_info: Array<{ local: string }> }>).flatMap((l) => l.addr_info.map((a) => a.local));
}

test.before(async () => {
  await createNetns(NS);
  await createBridge(NS, 'n0', ['203.0.113.2/24']);
  await setSysctl(NS, 'net.ipv4.conf.n0.rp_filter', '1');
  await setSysctl(NS, 'net.ipv4.conf.n0.arp_ignore', '0');
  await setSysctl(NS, 'net.ipv4.conf.n0.arp_announce', '0');
  // An address someone else put on lo: listed as desired below, it must be reported and left alone.
  await nsExec(NS, ['ip', 'addr', 'add', '192.0.2.50/32', 'dev', 'lo']);
  // Can this kernel make dummy devices? (Decides where the VIPs should go.)
  await createNetns(PROBE);
  const probe = await exec(['ip', '-n', PROBE, 'link', 'add', 'probe0', 'type', 'dummy']);
  expectedDevice = probe.code === 0 ? VIP_DEVICE : 'lo';
});

test.after.always(async () => {
  await cleanupRun();
  rmSync(work, { recursive: true, force: true });
});

test.serial('adds the VIPs, sets ARP and rp_filter on the node interface, records ownership', async (t) => {
  const r = await reconcileBackendVips(['192.0.2.10', '2001:db8:f::10', '192.0.2.50'], opts);
  t.is(r.device, expectedDevice);
  t.deepEqual(r.added.sort(), ['192.0.2.10', '2001:db8:f::10']);
  t.deepEqual(r.foreign, ['192.0.2.50']);
  const on = await addrsOn(expectedDevice);
  for (const a of ['192.0.2.10', '2001:db8:f::10', '192.0.2.50']) t.true(on.includes(a), a);
  t.is(await getSysctl(NS, 'net.ipv4.conf.n0.arp_ignore'), '1');
  t.is(await getSysctl(NS, 'net.ipv4.conf.n0.arp_announce'), '2');
  t.is(await getSysctl(NS, 'net.ipv4.conf.n0.rp_filter'), '2');
  const state = JSON.parse(readFileSync(stateFile, 'utf8'));
  t.deepEqual(state.addresses, ['192.0.2.10', '2001:db8:f::10']);
  t.is(state.sysctls['net/ipv4/conf/n0/rp_filter'].previous, '1');
});

test.serial('is idempotent: the same VIPs again change nothing', async (t) => {
  const r = await reconcileBackendVips(['192.0.2.10', '2001:db8:f::10', '192.0.2.50'], opts);
  t.deepEqual(r.added, []);
  t.deepEqual(r.removed, []);
  t.deepEqual(r.sysctlsSet, {});
});

test.serial('removes a VIP that went away; the foreign address stays', async (t) => {
  const r = await reconcileBackendVips(['192.0.2.10'], opts);
  t.deepEqual(r.removed, ['2001:db8:f::10']);
  const on = await addrsOn(expectedDevice);
  t.false(on.includes('2001:db8:f::10'));
  t.true(on.includes('192.0.2.10'));
  t.true(on.includes('192.0.2.50'));
});

test.serial('with no VIPs left: everything it made is undone, nothing else', async (t) => {
  // Someone changes arp_announce after us: that value is theirs now and must survive our clean-up.
  await setSysctl(NS, 'net.ipv4.conf.n0.arp_announce', '1');
  const r = await reconcileBackendVips([], opts);
  t.deepEqual(r.removed, ['192.0.2.10']);
  t.deepEqual(r.sysctlsRestored, { 'net/ipv4/conf/n0/arp_ignore': '0', 'net/ipv4/conf/n0/rp_filter': '1' });
  t.is(await getSysctl(NS, 'net.ipv4.conf.n0.arp_ignore'), '0');
  t.is(await getSysctl(NS, 'net.ipv4.conf.n0.rp_filter'), '1');
  t.is(await getSysctl(NS, 'net.ipv4.conf.n0.arp_announce'), '1');
  const lo = await addrsOn('lo');
  t.true(lo.includes('192.0.2.50'), 'foreign address untouched');
  t.false(lo.includes('192.0.2.10'));
  if (expectedDevice === VIP_DEVICE) t.deepEqual(await addrsOn(VIP_DEVICE), [], 'gitlb0 removed');
  t.false(existsSync(stateFile), 'no state left');
});

test.serial('an explicit device that does not exist is a clear error', async (t) => {
  await t.throwsAsync(reconcileBackendVips(['192.0.2.10'], { ...opts, device: 'nope0' }), { message: /backend VIP device 'nope0' does not exist/ });
});

test.serial('withBackendVips: when the map apply fails, the VIPs it added for that revision are released again', async (t) => {
  // A real backend data plane (loaded, never attached: the apply fails on its interface check before any attach).
  const pinRoot = `/sys/fs/bpf/gitlb-test-${runPrefix()}bvips`;
  const dp = await openBackendDataPlane({ pinRoot, interface: 'n0' });
  try {
    const wrapped = withBackendVips(dp, opts);
    const desired: DesiredState = {
      node: 'be1', role: 'backend', interface: 'not-n0', mtu: 1500, hashSeed: 0, conntrackMaxEntries: 16,
      reals: [], services: [], vips: [], localVips: ['192.0.2.77'],
    };
    await t.throwsAsync(applyTo(wrapped, desired), { message: /desired.interface 'not-n0' differs/ });
    t.false((await addrsOn(expectedDevice)).includes('192.0.2.77'));
    t.false(existsSync(stateFile), 'nothing owned after the failed apply');
  } finally {
    dp.close();
    rmSync(pinRoot, { recursive: true, force: true });
  }
});
