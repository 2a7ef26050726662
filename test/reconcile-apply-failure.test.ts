// A revision whose apply fails in the kernel (the rings need more room than the pinned ring map has: E2BIG):
// the previous state stays intact, the failure is recorded, retries follow with exponential backoff, and a newer
// commit supersedes the failing one. Real git http-backend, real BPF maps (not attached to any interface).
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openLbDataPlane } from '../src/bpf/dataplane/index.js';
import { HttpRemote } from '../src/reconciler/source/git-remote.js';
import { Reconciler } from '../src/reconciler/reconcile.js';
import { git, servedRepo, commitFiles, tempDir, configFiles, serviceYaml } from './reconcile-helpers.js';

const PIN = `/sys/fs/bpf/gitlb-test-${process.pid}-applyfail`;
const quiet = { info: () => {}, warn: () => {} };

test('apply failure: state intact, recorded, retried with backoff, superseded by a newer commit', async (t) => {
  const repo = await servedRepo();
  const cacheDir = await tempDir('applyfail');
  const dp = await openLbDataPlane({ pinRoot: PIN });
  try {
    const reals = ['198.51.100.10', '198.51.100.11'];
    const good = configFiles(['lb-1'], reals, { tableSize: 251 });
    const c1 = await commitFiles(repo.work, good, 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    let now = Date.parse('2026-11-29T10:00:00Z');
    const r = new Reconciler({
      node: 'lb-1',
      branch: 'main',
      remote: new HttpRemote(repo.url, join(cacheDir, 'git')),
      dataPlane: dp,
      retry: { baseMs: 1000, maxMs: 8000 },
      clock: () => new Date(now),
      log: quiet,
    });
    t.is((await r.reconcile('test')).kind, 'applied');
    const before = await dp.readLive();

    // Nine more services of 131071 entries each: two ring regions apiece exceed the 2^21-entry ring map.
    const big: Record<string, string> = { ...good };
    for (let i = 0; i < 9; i++) big[`services/big${i}.yaml`] = serviceYaml(`big${i}`, `203.0.113.${20 + i}`, reals, { tableSize: 131071 });
    const c2 = await commitFiles(repo.work, big, 'nine large services');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const o2 = await r.reconcile('test');
    t.is(o2.kind, 'failed', JSON.stringify(o2));
    if (o2.kind === 'failed') {
      t.is(o2.stage, 'apply');
      t.regex(o2.reason, /ring|E2BIG/i);
    }
    t.is(r.appliedRevision, c1, 'the last good revision is still the one applied');
    t.deepEqual(await dp.readLive(), before, 'the failed apply left the previous state intact');

    // Backoff: before the retry time nothing is attempted; after it, the apply is tried again and the delay doubles.
    const firstRetry = r.nextRetryAt!.getTime();
    t.is(firstRetry - now, 1000);
    t.is((await r.reconcile('too early')).kind, 'waiting');
    now = firstRetry;
    t.is((await r.reconcile('retry')).kind, 'failed');
    t.is(r.nextRetryAt!.getTime() - now, 2000, 'the second delay is twice the first');

    // A newer commit (the large services removed again) supersedes the failing one at once, without waiting.
    const back: Record<string, string | null> = { 'services/web.yaml': serviceYaml('web', '203.0.113.10', [...reals, '198.51.100.12'], { tableSize: 251 }) };
    for (let i = 0; i < 9; i++) back[`services/big${i}.yaml`] = null; // deleted
    const c3 = await commitFiles(repo.work, back, 'back to one service, one more real');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const o3 = await r.reconcile('newer commit');
    t.is(o3.kind, 'applied', JSON.stringify(o3));
    t.is(r.appliedRevision, c3);
    t.not(r.appliedRevision, c2);
    t.is(r.nextRetryAt, null, 'nothing left to retry');
    t.is((await dp.readLive()).reals.length, 3);
  } finally {
    dp.close();
    await repo.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
    rmSync(PIN, { recursive: true, force: true });
  }
});
