// Capacity is not an apply failure: nine services of 131071 entries each (more than the old fixed ring map held)
// apply to a running node. A revision whose apply does fail in the kernel (another writer fills lb_vips to its
// capacity between the plan and the apply, so the kernel refuses the new listener with E2BIG; entries present at
// plan time would be planned away as drift, removals first): the previous state stays intact, the failure is
// recorded, retries follow with exponential backoff, and a newer commit supersedes the failing one.
// Real git http-backend, real BPF maps (not attached to any interface).
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { LB_CAPACITY, openLbDataPlane, type DataPlane } from '../../src/bpf/dataplane/index.js';
import { encodeVipKey, encodeVipValue } from '../../src/bpf/dataplane/codec.js';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { Reconciler } from '../../src/reconciler/loops/reconciler.js';
import { git, servedRepo, commitFiles, tempDir, configFiles, serviceYaml } from '../reconcile-helpers.js';

const PIN = `/sys/fs/bpf/gitlb-test-${process.pid}-applyfail`;
const quiet = { info: () => {}, warn: () => {} };

test('apply failure: state intact, recorded, retried with backoff, superseded by a newer commit', async (t) => {
  const repo = await servedRepo();
  const cacheDir = await tempDir('applyfail');
  const dp = await openLbDataPlane({ pinRoot: PIN });
  // Another writer that, while `racing`, fills lb_vips to capacity just before each execute (after the plan) and
  // takes its entries out again after it.
  let racing = false;
  const foreign = (i: number) => encodeVipKey({ addr: '192.0.2.200', family: 4, port: 1 + i, proto: 6 });
  const racer: DataPlane = {
    readLive: (o) => dp.readLive(o), tableSizes: () => dp.tableSizes(), target: dp.target, counters: () => dp.counters(),
    close: () => dp.close(),
    get forwarding() { return dp.forwarding; },
    execute: async (ops, o) => {
      if (!racing) return dp.execute(ops, o);
      const vips = BpfMap.open(join(PIN, 'lb_vips'));
      const free = LB_CAPACITY.vipEntries - vips.keys().length;
      try {
        for (let i = 0; i < free; i++) vips.update(foreign(i), Buffer.alloc(vips.valueSize));
        return await dp.execute(ops, o);
      } finally {
        for (let i = 0; i < free; i++) vips.delete(foreign(i));
        vips.close();
      }
    },
  };
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
      dataPlane: racer,
      retry: { baseMs: 1000, maxMs: 8000 },
      clock: () => new Date(now),
      log: quiet,
    });
    t.is((await r.reconcile('test')).kind, 'applied');

    // Nine more services of 131071 entries each (2.4 M ring entries: the old shared 2^21-entry ring had no room).
    const big: Record<string, string> = { ...good };
    for (let i = 0; i < 9; i++) big[`services/big${i}.yaml`] = serviceYaml(`big${i}`, `203.0.113.${20 + i}`, reals, { tableSize: 131071 });
    await commitFiles(repo.work, big, 'nine large services');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const grown = await r.reconcile('test');
    t.is(grown.kind, 'applied', grown.kind === 'failed' ? grown.reason : '');
    t.is((await dp.readLive()).services.length, 10);

    // The next revision adds a listener, which the kernel refuses: the other writer filled lb_vips meanwhile.
    racing = true;
    const before = await dp.readLive();
    const c1b = r.appliedRevision;
    const extra: Record<string, string> = { ...big, 'services/extra.yaml': serviceYaml('extra', '203.0.113.40', [...reals, '198.51.100.13']) };
    const c2 = await commitFiles(repo.work, extra, 'one more service');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const o2 = await r.reconcile('test');
    t.is(o2.kind, 'failed', o2.kind);
    if (o2.kind === 'failed') {
      t.is(o2.stage, 'apply');
      t.regex(o2.reason, /E2BIG|lb_vips/i);
    }
    t.is(r.appliedRevision, c1b, 'the last good revision is still the one applied');
    t.deepEqual(await dp.readLive(), before, 'the failed apply (a new real and ring were already written) left the previous state intact');

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
    back['services/extra.yaml'] = null;
    const c3 = await commitFiles(repo.work, back, 'back to one service, one more real');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    racing = false;
    const o3 = await r.reconcile('newer commit');
    t.is(o3.kind, 'applied', JSON.stringify(o3));
    t.is(r.appliedRevision, c3);
    t.not(r.appliedRevision, c2);
    t.is(r.nextRetryAt, null, 'nothing left to retry');
    t.is((await dp.readLive()).reals.length, 3);
    t.is((await dp.readLive()).vips.length, 1);
    t.truthy(c1);
  } finally {
    dp.close();
    await repo.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
    rmSync(PIN, { recursive: true, force: true });
  }
});
