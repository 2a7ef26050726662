// `gitlb down --repo` and `gitlb verify --repo URL` against a slow Git server: `--git-timeout` bounds each fetch,
// deepen and push (as in `gitlb status` and `history`, status-git-timeout.test.ts), and a longer one lets a slow
// server answer. The server is git's own http-backend behind a proxy that holds chosen ref advertisements.
// Serial: gitlbInProcess swaps the process's stdout and stderr writers.
import test from 'ava';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gitlbInProcess as gitlb } from '../helpers/cli-repo.js';
import { slowProxy } from '../helpers/slow-git-proxy.js';
import { commitFiles, configFiles, git, servedRepo, tempDir } from '../reconcile-helpers.js';
import { sshKey, signedCommit, signerLine } from '../verify-helpers.js';

test.serial('down --repo: --git-timeout bounds the fetches and the push of the status write; a longer one records it', async (t) => {
  const r = await servedRepo();
  const proxy = await slowProxy(r.server.url);
  const dir = await tempDir('down-timeout');
  try {
    await commitFiles(r.work, configFiles(['lb-1'], ['198.51.100.2']), 'config');
    await git(r.work, 'push', '-q', 'origin', 'main');
    const bare = join(r.root, 'config.git');
    const statusTip = () => git(bare, 'rev-parse', '--verify', '-q', 'refs/heads/gitlb-status').catch(() => null);
    // lb-1 has no data plane under this pin root: down removes nothing and goes straight to the status write.
    // --bird-socket off: no BIRD here, and down would otherwise fetch the config first to find lb-1's BGP settings.
    const down = (timeout: string) =>
      gitlb(['down', '--node', 'lb-1', '--pin-root', join(dir, 'pins'), '--cache-dir', join(dir, 'cache'), '--repo', `${proxy.url}/config.git`, '--git-timeout', timeout, '--bird-socket', 'off']);

    // The first fetch (the config branch) held 20 s: a 3 s deadline fails there, nothing is written.
    proxy.hold((n) => n === 1, 20_000);
    const short = await down('3');
    t.is(short.code, 1, short.stdout + short.stderr);
    t.regex(short.stdout, /lb-1 has no data plane under .*; nothing to remove/);
    t.regex(short.stderr, /gitlb down: fetch of main from http:\/\/127\.0\.0\.1:\d+\/config\.git timed out after 3000 ms/);
    t.notRegex(short.stdout, /recorded in status/);
    t.is(await statusTip(), null);

    // Only the pushes held: the push has the same deadline (each of the writer's retries times out).
    proxy.hold((_, service) => service === 'git-receive-pack', 20_000);
    const push = await down('3');
    t.is(push.code, 1, push.stdout + push.stderr);
    t.regex(push.stderr, /status push for lb-1 to gitlb-status failed: push to gitlb-status of http:\/\/127\.0\.0\.1:\d+\/config\.git timed out after 3000 ms/);
    t.is(await statusTip(), null);

    // The config fetch and the push held 4 s, longer than the deadline above, with a 60 s one: the removal is recorded.
    proxy.hold((n, service) => n === 1 || service === 'git-receive-pack', 4000);
    const long = await down('60');
    t.is(long.code, 0, long.stdout + long.stderr);
    t.regex(long.stdout, /recorded in status\/lb-1\.yaml on gitlb-status/);
    const pushes = proxy.fetches;
    t.true(pushes >= 4, `config, status read, status write fetch and push: ${pushes} advertisements`);
    const status = await git(bare, 'show', 'gitlb-status:status/lb-1.yaml');
    t.regex(status, /reason: Decommissioned/);
    t.regex(status, /appliedRevision: null/);

    // The option is parsed as in status and history.
    const bad = await down('0');
    t.is(bad.code, 2);
    t.regex(bad.stderr, /'0' is not a number of seconds between 0\.1 and 600/);
  } finally {
    await proxy.close();
    await r.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('verify --repo URL: --git-timeout bounds the fetch and the deepening to BASE; a longer one verifies the range', async (t) => {
  const r = await servedRepo();
  const proxy = await slowProxy(r.server.url);
  const dir = await tempDir('verify-timeout');
  try {
    const key = await sshKey(dir, 'alice');
    const trust = join(dir, 'trust');
    writeFileSync(trust, signerLine('alice@example.com', key) + '\n');
    const base = await signedCommit(r.work, configFiles(['lb-1'], ['198.51.100.2']), 'config', { ssh: key });
    const mid = await signedCommit(r.work, { 'README.md': 'one\n' }, 'readme', { ssh: key });
    const tip = await signedCommit(r.work, { 'README.md': 'two\n' }, 'readme again', { ssh: key });
    await git(r.work, 'push', '-q', 'origin', 'main');
    const verify = (timeout: string) =>
      gitlb(['verify', '--repo', `${proxy.url}/config.git`, '--range', `${base}..main`, '--trust', trust, '--git-timeout', timeout]);

    // The first fetch (depth 1) held 20 s: a 3 s deadline fails there.
    proxy.hold((n) => n === 1, 20_000);
    const first = await verify('3');
    t.is(first.code, 1, first.stdout + first.stderr);
    t.regex(first.stderr, /gitlb verify: fetch of main from http:\/\/127\.0\.0\.1:\d+\/config\.git timed out after 3000 ms/);
    t.is(first.stdout, '');

    // Only the deepening (BASE is two commits below the shallow tip) held: it has the same deadline.
    proxy.hold((n) => n === 2, 20_000);
    const deepen = await verify('3');
    t.is(deepen.code, 1, deepen.stdout + deepen.stderr);
    t.regex(deepen.stderr, /gitlb verify: deepening main from http:\/\/127\.0\.0\.1:\d+\/config\.git timed out after 3000 ms/);
    t.is(deepen.stdout, '');

    // The fetch and the deepening held 4 s, longer than the deadline above, with a 60 s one: the range is
    // fetched, deepened and verified.
    proxy.hold((n) => n <= 2, 4000);
    const long = await verify('60');
    t.is(long.code, 0, long.stdout + long.stderr);
    t.regex(long.stdout, new RegExp(`ok +commit ${mid.slice(0, 12)} [\\s\\S]*ok +commit ${tip.slice(0, 12)} `));
    t.regex(long.stdout, /^2 commit\(s\) verified$/m);
    t.true(proxy.fetches >= 2, `a fetch and at least one deepening: ${proxy.fetches}`);
  } finally {
    await proxy.close();
    await r.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('--help: status, history, verify and down show one --git-timeout (down bounds its push too)', async (t) => {
  for (const [cmd, what] of [['status', 'fetch'], ['history', 'fetch'], ['verify', 'fetch'], ['down', 'fetch and push']] as const) {
    const help = (await gitlb([cmd, '--help'])).stdout.replace(/\s+/g, ' ');
    t.regex(help, new RegExp(`--git-timeout <seconds> deadline of each Git ${what} \\(a slow Git server needs more\\) \\(default: 10\\)`), cmd);
  }
});

test.serial('--git-timeout is one option in every command that reads Git: seconds, with or without "s", same bounds', async (t) => {
  for (const cmd of ['status', 'history', 'verify', 'down', 'doctor']) {
    const help = await gitlb([cmd, '--help']);
    t.regex(help.stdout, /--git-timeout <seconds>\s+deadline of each Git fetch/, cmd);
    t.regex(help.stdout, /\(default: 10\)/, cmd);
  }
  // doctor used to take a duration ("5s"); both spellings are seconds now, and its bounds are the others'
  const dir = await tempDir('doctor-timeout');
  try {
    const args = (v: string) => ['doctor', '--pin-root', join(dir, 'pins'), '--repo', join(dir, 'none'), '--git-timeout', v];
    for (const v of ['5', '5s']) t.not((await gitlb(args(v))).code, 2, v);
    const bad = await gitlb(args('0'));
    t.is(bad.code, 2);
    t.regex(bad.stderr, /'0' is not a number of seconds between 0\.1 and 600/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
