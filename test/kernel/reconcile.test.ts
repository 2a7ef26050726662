// The reconciler end to end: real git http-backend, commits/force-pushes by the git CLI, and the real LB data
// plane (real BPF maps, pinned under a per-run bpffs directory, not attached to any interface).
import test from 'ava';
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openLbDataPlane, type DataPlane } from '../../src/bpf/dataplane/index.js';
import { encodeReal, decodeVipKey } from '../../src/bpf/dataplane/codec.js';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { parseConfig } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { Reconciler } from '../../src/reconciler/loops/reconciler.js';
import { StatusWriter } from '../../src/reconciler/status/status-writer.js';
import { parseStatus } from '../../src/reconciler/status/status-doc.js';
import { startDaemon } from '../../src/reconciler/daemon.js';
import { githubSignature } from '../../src/reconciler/triggers/webhook.js';
import { git, servedRepo, commitFiles, tempDir, configFiles, serviceYaml, type ServedRepo } from '../reconcile-helpers.js';

const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-reconcile`;
const quiet = process.env.GITLB_TEST_LOG ? { info: (m: string) => console.log(new Date().toISOString().slice(14, 23), m), warn: (m: string) => console.log(new Date().toISOString().slice(14, 23), 'WARN', m) } : { info: () => {}, warn: () => {} };
const cleanups: (() => Promise<void> | void)[] = [];

test.after.always(async () => {
  for (const f of cleanups.reverse()) await f();
  rmSync(PIN_BASE, { recursive: true, force: true });
});

async function dataPlane(name: string): Promise<DataPlane> {
  return openLbDataPlane({ pinRoot: join(PIN_BASE, name) });
}

async function repoWith(files: Record<string, string | null>): Promise<{ repo: ServedRepo; rev: string }> {
  const repo = await servedRepo();
  cleanups.push(() => repo.cleanup());
  const rev = await commitFiles(repo.work, files, 'initial config');
  await git(repo.work, 'push', '-q', 'origin', 'main');
  return { repo, rev };
}

async function cache(name: string): Promise<string> {
  const c = await tempDir(name);
  cleanups.push(() => rmSync(c, { recursive: true, force: true }));
  return c;
}

function reconciler(repo: ServedRepo, remote: HttpRemote, dp: DataPlane, node: string): Reconciler {
  const writer = new StatusWriter({ remote, branch: 'gitlb-status', node });
  const r: Reconciler = new Reconciler({
    node,
    branch: 'main',
    remote,
    dataPlane: dp,
    log: quiet,
    statusSink: async (s, _branch, why) => {
      await writer.write(s, why);
    },
  });
  void repo;
  return r;
}

async function statusOnBranch(repo: ServedRepo, node: string, r: Reconciler) {
  await r.flushStatus();
  await git(repo.work, 'fetch', '-q', 'origin', 'gitlb-status');
  return parseStatus(await git(repo.work, 'show', `FETCH_HEAD:status/${node}.yaml`));
}

function expectedDigest(files: Record<string, string>, node: string): string {
  const parsed = parseConfig(Object.entries(files).map(([path, c]) => ({ path, content: new TextEncoder().encode(c) })));
  return renderDesiredState(parsed.model!, node).services[0]!.digest;
}

const REALS = ['198.51.100.10', '198.51.100.11'];
const ajv = new Ajv2020({ allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validStatus = ajv.compile(JSON.parse(readFileSync(new URL('../../schemas/status.schema.json', import.meta.url), 'utf8')));

test.serial('new commit applied; invalid commit refused with status; with verification off a force-push is applied with a warning', async (t) => {
  const files1 = configFiles(['lb-1'], REALS);
  const { repo, rev: c1 } = await repoWith(files1);
  const dp = await dataPlane('a');
  cleanups.push(() => dp.close());
  const remote = new HttpRemote(repo.url, join(await cache('a'), 'git'));
  const r = reconciler(repo, remote, dp, 'lb-1');

  const o1 = await r.reconcile('test');
  t.is(o1.kind, 'applied', JSON.stringify(o1));
  t.is((await dp.readLive()).services[0]?.digest, expectedDigest(files1, 'lb-1'));
  t.is((await statusOnBranch(repo, 'lb-1', r)).appliedRevision, c1);

  // A new commit: one more real.
  const files2 = { ...files1, 'services/web.yaml': serviceYaml('web', '203.0.113.10', [...REALS, '198.51.100.12']) };
  const c2 = await commitFiles(repo.work, files2, 'add a real');
  await git(repo.work, 'push', '-q', 'origin', 'main');
  const o2 = await r.reconcile('test');
  t.is(o2.kind, 'applied');
  if (o2.kind === 'applied') t.true(o2.report.mapWrites > 0);
  const live2 = await dp.readLive();
  t.is(live2.services[0]?.digest, expectedDigest(files2, 'lb-1'));
  t.is(live2.reals.length, 3);

  // An invalid commit: refused before the data plane is touched; recorded with its reason.
  const c3 = await commitFiles(repo.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.300']) }, 'typo');
  await git(repo.work, 'push', '-q', 'origin', 'main');
  const writesBefore = r.counters.mapWrites;
  const o3 = await r.reconcile('test');
  t.is(o3.kind, 'failed');
  if (o3.kind === 'failed') {
    t.is(o3.stage, 'validate');
    t.regex(o3.reason, /services\/web\.yaml:\d+:\d+/);
  }
  t.is(r.counters.mapWrites, writesBefore);
  t.deepEqual(await dp.readLive(), live2, 'data plane untouched');
  const s3 = await statusOnBranch(repo, 'lb-1', r);
  t.is(s3.appliedRevision, c2, 'last good stays');
  t.is(s3.lastAttempt?.revision, c3);
  t.is(s3.lastAttempt?.result, 'failed');
  t.is(s3.lastAttempt?.stage, 'validate');
  t.regex(s3.lastFailure?.reason ?? '', /web\.yaml/);
  t.true(validStatus(s3), JSON.stringify(validStatus.errors));
  // Not retried: a validation failure is deterministic.
  const failures = r.counters.failures;
  t.is((await r.reconcile('again')).kind, 'failed');
  t.is(r.counters.failures, failures);

  // Force-push: history rewritten to a commit that does not descend from the applied one. Verification is off
  // (no --trust, no policy): said out loud and applied; under enforce it is refused (test/integration/trust-state.test.ts).
  await git(repo.work, 'reset', '-q', '--hard', c1);
  const files5 = { ...files1, 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.20']) };
  const c5 = await commitFiles(repo.work, files5, 'rewritten');
  await git(repo.work, 'push', '-q', '-f', 'origin', 'main');
  const o5 = await r.reconcile('test');
  t.is(o5.kind, 'applied');
  if (o5.kind === 'applied') t.regex(o5.warnings.join(), /force-push/);
  const s5 = await statusOnBranch(repo, 'lb-1', r);
  t.is(s5.appliedRevision, c5);
  t.regex(s5.warnings.join(), /force-push/);
  t.is(s5.counters.forcePushes, 1);
  t.true(validStatus(s5), JSON.stringify(validStatus.errors));
  t.is(s5.services[0]?.digest, expectedDigest(files5, 'lb-1'));
});

test.serial('restart adopts the pinned state and performs zero map writes', async (t) => {
  const files = configFiles(['lb-1'], REALS, { tableSize: 251 });
  const { repo, rev } = await repoWith(files);
  const cacheDir = await cache('restart');
  const dp1 = await dataPlane('restart');
  const d1 = await startDaemon({ repo: repo.url, branch: 'main', node: 'lb-1', dataPlane: dp1, cacheDir, log: quiet });
  await d1.idle();
  t.is(d1.reconciler.appliedRevision, rev);
  t.true(d1.reconciler.counters.mapWrites > 0);
  await d1.stop();
  dp1.close(); // the daemon goes away; pinned maps stay

  const dp2 = await dataPlane('restart');
  cleanups.push(() => dp2.close());
  const d2 = await startDaemon({ repo: repo.url, branch: 'main', node: 'lb-1', dataPlane: dp2, cacheDir, log: quiet });
  await d2.idle();
  await d2.stop();
  t.is(d2.reconciler.appliedRevision, rev);
  t.is(d2.reconciler.lastReport?.mapWrites, 0, 'ApplyReport.mapWrites === 0 after restart with nothing changed');
  t.is(d2.reconciler.lastReport?.mapDeletes, 0);
  t.is(d2.reconciler.counters.mapWrites, 0);
  t.is(d2.reconciler.snapshot().lastAttempt?.result, 'unchanged');
  t.is((await dp2.readLive()).services[0]?.digest, expectedDigest(files, 'lb-1'));
});

test.serial('drift in the live maps is detected, repaired and counted', async (t) => {
  const files = configFiles(['lb-1'], REALS);
  const { repo } = await repoWith(files);
  const pinRoot = join(PIN_BASE, 'drift');
  const dp = await dataPlane('drift');
  const driftWriter = new StatusWriter({ remote: new HttpRemote(repo.url, join(await cache('drift-status'), 'git')), branch: 'gitlb-status', node: 'lb-1' });
  const r = new Reconciler({
    node: 'lb-1',
    branch: 'main',
    remote: new HttpRemote(repo.url, join(await cache('drift'), 'git')),
    dataPlane: dp,
    reopenDataPlane: () => openLbDataPlane({ pinRoot }),
    log: quiet,
    statusSink: async (s, _branch, why) => {
      await driftWriter.write(s, why);
    },
  });
  cleanups.push(() => r.dataPlane.close());
  t.is((await r.reconcile('test')).kind, 'applied');
  t.deepEqual((await r.checkDrift()).differences, [], 'no drift right after apply');

  // Someone edits the pinned maps behind the reconciler's back: a listener deleted, a real's address changed.
  const vips = BpfMap.open(join(pinRoot, 'lb_vips'));
  const reals = BpfMap.open(join(pinRoot, 'lb_reals'));
  try {
    const live = await dp.readLive();
    const listener = vips.keys().find((k) => decodeVipKey(k).port !== 0);
    t.truthy(listener);
    vips.delete(listener!);
    const firstReal = Buffer.alloc(4);
    firstReal.writeUInt32LE(live.reals[0]!.id);
    reals.update(firstReal, encodeReal('198.51.100.99', 4));
  } finally {
    vips.close();
    reals.close();
  }
  const drifted = await dp.readLive();
  t.is(drifted.vips.length, 0);
  t.true(drifted.reals.some((x) => x.address === '198.51.100.99'));

  const drift = await r.checkDrift();
  t.true(drift.differences.length >= 2, drift.differences.join('; '));
  t.true((drift.report?.mapWrites ?? 0) >= 2);
  t.is(r.counters.driftRepairs, 1);
  const repaired = await r.dataPlane.readLive();
  t.is(repaired.services[0]?.digest, expectedDigest(files, 'lb-1'));
  t.false(repaired.reals.some((x) => x.address === '198.51.100.99'));
  t.is(repaired.vips.length, 1);
  t.deepEqual((await r.checkDrift()).differences, []);
  t.is(r.counters.driftChecks, 3);
  t.is((await statusOnBranch(repo, 'lb-1', r)).counters.driftRepairs, 1);
});

test.serial('webhook: a signed push triggers an apply, a bad signature does not; status pushes trigger nothing', async (t) => {
  const files = configFiles(['lb-1'], REALS);
  const { repo, rev } = await repoWith(files);
  const dp = await dataPlane('hook');
  cleanups.push(() => dp.close());
  const secret = 's3cret';
  const d = await startDaemon({
    repo: repo.url,
    branch: 'main',
    node: 'lb-1',
    dataPlane: dp,
    cacheDir: await cache('hook'),
    webhook: { listen: '127.0.0.1:0', secret },
    log: quiet,
  });
  cleanups.push(() => d.stop());
  try {
    await d.idle();
    t.is(d.reconciler.appliedRevision, rev);
    const reconciles = d.reconciler.counters.reconciles;
    const send = async (body: string, sig: string) =>
      (await fetch(d.webhook!.url, { method: 'POST', body, headers: { 'x-hub-signature-256': sig, 'content-type': 'application/json' } })).status;

    const c2 = await commitFiles(repo.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.10']) }, 'one real');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const payload = JSON.stringify({ ref: 'refs/heads/main', after: c2 });
    t.is(await send(payload, githubSignature('wrong', Buffer.from(payload))), 401);
    await new Promise((r) => setTimeout(r, 300));
    await d.idle();
    t.is(d.reconciler.counters.reconciles, reconciles, 'bad signature: no reconcile');
    t.is(d.reconciler.appliedRevision, rev);

    const statusPayload = JSON.stringify({ ref: 'refs/heads/gitlb-status' });
    t.is(await send(statusPayload, githubSignature(secret, Buffer.from(statusPayload))), 202);
    await d.idle();
    t.is(d.reconciler.counters.reconciles, reconciles, 'status branch push: no reconcile');

    t.is(await send(payload, githubSignature(secret, Buffer.from(payload))), 202);
    const deadline = Date.now() + 20_000;
    while (d.reconciler.appliedRevision !== c2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await d.idle();
    t.is(d.reconciler.appliedRevision, c2);
  } finally {
    await d.stop();
  }
});

test.serial('local repository: a commit is picked up by the ref watch; the node\'s own status writes trigger nothing', async (t) => {
  const dir = await cache('local-repo');
  await git(dir, 'init', '-q', '-b', 'main');
  const c1 = await commitFiles(dir, configFiles(['lb-1'], REALS), 'initial');
  const dp = await dataPlane('local');
  cleanups.push(() => dp.close());
  const d = await startDaemon({ repo: dir, branch: 'main', node: 'lb-1', dataPlane: dp, cacheDir: await cache('local-cache'), log: quiet });
  try {
    await d.idle();
    t.is(d.reconciler.appliedRevision, c1);
    t.regex(await git(dir, 'show', 'gitlb-status:status/lb-1.yaml'), new RegExp(`appliedRevision: ${c1}`));
    // The status write above moved refs/heads/gitlb-status; give the watcher time to (not) react.
    await new Promise((r) => setTimeout(r, 1500));
    await d.idle();
    t.is(d.reconciler.counters.reconciles, 1, 'status branch writes do not start a reconcile');

    const c2 = await commitFiles(dir, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.10']) }, 'one real');
    const deadline = Date.now() + 20_000;
    while (d.reconciler.appliedRevision !== c2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    t.is(d.reconciler.appliedRevision, c2);
    t.is((await dp.readLive()).reals.length, 1);
  } finally {
    await d.stop();
  }
});
