// The README's own `gitlb run` line — no --poll, no --webhook — follows the branch: a commit pushed after the
// daemon started is applied without any other trigger (the default 30 s poll). Run as written, inside a test
// namespace holding an `eth0` and the project's Git server; only isolation flags (pin root, cache dir) are added.
import test from 'ava';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createNetns, cleanupRun, nsName, nsSpawn, run, stopChild, waitForPort } from '../../src/lab/netns.js';
import { LineTap, logMessage } from '../health-lab.js';
import { git, tempDir, commitFiles, configFiles } from '../reconcile-helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PIN = `/sys/fs/bpf/gitlb-test-${process.pid}-readme`;

test.after.always(async () => {
  await cleanupRun();
  rmSync(PIN, { recursive: true, force: true });
});

test('the README `gitlb run` line polls the branch by default and applies a new commit', async (t) => {
  // The command as a shell would run it: a trailing `# comment` is not part of it.
  const line = /^bin\/gitlb (run --repo URL [^\n]*)$/m.exec(readFileSync(join(ROOT, 'README.md'), 'utf8'))?.[1]
    ?.replace(/\s+#.*$/, '');
  t.truthy(line, 'README shows a gitlb run line');
  t.false(/--poll|--webhook/.test(line!), `the README line relies on the defaults: ${line}`);

  const ns = nsName('readme');
  await createNetns(ns);
  await run(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  await run(['ip', '-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p']);
  await run(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
  await run(['ip', '-n', ns, 'link', 'set', 'eth0p', 'up']);

  const root = await tempDir('readme');
  const work = join(root, 'work');
  await git(root, 'init', '-q', '--bare', '-b', 'main', join(root, 'config.git'));
  await git(join(root, 'config.git'), 'config', 'http.receivepack', 'true');
  await git(root, 'clone', '-q', join(root, 'config.git'), work);
  const reals = ['198.51.100.10', '198.51.100.11'];
  await commitFiles(work, configFiles(['lb-1'], reals), 'initial');
  await git(work, 'push', '-q', 'origin', 'main');

  const tsx = [process.execPath, '--import', 'tsx'];
  const server = nsSpawn(ns, [...tsx, join(ROOT, 'src/lab/servers/git-server.ts'), '--root', root, '--host', '127.0.0.1', '--port', '8080'], { stdio: 'ignore' });
  await waitForPort(ns, 8080);
  const args = line!.split(/\s+/).map((a) => (a === 'URL' ? 'http://127.0.0.1:8080/config.git' : a));
  const daemon = nsSpawn(ns, [...tsx, join(ROOT, 'src/cli/main.ts'), ...args, '--pin-root', PIN, '--cache-dir', join(root, 'cache')], { stdio: ['ignore', 'inherit', 'pipe'] });
  const out = new LineTap(daemon, 'stderr');
  try {
    await out.next((l) => /^applied [0-9a-f]{12}/.test(logMessage(l)), 60_000, 'first apply');
    const next = await commitFiles(work, configFiles(['lb-1'], [...reals, '198.51.100.12']), 'one more real');
    await git(work, 'push', '-q', 'origin', 'main');
    const pushedAt = Date.now();
    // The default poll is 30 s plus up to 10 % jitter: the new commit must be applied within one period or so.
    await out.next((l) => logMessage(l).startsWith(`applied ${next.slice(0, 12)}`), 45_000, 'the pushed commit applied by the poll');
    t.log(`pushed -> applied by the default poll after ${Date.now() - pushedAt} ms`);
  } finally {
    await stopChild(daemon, 5000);
    await stopChild(server, 2000);
    rmSync(root, { recursive: true, force: true });
  }
});
