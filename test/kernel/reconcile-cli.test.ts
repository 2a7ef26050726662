// The commands as a user runs them: `gitlb run --once` against a real Git server and the real LB data plane,
// then `gitlb status` and `gitlb history` reading the status branch; a local repository path works too.
import test from 'ava';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runCli } from '../../src/cli/main.js';
import { git, servedRepo, commitFiles, tempDir, configFiles, serviceYaml } from '../reconcile-helpers.js';

const execFileP = promisify(execFile);
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-cli`;

async function gitlb(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileP(process.execPath, ['--import', 'tsx', MAIN, ...args], { env: { ...process.env, GITLB_GIT_TOKEN: 'tok-should-never-show' } });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

test.after.always(() => rmSync(PIN_BASE, { recursive: true, force: true }));

test('gitlb run --once, then gitlb status and gitlb history over HTTP', async (t) => {
  const repo = await servedRepo();
  const cache1 = await tempDir('cli1');
  const cache2 = await tempDir('cli2');
  try {
    const c1 = await commitFiles(repo.work, configFiles(['lb-1', 'lb-2'], ['198.51.100.10', '198.51.100.11']), 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const common = ['--repo', repo.url, '--pin-root', PIN_BASE, '--once', '--role', 'lb'];
    const r1 = await gitlb('run', ...common, '--node', 'lb-1', '--cache-dir', cache1);
    t.is(r1.code, 0, r1.stderr);
    t.regex(r1.stdout, new RegExp(`applied ${c1}`));
    t.false((r1.stdout + r1.stderr).includes('tok-should-never-show'));
    const r2 = await gitlb('run', ...common, '--node', 'lb-2', '--cache-dir', cache2);
    t.is(r2.code, 0, r2.stderr);

    const bad = await commitFiles(repo.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['bad']) }, 'bad');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const r3 = await gitlb('run', ...common, '--node', 'lb-1', '--cache-dir', cache1);
    t.is(r3.code, 1, 'a failed revision exits 1');
    t.regex(r3.stdout, new RegExp(`applied ${c1}; last attempt failed: services/web.yaml:\\d+:\\d+`));

    const st = await gitlb('status', '--repo', repo.url);
    t.is(st.code, 1, `status exits 1 while a node reports a failure: ${st.stderr}${st.stdout}`);
    t.regex(st.stdout, /NODE\s+ROLE\s+XDP\s+APPLIED\s+BRANCH\s+UPDATED\s+DIGESTS\s+READY\s+UNHEALTHY\s+LAST ERROR/);
    t.regex(st.stdout, new RegExp(`lb-1\\s+lb\\s+\\S+\\s+${c1.slice(0, 12)}\\s+behind \\d+s\\s+\\d+s ago\\s+agree\\s+\\S+\\s+0\\s+${bad.slice(0, 12)} validate: services/web.yaml`));
    t.regex(st.stdout, new RegExp(`lb-2\\s+lb\\s+\\S+\\s+${c1.slice(0, 12)}\\s+behind \\d+s\\s+\\d+s ago\\s+agree\\s+\\S+\\s+0\\s*\\n`));
    t.regex(st.stdout, /2 node\(s\); head \w{12} .*; table digests agree across nodes/);

    const h = await gitlb('history', '--repo', repo.url);
    t.is(h.code, 0, h.stderr);
    const rows = h.stdout.trim().split('\n').slice(1);
    t.is(rows.length, 2, h.stdout);
    t.regex(rows[0]!, new RegExp(`lb-1\\s+${c1.slice(0, 12)}`));
    t.regex(rows[1]!, new RegExp(`lb-2\\s+${c1.slice(0, 12)}`));
  } finally {
    await repo.cleanup();
    rmSync(cache1, { recursive: true, force: true });
    rmSync(cache2, { recursive: true, force: true });
  }
});

test('gitlb run --once on a local repository path; usage errors exit 2', async (t) => {
  const dir = await tempDir('cli-local');
  const cache = await tempDir('cli-local-cache');
  try {
    await git(dir, 'init', '-q', '-b', 'main');
    const c1 = await commitFiles(dir, configFiles(['lb-1'], ['198.51.100.10']), 'initial');
    const r = await gitlb('run', '--repo', dir, '--node', 'lb-1', '--pin-root', PIN_BASE + '-local', '--cache-dir', cache, '--once');
    t.is(r.code, 0, r.stderr);
    t.regex(r.stdout, new RegExp(`applied ${c1}`));
    t.regex(await git(dir, 'show', 'gitlb-status:status/lb-1.yaml'), new RegExp(`appliedRevision: ${c1}`));
    t.is(await git(dir, 'status', '--porcelain'), '', 'working tree untouched');
    // Usage errors, in process (same dispatcher, no extra node start-up).
    const stderr = process.stderr.write;
    let err = '';
    process.stderr.write = ((s: string) => ((err += s), true)) as typeof process.stderr.write;
    try {
      t.is(await runCli(['run', '--node', 'x']), 2);
      t.is(await runCli(['run', '--repo', dir, '--node', 'x', '--poll', 'sometimes']), 2);
    } finally {
      process.stderr.write = stderr;
    }
    t.regex(err, /gitlb run: required option '--repo/);
    t.regex(err, /schedule 'sometimes'/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(cache, { recursive: true, force: true });
    rmSync(PIN_BASE + '-local', { recursive: true, force: true });
  }
});

test('gitlb run as a daemon: polls, applies a new commit, stops cleanly on SIGTERM', async (t) => {
  const repo = await servedRepo();
  const cache = await tempDir('cli-daemon');
  const pinRoot = `${PIN_BASE}-daemon`;
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'run', '--repo', repo.url, '--node', 'lb-1', '--pin-root', pinRoot, '--cache-dir', cache, '--poll', '1'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const until = async (re: RegExp, ms: number) => {
    const end = Date.now() + ms;
    while (!re.test(out) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
    return re.test(out);
  };
  try {
    const c1 = await commitFiles(repo.work, configFiles(['lb-1'], ['198.51.100.10', '198.51.100.11']), 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    t.true(await until(new RegExp(`applied ${c1.slice(0, 12)}`), 60_000), out);
    const c2 = await commitFiles(repo.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.10']) }, 'one real');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    t.true(await until(new RegExp(`applied ${c2.slice(0, 12)} \\(poll`), 60_000), out);
    child.kill('SIGTERM');
    t.is(await exited, 0, out);
    await git(repo.work, 'fetch', '-q', 'origin', 'gitlb-status');
    t.regex(await git(repo.work, 'show', 'FETCH_HEAD:status/lb-1.yaml'), new RegExp(`appliedRevision: ${c2}`));
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
    rmSync(pinRoot, { recursive: true, force: true });
  }
});
