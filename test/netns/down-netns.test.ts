// `gitlb down` in a network namespace: an lb node's XDP program attached by `gitlb run`, refused while the daemon
// holds the link, detached and unpinned once it stopped, and recorded in the node's status file.
import test from 'ava';
import { existsSync, rmSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cleanupRun, createNetns, exec, nsExec, nsName, nsSpawn, vethPair } from '../../src/lab/netns.js';
import { commitFiles, configFiles, git, tempDir } from '../reconcile-helpers.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { serveSnatAddress } from '../../src/bpf/dataplane/flow-state.js';
import { makeState } from '../lib/lb-state.js';
import { applyTo } from '../lib/converge.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const MAIN = join(root, 'src/cli/main.ts');
const NS = nsName('down');
const PEER = nsName('downp');
const PIN_ROOT = `/sys/fs/bpf/gitlb-test-${process.pid}-down`;

test.after.always(async () => {
  await cleanupRun();
  rmSync(PIN_ROOT, { recursive: true, force: true });
});

const gitlbIn = (ns: string, args: string[]) => nsExec(ns, [process.execPath, '--import', 'tsx', MAIN, ...args], { cwd: root, timeoutMs: 120_000 });
const xdpOn = async () => (await exec(['ip', '-n', NS, '-d', 'link', 'show', 'dev', 'eth0'])).stdout.includes('prog/xdp');

test('gitlb down detaches and unpins an lb node, refuses while gitlb run holds the link, records it in status', async (t) => {
  await createNetns(NS);
  await createNetns(PEER);
  await vethPair({ ns: NS, name: 'eth0', addrs: ['198.51.100.1/24'] }, { ns: PEER, name: 've1', addrs: ['198.51.100.2/24'] });
  const repo = await tempDir('down-repo');
  const cache = await tempDir('down-cache');
  try {
    await git(repo, 'init', '-q', '-b', 'main');
    await commitFiles(repo, configFiles(['lb-1'], ['198.51.100.2']), 'config');
    const common = ['--repo', repo, '--node', 'lb-1', '--role', 'lb', '--interface', 'eth0', '--xdp-mode', 'generic', '--pin-root', PIN_ROOT, '--cache-dir', cache];

    // A running daemon holds the link: down refuses and removes nothing.
    const daemon = nsSpawn(NS, [process.execPath, '--import', 'tsx', MAIN, 'run', ...common, '--poll', '60', '--no-health'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    daemon.stdout!.on('data', (d) => (log += d));
    daemon.stderr!.on('data', (d) => (log += d));
    for (let i = 0; i < 240 && !(await xdpOn()); i++) await new Promise((r) => setTimeout(r, 500));
    t.true(await xdpOn(), `XDP attached by gitlb run: ${log}`);
    const refused = await gitlbIn(NS, ['down', '--node', 'lb-1', '--pin-root', PIN_ROOT, '--cache-dir', cache]);
    t.is(refused.code, 1, refused.stdout + refused.stderr);
    t.regex(refused.stderr, /gitlb down: the data plane of lb-1 is in use by \S+\(\d+\): stop that process first.*nothing was removed/);
    t.true(existsSync(join(PIN_ROOT, 'lb-1', 'xdp_link')));
    t.true(await xdpOn());

    // Stopped daemon: the data plane stays (pinned, attached) ...
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
    t.true(await xdpOn(), 'stopping gitlb run leaves the data plane forwarding');
    // ... until gitlb down removes it.
    const down = await gitlbIn(NS, ['down', '--node', 'lb-1', '--pin-root', PIN_ROOT, '--cache-dir', cache, '--repo', repo]);
    t.is(down.code, 0, down.stdout + down.stderr);
    t.regex(down.stdout, /detached xdp_link \(xdp, id \d+\)/);
    t.regex(down.stdout, /unpinned \d+ objects under /);
    t.regex(down.stdout, /recorded in status\/lb-1\.yaml on gitlb-status/);
    t.false(await xdpOn(), 'no XDP program on the interface');
    t.false(existsSync(join(PIN_ROOT, 'lb-1')));
    const status = await git(repo, 'show', 'gitlb-status:status/lb-1.yaml');
    t.regex(status, /appliedRevision: null/);
    t.regex(status, /reason: Decommissioned/);
    t.regex(status, /result: decommissioned/);

    const again = await gitlbIn(NS, ['down', '--node', 'lb-1', '--pin-root', PIN_ROOT, '--cache-dir', cache]);
    t.is(again.code, 0);
    t.regex(again.stdout, /nothing to remove/);
  } finally {
    rmSync(repo, { recursive: true, force: true });
    rmSync(cache, { recursive: true, force: true });
  }
});

test('gitlb down removes the SNAT addresses of lost lb nodes this node served from its interface; without --interface it refuses and removes nothing', async (t) => {
  const ns = nsName('downs');
  await createNetns(ns);
  const SERVED = '198.51.100.77'; // a lost peer's snatAddress this node took over (src/reconciler/flows/snat-takeover.ts)
  const OWN = '198.51.100.5'; // the node's own address: never touched
  const peer = nsName('downsp');
  await createNetns(peer);
  await vethPair({ ns, name: 'eth0', addrs: [`${OWN}/24`] }, { ns: peer, name: 've1', addrs: ['198.51.100.6/24'] });
  const added = await exec(['ip', '-n', ns, 'addr', 'add', `${SERVED}/32`, 'dev', 'eth0']);
  t.is(added.code, 0, added.stderr);
  const pinRoot = `${PIN_ROOT}-snat`;
  const cache = await tempDir('down-snat-cache');
  // The data plane as a daemon that served SERVED left it: pinned, SERVED in lb_snat_served.
  const dp = await openLbDataPlane({ pinRoot: join(pinRoot, 'lb-2') });
  try {
    await applyTo(dp, makeState({ reals: { 1: '198.51.100.2' }, services: [{ id: 1, vip: '203.0.113.10', forwarding: 'dsr-l2', ring: [1, 1, 1, 1, 1, 1, 1] }] }));
    t.true(serveSnatAddress(dp.object()!, SERVED));
  } finally {
    dp.close();
  }
  const addrs = async () => (await exec(['ip', '-n', ns, '-br', 'addr', 'show', 'dev', 'eth0'])).stdout;
  try {
    const refused = await gitlbIn(ns, ['down', '--node', 'lb-2', '--pin-root', pinRoot, '--cache-dir', cache]);
    t.is(refused.code, 1, refused.stdout + refused.stderr);
    t.regex(refused.stderr, /serves the SNAT addresses of lost lb nodes \(198\.51\.100\.77\).*give --interface.*nothing was removed/);
    t.true(existsSync(join(pinRoot, 'lb-2', 'lb_snat_served')), 'pins kept');
    t.regex(await addrs(), /198\.51\.100\.77/);

    const down = await gitlbIn(ns, ['down', '--node', 'lb-2', '--interface', 'eth0', '--pin-root', pinRoot, '--cache-dir', cache]);
    t.is(down.code, 0, down.stdout + down.stderr);
    t.regex(down.stdout, /removed SNAT addresses served for lost lb nodes: 198\.51\.100\.77/);
    t.notRegex(await addrs(), /198\.51\.100\.77/, 'the served address left the interface');
    t.regex(await addrs(), /198\.51\.100\.5\b/, 'the node\'s own address stays');
    t.false(existsSync(join(pinRoot, 'lb-2')));
  } finally {
    rmSync(pinRoot, { recursive: true, force: true });
  }
});
