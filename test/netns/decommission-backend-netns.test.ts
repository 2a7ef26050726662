// Decommissioning a backend by commit: the running `gitlb run` daemon of a backend node (real TC programs on its
// eth0 in a test namespace, DSR VIP made local) sees a revision without its Node document, removes its VIPs,
// detaches and unpins, writes a final status, and never reverts. The config comes from a local repository.
import test from 'ava';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createNetns, cleanupRun, nsName, nsExec, nsSpawn, run, stopChild } from '../../src/lab/netns.js';
import { parseStatus } from '../../src/reconciler/status/status-doc.js';
import { getCondition } from '../../src/reconciler/status/conditions.js';
import { git, tempDir, commitFiles, configFiles } from '../reconcile-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const ATTACH = fileURLToPath(new URL('../../src/bpf/attach.ts', import.meta.url));
const PIN = `/sys/fs/bpf/gitlb-test-${process.pid}-decom`;
const VIP = '203.0.113.10';
const BE = '198.51.100.10';

test.after.always(async () => {
  await cleanupRun();
  rmSync(PIN, { recursive: true, force: true });
});

const backendYaml = `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: be-1 }\nspec:\n  role: backend\n  interface: eth0\n  addresses: [${BE}]\n`;

async function until(what: string, pred: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('a backend no longer named by the config removes its VIPs and pins, reports Decommissioned, reverts nothing', async (t) => {
  const ns = nsName('decom');
  await createNetns(ns);
  await run(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  await run(['ip', '-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p']);
  await run(['ip', '-n', ns, 'addr', 'add', `${BE}/24`, 'dev', 'eth0']);
  await run(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
  await run(['ip', '-n', ns, 'link', 'set', 'eth0p', 'up']);
  const repo = await tempDir('decom');
  t.teardown(() => rmSync(repo, { recursive: true, force: true }));
  await git(repo, 'init', '-q', '-b', 'main');
  await commitFiles(repo, { ...configFiles(['lb-1'], [BE], { policy: 'auto' }), 'nodes/be-1.yaml': backendYaml }, 'lb-1 and be-1');

  const daemon = nsSpawn(ns, [process.execPath, '--import', 'tsx', MAIN, 'run', '--repo', repo, '--node', 'be-1', '--interface', 'eth0',
    '--pin-root', PIN, '--cache-dir', join(repo, '.cache-be-1'), '--poll', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  daemon.stdout!.on('data', (b: Buffer) => (log += b.toString()));
  daemon.stderr!.on('data', (b: Buffer) => (log += b.toString()));
  // The programs on eth0's TC ingress hook, asked from inside the namespace with the project's own query.
  const tcPrograms = async () =>
    (await nsExec(ns, [process.execPath, '--import', 'tsx', '-e', `import(${JSON.stringify(ATTACH)}).then((m) => console.log(JSON.stringify(m.queryTc('eth0', 'ingress'))))`])).stdout;
  const vipLocal = async () => (await nsExec(ns, ['ip', '-o', 'addr', 'show'])).stdout.includes(` ${VIP}/`);
  try {
    await until('the VIP made local', vipLocal);
    t.true(existsSync(join(PIN, 'be-1')), 'pins exist while serving');
    t.regex(await tcPrograms(), /backend_ingres/, 'TC program attached');

    const gone = await commitFiles(repo, { 'nodes/be-1.yaml': null }, 'decommission be-1');
    await until('decommissioned', async () => /decommission/.test(log) && !(await vipLocal()) && !existsSync(join(PIN, 'be-1')));
    t.notRegex(await tcPrograms(), /backend_ingres/, 'TC program detached');
    // A few more polls: still decommissioned, nothing pushed.
    await new Promise((r) => setTimeout(r, 2500));
    t.is(await git(repo, 'rev-parse', 'main'), gone, 'no revert');
    t.false(/revert/i.test(log), log);
    const s = parseStatus(await git(repo, 'show', 'gitlb-status:status/be-1.yaml'));
    t.is(s.lastAttempt?.result, 'decommissioned');
    t.is(s.role, 'backend', 'the decommissioned node says the role it served, not lb');
    t.is(s.appliedRevision, gone);
    t.is(getCondition(s.conditions, 'Ready')?.reason, 'Decommissioned');
  } finally {
    await stopChild(daemon, 5000);
  }
});
