// `--interface` given at start wins over the attachment a previous run pinned, and an `--interface` that differs
// from the Node document is refused at start (exit 2) instead of failing every apply. Real `gitlb run --once` in a
// test namespace with two veth interfaces; the config comes from a local repository.
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createNetns, cleanupRun, nsName, nsExec, run } from '../../src/lab/netns.js';
import { git, tempDir, commitFiles, configFiles, lbNodeYaml } from '../reconcile-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const PIN = `/sys/fs/bpf/gitlb-test-${process.pid}-flags`;

test.after.always(async () => {
  await cleanupRun();
  rmSync(PIN, { recursive: true, force: true });
});

test('a pinned attachment on another interface is moved to --interface; a conflicting --interface is refused at start', async (t) => {
  const ns = nsName('flags');
  await createNetns(ns);
  for (const i of ['eth0', 'eth1']) {
    await run(['ip', '-n', ns, 'link', 'add', i, 'type', 'veth', 'peer', 'name', `${i}p`]);
    await run(['ip', '-n', ns, 'link', 'set', i, 'up']);
    await run(['ip', '-n', ns, 'link', 'set', `${i}p`, 'up']);
  }
  const repo = await tempDir('flags');
  t.teardown(() => rmSync(repo, { recursive: true, force: true }));
  await git(repo, 'init', '-q', '-b', 'main');
  await commitFiles(repo, configFiles(['lb-1'], ['198.51.100.10', '198.51.100.11']), 'on eth0');
  const gitlb = (iface: string) =>
    nsExec(ns, [process.execPath, '--import', 'tsx', MAIN, 'run', '--once', '--repo', repo, '--node', 'lb-1', '--interface', iface,
      '--xdp-mode', 'generic', '--pin-root', PIN, '--cache-dir', join(repo, '.cache'), '--no-status'], { timeoutMs: 60_000 });
  const xdpOn = async (iface: string) => /xdpgeneric/.test((await nsExec(ns, ['ip', '-d', 'link', 'show', iface])).stdout);

  const r1 = await gitlb('eth0');
  t.is(r1.code, 0, r1.stderr);
  t.true(await xdpOn('eth0'));
  t.false(await xdpOn('eth1'));

  // The Node moves to eth1; the next start says so with --interface eth1.
  await commitFiles(repo, { 'nodes/lb-1.yaml': lbNodeYaml('lb-1').replace('interface: eth0', 'interface: eth1') }, 'to eth1');
  const r2 = await gitlb('eth1');
  t.is(r2.code, 0, r2.stderr);
  t.regex(r2.stderr + r2.stdout, /pinned attachment was on ifindex \d+, --interface is eth1/);
  t.false(await xdpOn('eth0'), 'the old attachment is gone');
  t.true(await xdpOn('eth1'));

  // --interface eth0 while the Node document says eth1: refused at start, nothing touched.
  const r3 = await gitlb('eth0');
  t.is(r3.code, 2, r3.stderr);
  t.regex(r3.stderr, /--interface eth0 differs from the Node document 'lb-1'.*interface: eth1/);
  t.true(await xdpOn('eth1'), 'the attachment stays');
});
