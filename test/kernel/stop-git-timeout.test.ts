// Stopping `gitlb run` while the Git server hangs: SIGTERM aborts the fetch in flight, starts no retry, makes one
// last status write bounded by LAST_STATUS_WRITE_MS and exits, far inside systemd's TimeoutStopSec (30 s). With
// Git fine, the stop still writes its last status. A real daemon process against git http-backend behind a proxy
// that holds chosen requests; the bound asserted is one on a hang (the fetch is held 60 s), not a figure.
import test from 'ava';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { git, servedRepo, commitFiles, tempDir, configFiles } from '../reconcile-helpers.js';
import { slowProxy } from '../helpers/slow-git-proxy.js';
import { readFileSync } from 'node:fs';
import { LAST_STATUS_WRITE_MS } from '../../src/reconciler/daemon.js';
import { parseStatus } from '../../src/reconciler/status/status-doc.js';
import { gitlbInProcess as gitlbCli } from '../helpers/cli-repo.js';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-stop`;

test.after.always(() => {
  rmSync(`${PIN_BASE}-held`, { recursive: true, force: true });
  rmSync(`${PIN_BASE}-fine`, { recursive: true, force: true });
});

async function daemon(repoUrl: string, pinRoot: string, cache: string) {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'run', '--repo', repoUrl, '--node', 'lb-1', '--role', 'lb', '--pin-root', pinRoot,
    '--cache-dir', cache, '--poll', '1', '--git-timeout', '60', '--no-health', '--metrics', 'off'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const until = async (ok: () => boolean, ms: number) => {
    const end = Date.now() + ms;
    while (!ok() && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
    return ok();
  };
  return { child, exited, log: () => err, until };
}

test('SIGTERM while a fetch is held: the fetch is aborted, no retry, one bounded last status write, exit 0', async (t) => {
  const repo = await servedRepo();
  const proxy = await slowProxy(repo.server.url);
  const cache = await tempDir('stop-held');
  const d = await daemon(repo.url.replace(repo.server.url, proxy.url), `${PIN_BASE}-held`, cache);
  try {
    const c1 = await commitFiles(repo.work, configFiles(['lb-1'], ['198.51.100.10', '198.51.100.11']), 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    t.true(await d.until(() => d.log().includes(`applied ${c1.slice(0, 12)}`), 60_000), d.log());
    // The status of that apply is written before the server starts hanging.
    const end = Date.now() + 30_000;
    while (!(await git(repo.work, 'ls-remote', 'origin', 'gitlb-status')) && Date.now() < end) await new Promise((r) => setTimeout(r, 200));
    // From now on every request the daemon makes (the next poll's fetch, the last status write) is held 60 s.
    proxy.hold(() => true, 60_000);
    t.true(await d.until(() => proxy.fetches >= 1, 30_000), 'a poll fetch is in flight');
    const t0 = Date.now();
    d.child.kill('SIGTERM');
    const code = await Promise.race([d.exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 15_000))]);
    t.is(code, 0, `exited within 15 s of SIGTERM (took ${Date.now() - t0} ms)\n${d.log()}`);
    t.regex(d.log(), /stopping on SIGTERM/);
    t.regex(d.log(), /last status write failed: .*timed out after 5000 ms/);
    t.notRegex(d.log(), /fetch failed/, 'an aborted fetch is no failure to record');
    t.is(proxy.fetches, 2, 'the held poll fetch and the one last status write, no retry');
  } finally {
    if (d.child.exitCode === null) d.child.kill('SIGKILL');
    await proxy.close();
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});

test('SIGTERM with Git fine: the last status write lands on the status branch', async (t) => {
  const repo = await servedRepo();
  const cache = await tempDir('stop-fine');
  const d = await daemon(repo.url, `${PIN_BASE}-fine`, cache);
  try {
    const c1 = await commitFiles(repo.work, configFiles(['lb-1'], ['198.51.100.10']), 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    t.true(await d.until(() => d.log().includes(`applied ${c1.slice(0, 12)}`), 60_000), d.log());
    // The apply's own status write lands first (else the last write is the one that records the apply).
    const end = Date.now() + 30_000;
    while (!(await git(repo.work, 'ls-remote', 'origin', 'gitlb-status')) && Date.now() < end) await new Promise((r) => setTimeout(r, 200));
    d.child.kill('SIGTERM');
    t.is(await d.exited, 0, d.log());
    await git(repo.work, 'fetch', '-q', 'origin', 'gitlb-status');
    t.regex(await git(repo.work, 'log', '-1', '--format=%B', 'FETCH_HEAD'), /trigger: stopping on SIGTERM/);
    const file = await git(repo.work, 'show', 'FETCH_HEAD:status/lb-1.yaml');
    t.regex(file, new RegExp(`appliedRevision: ${c1}`));
    // The last write says Stopped: Ready=False, within the stop budget, and gitlb status shows it, not Ready.
    const ready = parseStatus(file).conditions?.find((c) => c.type === 'Ready');
    t.is(ready?.status, 'False');
    t.is(ready?.reason, 'Stopped');
    t.is(await git(repo.work, 'log', '-1', '--format=%s', 'FETCH_HEAD'), `status(lb-1): stopping on SIGTERM, serving ${c1.slice(0, 12)}`);
    const st = await gitlbCli(['status', '--repo', repo.url]);
    t.is(st.code, 1, st.stdout);
    t.regex(st.stdout, new RegExp(`lb-1\\s+lb\\s+\\S+\\s+${c1.slice(0, 12)}\\s+STOPPED\\s+\\d+s ago\\s+\\S+\\s+False/Stopped`));
    t.regex(st.stdout, /lb-1: stopped: gitlb run stopped \(stopping on SIGTERM\)/);
  } finally {
    if (d.child.exitCode === null) d.child.kill('SIGKILL');
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});

test('the last status write bound leaves most of the unit\'s TimeoutStopSec for the rest of the stop', (t) => {
  const unit = readFileSync(fileURLToPath(new URL('../../deploy/systemd/gitlb.service', import.meta.url)), 'utf8');
  const stopSec = Number(/^TimeoutStopSec=(\d+)$/m.exec(unit)?.[1]);
  t.true(stopSec >= 20, unit);
  t.true(LAST_STATUS_WRITE_MS * 3 <= stopSec * 1000, `${LAST_STATUS_WRITE_MS} ms vs TimeoutStopSec=${stopSec}`);
});
