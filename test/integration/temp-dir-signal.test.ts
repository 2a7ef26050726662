// Ctrl-C (SIGINT) or SIGTERM while `gitlb status` / `gitlb history` wait on a Git server: the temporary Git cache
// (/tmp/gitlb-status-XXXX) is removed and the process exits 130 / 143 (src/reconciler/temp/temp-dirs.ts). A real
// `gitlb` process against git http-backend behind a proxy that holds the fetch, with a private TMPDIR.
import test from 'ava';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGitHttpServer } from '../../src/lab/git-http-server.js';
import { git } from '../helpers/cli-repo.js';
import { slowProxy } from '../helpers/slow-git-proxy.js';

const MAIN = join(import.meta.dirname, '..', '..', 'src', 'cli', 'main.ts');

async function interrupted(t: import('ava').ExecutionContext, args: string[], signal: 'SIGINT' | 'SIGTERM', tmp: string) {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], { env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, sig) => resolve({ code, signal: sig })));
  // Wait (bounded) until the command made its cache: it is then inside the held fetch.
  const cache = () => readdirSync(tmp).filter((f) => f.startsWith('gitlb-status-'));
  for (let i = 0; i < 1200 && cache().length === 0 && child.exitCode === null; i++) await sleep(250);
  t.is(cache().length, 1, `the cache exists while the fetch is held (${stderr})`);
  child.kill(signal);
  const r = await exited;
  t.deepEqual(r, { code: signal === 'SIGINT' ? 130 : 143, signal: null }, stderr);
  t.deepEqual(cache(), [], 'the temporary Git cache was removed');
}

test('SIGINT during status and SIGTERM during history remove the temporary Git cache and exit 130 / 143', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-sig-'));
  mkdirSync(join(dir, 'root'));
  mkdirSync(join(dir, 'tmp'));
  const work = join(dir, 'work');
  mkdirSync(work);
  await git(work, 'init', '-q', '-b', 'main');
  writeFileSync(join(work, 'a.yaml'), 'x: 1\n');
  await git(work, 'add', '-A');
  await git(work, 'commit', '-qm', 'one');
  await git(dir, 'clone', '-q', '--bare', work, join(dir, 'root', 'config.git'));
  const served = await startGitHttpServer({ projectRoot: join(dir, 'root'), receivePack: false });
  const proxy = await slowProxy(served.url);
  try {
    const repo = `${proxy.url}/config.git`;
    proxy.hold(() => true, 600_000);
    await interrupted(t, ['status', '--repo', repo, '--git-timeout', '600'], 'SIGINT', join(dir, 'tmp'));
    await interrupted(t, ['history', '--repo', repo, '--git-timeout', '600'], 'SIGTERM', join(dir, 'tmp'));
  } finally {
    await proxy.close();
    await served.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
