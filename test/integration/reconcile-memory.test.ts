// The reconciler's unit tier (docs/reconciler.md, "Test tiers"): no root, no BPF, no namespaces. Real `git`
// commits in a local repository (read through LocalRemote, as `gitlb run <path>` does) and the in-memory data
// plane, which plans with the one planner and executes with its all-or-nothing semantics. The kernel's own
// behaviour (pins, map capacity, attachment, packets) stays in the kernel and netns tiers. One test races two
// daemons over the HTTP Git server (git http-backend on 127.0.0.1), which needs no root either.
import test from 'ava';
import { readFileSync, rmSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { MemoryDataPlane } from '../../src/bpf/dataplane/memory.js';
import { parseConfig } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { EMPTY_LIVE } from '../../src/render/ops.js';
import { LB_MAP_CAPACITY, planOps } from '../../src/render/ops-plan.js';
import { LocalRemote } from '../../src/reconciler/source/git-remote.js';
import { Reconciler, type ReconcilerOptions } from '../../src/reconciler/loops/reconciler.js';
import { getCondition } from '../../src/reconciler/status/conditions.js';
import { startDaemon } from '../../src/reconciler/daemon.js';
import { HealthService } from '../../src/reconciler/health/service.js';
import { git, servedRepo, commitFiles, tempDir, configFiles, clusterYaml, lbNodeYaml, serviceYaml } from '../reconcile-helpers.js';
import { planOf } from '../lib/converge.js';
import { HealthLoop } from '../../src/reconciler/loops/health-loop.js';
import type { HealthChange } from '../../src/reconciler/health/checker.js';
import { GitlbError, type ErrorCode } from '../../src/errors.js';
import type { Op } from '../../src/render/ops.js';
import type { ApplyReport, ExecuteOptions } from '../../src/bpf/dataplane/types.js';

const REALS = ['198.51.100.10', '198.51.100.11', '198.51.100.12'];
const T0 = Date.parse('2026-11-29T10:00:00Z');
const dirs: string[] = [];
const quiet = { info: () => {}, warn: () => {} };
const ajv = new Ajv2020({ allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validStatus = ajv.compile(JSON.parse(readFileSync(new URL('../../schemas/status.schema.json', import.meta.url), 'utf8')));

test.after.always(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A local repository on branch main with `files` committed. */
async function repoWith(files: Record<string, string | null>): Promise<{ work: string; rev: string }> {
  const work = await tempDir('unit');
  dirs.push(work);
  await git(work, 'init', '-q', '-b', 'main');
  return { work, rev: await commitFiles(work, files, 'initial config') };
}

/** A reconciler of `node` on the local repository with a controllable clock. */
function reconciler(work: string, dp: MemoryDataPlane, node = 'lb-1', o: Partial<ReconcilerOptions> = {}) {
  const clock = { now: T0 };
  const r = new Reconciler({
    node, branch: 'main', remote: new LocalRemote(work), dataPlane: dp, retry: { baseMs: 1000, maxMs: 8000 },
    clock: () => new Date(clock.now), ...o,
  });
  return { r, clock };
}

function desiredOf(files: Record<string, string>, node = 'lb-1') {
  const parsed = parseConfig(Object.entries(files).map(([path, c]) => ({ path, content: new TextEncoder().encode(c) })));
  return renderDesiredState(parsed.model!, node);
}

const weighted = (weight: number): string => serviceYaml('web', '203.0.113.10', REALS, { weight });

const cond = (r: Reconciler, type: 'Ready' | 'Reconciling' | 'Stalled' | 'Degraded') => getCondition(r.snapshot().conditions, type);

test('first revision applied; re-apply, a commit that changes nothing and a restart write nothing', async (t) => {
  const files = configFiles(['lb-1'], REALS);
  const { work, rev } = await repoWith(files);
  const dp = new MemoryDataPlane();
  const { r } = reconciler(work, dp);

  const first = await r.reconcile('start');
  t.is(first.kind, 'applied', JSON.stringify(first));
  t.is(r.appliedRevision, rev);
  const desired = desiredOf(files);
  t.deepEqual(planOps(await dp.readLive(), desired), [], 'the data plane holds exactly the rendered state');
  t.is((await dp.readLive()).services[0]!.digest, desired.services[0]!.digest);
  t.is(dp.executed.length, 1);
  t.true(first.kind === 'applied' && first.report.mapWrites > 0);
  t.is(cond(r, 'Ready')?.status, 'True');
  const s = r.snapshot();
  t.true(validStatus(s), JSON.stringify(validStatus.errors));
  // Healthy active reals are counted, not listed (the document grows with what is wrong, not with the config).
  t.deepEqual(s.services[0]!.reals, []);
  t.deepEqual(s.services[0]!.realCounts, { total: REALS.length, active: REALS.length, drain: 0, disabled: 0, unhealthy: 0 });

  // Same head again: nothing is planned or executed.
  t.is((await r.reconcile('poll')).kind, 'unchanged');
  t.is(dp.executed.length, 1);

  // A new commit that does not change the config: recorded as applied, zero map operations.
  const readme = await commitFiles(work, { 'README.md': 'notes\n' }, 'docs only');
  const o = await r.reconcile('poll');
  t.is(r.appliedRevision, readme);
  t.true(o.kind === 'unchanged' || o.kind === 'applied');
  t.is(r.lastReport!.mapWrites + r.lastReport!.mapDeletes + r.lastReport!.ringSwitches, 0);
  t.is(dp.executed.length, 1, 'an empty plan: nothing executed');

  // A restart on the same data plane adopts it: the first reconcile writes nothing.
  const { r: again } = reconciler(work, dp, 'lb-1', { lastVerified: { revision: readme } });
  const adopted = await again.reconcile('start');
  t.is(again.appliedRevision, readme);
  t.is(again.counters.mapWrites + again.counters.mapDeletes, 0, JSON.stringify(adopted));
});

test('an invalid revision keeps the last good state; its condition names the file; it is not retried', async (t) => {
  const { work, rev: good } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const { r, clock } = reconciler(work, dp);
  t.is((await r.reconcile('start')).kind, 'applied');
  const before = await dp.readLive({ tables: true });

  const bad = await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['not-an-address']) }, 'bad');
  const o = await r.reconcile('poll');
  t.is(o.kind, 'failed');
  if (o.kind === 'failed') {
    t.is(o.stage, 'validate');
    t.regex(o.reason, /services\/web\.yaml:\d+:\d+/, 'the reason names file:line:col');
    t.falsy(o.rollback, 'policy manual: no revert');
  }
  t.is(r.appliedRevision, good);
  t.deepEqual(await dp.readLive({ tables: true }), before, 'nothing was written');
  t.is(dp.executed.length, 1);
  t.is(cond(r, 'Ready')?.reason, 'ValidationFailed');
  t.is(cond(r, 'Ready')?.status, 'False');
  t.is(cond(r, 'Stalled')?.status, 'True');
  t.is(cond(r, 'Reconciling')?.status, 'False');
  const s = r.snapshot();
  t.is(s.appliedRevision, good);
  t.is(s.lastFailure?.revision, bad);
  t.is(s.lastFailure?.stage, 'validate');
  t.true(validStatus(s), JSON.stringify(validStatus.errors));
  t.is(r.nextRetryAt, null, 'a content failure is not retried');
  clock.now += 3_600_000;
  t.is((await r.reconcile('poll')).kind, 'failed');
  t.is(r.counters.failures, 1, 'the same bad head is not tried again');
});

test('an apply failure mid-plan leaves the previous state intact and is retried with backoff until it succeeds', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const { r, clock } = reconciler(work, dp);
  t.is((await r.reconcile('start')).kind, 'applied');
  const before = await dp.readLive({ tables: true });
  const good = r.appliedRevision;

  // A new real and a new service: the fault hits the listener, after a real and a ring were written.
  const next = await commitFiles(work, {
    'services/web.yaml': serviceYaml('web', '203.0.113.10', [...REALS, '198.51.100.13']),
    'services/api.yaml': serviceYaml('api', '203.0.113.11', REALS),
  }, 'one more real, one more service');
  dp.injectFault({ kind: 'vip.put', nth: 1, errno: 'E2BIG', times: Infinity });
  const o = await r.reconcile('poll');
  t.is(o.kind, 'failed');
  if (o.kind === 'failed') {
    t.is(o.stage, 'apply');
    t.regex(o.reason, /vip\.put.*E2BIG/);
  }
  t.deepEqual(await dp.readLive({ tables: true }), before, 'the partial apply was undone');
  t.is(r.appliedRevision, good);
  t.is(cond(r, 'Ready')?.reason, 'ApplyFailed');
  t.is(cond(r, 'Reconciling')?.status, 'True');
  t.is(cond(r, 'Stalled')?.status, 'False');

  // Backoff: 1 s, then 2 s, 4 s; nothing is attempted before the retry time.
  t.is(r.nextRetryAt!.getTime() - clock.now, 1000);
  t.is((await r.reconcile('too early')).kind, 'waiting');
  t.is(dp.failures, 1);
  for (const delay of [2000, 4000]) {
    clock.now = r.nextRetryAt!.getTime();
    t.is((await r.reconcile('retry')).kind, 'failed');
    t.is(r.nextRetryAt!.getTime() - clock.now, delay);
  }
  t.is(dp.failures, 3);
  t.deepEqual(await dp.readLive({ tables: true }), before);

  // The condition clears: the next retry applies the same revision.
  dp.clearFault();
  clock.now = r.nextRetryAt!.getTime();
  t.is((await r.reconcile('retry')).kind, 'applied');
  t.is(r.appliedRevision, next);
  t.is(r.nextRetryAt, null);
  t.is((await dp.readLive()).services.length, 2);
  t.is(cond(r, 'Ready')?.status, 'True');
});

test('EINVAL from the data plane (the node cannot represent the revision) is not retried', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const { r, clock } = reconciler(work, dp);
  t.is((await r.reconcile('start')).kind, 'applied');
  await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', REALS.slice(0, 2)) }, 'one real fewer');
  dp.injectFault({ nth: 1, errno: 'EINVAL', times: Infinity });
  const o = await r.reconcile('poll');
  t.true(o.kind === 'failed' && o.stage === 'apply');
  t.is(r.nextRetryAt, null);
  t.is(cond(r, 'Stalled')?.status, 'True');
  clock.now += 3_600_000;
  await r.reconcile('poll');
  t.is(dp.failures, 1, 'not tried again');
});

/** A memory data plane whose next executes throw a GitlbError of `code` with `message` (then work again). */
class TypedFaultPlane extends MemoryDataPlane {
  fault: { code: ErrorCode; message: string } | null = null;
  override async execute(ops: Op[], opts?: ExecuteOptions): Promise<ApplyReport> {
    if (this.fault && ops.length) throw new GitlbError(this.fault.code, this.fault.message);
    return super.execute(ops, opts);
  }
}

test('retry, stall and revert follow the failure\'s code, never its message text', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS, { policy: 'auto' }));
  const dp = new TypedFaultPlane();
  const fields: Record<string, unknown>[] = [];
  const { r, clock } = reconciler(work, dp, 'lb-1', { log: { info: () => {}, warn: (_m, f) => { if (f) fields.push(f); } } });
  t.is((await r.reconcile('start')).kind, 'applied');

  // A transient code whose text reads like a permanent one: retried with backoff, not stalled, not reverted.
  const next = await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', REALS.slice(0, 2)) }, 'one real fewer');
  dp.fault = { code: 'ApplyFailed', message: 'EINVAL ENOSPC: capacity exceeded, the node cannot represent this revision' };
  const o = await r.reconcile('poll');
  t.like(o, { kind: 'failed', stage: 'apply', code: 'ApplyFailed', reason: dp.fault.message });
  t.falsy(o.kind === 'failed' && o.rollback, 'a node-local failure is never reverted');
  t.is(r.nextRetryAt!.getTime() - clock.now, 1000);
  t.like(cond(r, 'Reconciling'), { status: 'True', reason: 'ApplyFailed' });
  t.is(cond(r, 'Stalled')?.status, 'False');
  t.is(await git(work, 'rev-parse', 'main'), next);

  // A capacity code whose text reads like a transient one: stalled until a new commit, not retried, not reverted.
  dp.fault = { code: 'CapacityExceeded', message: 'timed out, try again' };
  clock.now = r.nextRetryAt!.getTime();
  const c = await r.reconcile('retry');
  t.like(c, { kind: 'failed', stage: 'apply', code: 'CapacityExceeded', reason: 'timed out, try again' });
  t.falsy(c.kind === 'failed' && c.rollback);
  t.is(r.nextRetryAt, null);
  t.like(cond(r, 'Stalled'), { status: 'True', reason: 'ApplyFailed' });
  t.is(await git(work, 'rev-parse', 'main'), next, 'no revert of a revision the node cannot fit');
  t.deepEqual(fields.filter((f) => f.stage === 'apply').map((f) => f.code), ['ApplyFailed', 'CapacityExceeded'], 'the log names the code');

  // Benign: the same revision applies once a new commit arrives and the data plane takes it.
  dp.fault = null;
  clock.now += 3_600_000;
  t.is((await r.reconcile('poll')).kind, 'failed', 'a stalled head is not tried again by itself');
  const fine = await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', REALS.slice(1)) }, 'another real fewer');
  t.like(await r.reconcile('poll'), { kind: 'applied', revision: fine });
  t.like(cond(r, 'Stalled'), { status: 'False', reason: 'Succeeded' });
});

test('a transition no order of ops fits the maps fails at plan, before any write, and is not retried (ENOSPC)', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane(EMPTY_LIVE, { ...LB_MAP_CAPACITY, services: 1 });
  const { r, clock } = reconciler(work, dp);
  t.is((await r.reconcile('start')).kind, 'applied');
  const before = await dp.readLive();
  // the one service renamed on the same listener: the new ring needs an entry while the listener names the old one
  await commitFiles(work, { 'services/web.yaml': null, 'services/web2.yaml': serviceYaml('web2', '203.0.113.10', REALS) }, 'rename');
  const o = await r.reconcile('poll');
  t.true(o.kind === 'failed' && o.stage === 'apply' && /^lb_rings: no free entry for new service web2 \(\d+\): 1 of 1 in use/.test(o.reason), JSON.stringify(o));
  t.deepEqual(await dp.readLive(), before, 'nothing written');
  t.is(dp.executed.length, 1, 'no execute after the first');
  t.is(r.nextRetryAt, null);
  t.is(cond(r, 'Stalled')?.status, 'True');
  clock.now += 3_600_000;
  await r.reconcile('poll');
  t.is(dp.executed.length, 1, 'not tried again');
  // in two steps (a new VIP first, then the old service removed) it applies
  await commitFiles(work, { 'services/web2.yaml': serviceYaml('web2', '203.0.113.11', REALS) }, 'the new name on a new VIP');
  t.is((await r.reconcile('poll')).kind, 'applied');
  t.deepEqual((await dp.readLive()).vips.map((v) => v.vip), ['203.0.113.11']);
});

test('the health loop carries HealthChange events: only the services they name are rendered again, a full refresh renders all', async (t) => {
  const files = { ...configFiles(['lb-1'], REALS), 'services/api.yaml': serviceYaml('api', '203.0.113.11', REALS) };
  const { work } = await repoWith(files);
  const dp = new MemoryDataPlane();
  const down = new Set<string>();
  const { r } = reconciler(work, dp, 'lb-1', { health: () => ({ isHealthy: (svc: string, address: string) => !down.has(`${svc}/${address}`) }) });
  t.is((await r.reconcile('start')).kind, 'applied');
  const loop = new HealthLoop({ rerender: (why, services) => r.refreshHealth(why, services), log: { warn: (m) => t.log(m) } });
  const digests = async () => Object.fromEntries((await dp.readLive()).services.map((s) => [r.desired!.services.find((d) => d.id === s.id)!.name, s.digest]));
  const before = await digests();
  const change = (service: string, address: string, to: 'up' | 'down'): HealthChange =>
    ({ service, address, from: to === 'up' ? 'down' : 'up', to, at: new Date(0).toISOString(), result: { ok: to === 'up', detail: to === 'up' ? 'connected' : 'ECONNREFUSED', at: 0, durationMs: 1 } });

  // both services see the real down, but only web's event arrives: only web is rendered again
  down.add(`web/${REALS[0]}`).add(`api/${REALS[0]}`);
  loop.changed(change('web', REALS[0]!, 'down'));
  await loop.idle();
  const afterWeb = await digests();
  t.not(afterWeb.web, before.web, 'web left the real out');
  t.is(afterWeb.api, before.api, 'api was not rendered again: no event named it');
  t.deepEqual(dp.executed.at(-1)!.map((o) => o.op), ['ring.fill', 'service.switch']);

  // api's event: now api follows, and the kernel equals a full render under the same view
  loop.changed(change('api', REALS[0]!, 'down'));
  await loop.idle();
  t.not((await digests()).api, before.api);
  const executes = dp.executed.length;
  t.is(await r.refreshHealth('full', null), null, 'a full render finds nothing the incremental ones missed');
  t.is(dp.executed.length, executes);

  // a full refresh (no event names what changed) renders every service
  down.clear();
  loop.refresh('peer observations changed');
  await loop.idle();
  t.deepEqual(await digests(), before, 'both services have the real back');
  loop.stop();
});

test('a health change re-renders the applied revision and applies only the difference', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const down = new Set<string>();
  const { r } = reconciler(work, dp, 'lb-1', { health: () => ({ isHealthy: (_svc: string, address: string) => !down.has(address) }) });
  t.is((await r.reconcile('start')).kind, 'applied');
  t.is(await r.refreshHealth('nothing changed'), null);
  t.is(dp.executed.length, 1, 'no execute when nothing changed');

  down.add(REALS[0]!);
  const stats = { ...r.converger.stats };
  const report = await r.refreshHealth('real down');
  t.truthy(report);
  t.deepEqual(r.converger.stats, { ...stats, plans: stats.plans + 1, readbacks: stats.readbacks + 1 }, 'a health flip plans once (and reads back once)');
  const ops = dp.executed.at(-1)!;
  t.deepEqual(ops.map((o) => o.op), ['ring.fill', 'service.switch'], 'only the ring of the service changes');
  const ring = (await dp.readLive({ tables: true })).services[0]!.ring!;
  const downId = r.desired!.reals.find((x) => x.address === REALS[0])!.id;
  t.false(ring.includes(downId), 'the unhealthy real left the ring');
  t.is(r.snapshot().services[0]?.reals.find((x) => x.address === REALS[0])?.healthy, false);
  t.is(r.snapshot().services[0]?.digest, (await dp.readLive()).services[0]!.digest);
  t.is(cond(r, 'Degraded')?.reason, 'RealsUnhealthy');

  down.clear();
  await r.refreshHealth('real up');
  t.true(dp.executed.at(-1)!.every((o) => o.op === 'ring.fill' || o.op === 'service.switch'));
  t.true((await dp.readLive({ tables: true })).services[0]!.ring!.includes(downId), 'the recovered real is back');
  t.is(cond(r, 'Degraded')?.status, 'False');
});

test('scaling every weight 198 -> 10 moves no flows: the share-based health gate passes and nothing is reverted', async (t) => {
  const files = { 'cluster.yaml': clusterYaml({ policy: 'auto', tableSize: 1021 }), 'nodes/lb-1.yaml': lbNodeYaml('lb-1'), 'services/web.yaml': weighted(198) };
  const { work } = await repoWith(files);
  const dp = new MemoryDataPlane();
  // No healthCheck in the config (type none): the service runs no probes, so the gate judges table shares only.
  const health = new HealthService({ node: 'lb-1' });
  t.teardown(() => health.checker.stop());
  const { r } = reconciler(work, dp, 'lb-1', {
    health: () => health.view(), postApplyGate: health.postApplyGate({ maxCapacityLossShare: 0.5 }), onApplied: (m) => health.update(m),
  });
  t.is((await r.reconcile('start')).kind, 'applied');
  const digest = (await dp.readLive()).services[0]!.digest;
  const scaled = await commitFiles(work, { 'services/web.yaml': weighted(10) }, 'scale every weight 198 -> 10');
  const o = await r.reconcile('poll');
  t.is(o.kind, 'applied', JSON.stringify(o));
  t.is(r.appliedRevision, scaled);
  t.is((await dp.readLive()).services[0]!.digest, digest, 'the same table: no flow moved');
  t.is(r.counters.rollbacksPushed, 0);
  t.is(await git(work, 'rev-parse', 'main'), scaled, 'no revert on the branch');
});

test('decommission: the node not named any more tears down and reports it, nobody reverts; named again, it rebuilds', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1', 'lb-2'], REALS, { policy: 'auto' }));
  const dps = { 'lb-1': new MemoryDataPlane(), 'lb-2': new MemoryDataPlane() };
  let teardowns = 0;
  const lb1 = reconciler(work, dps['lb-1'], 'lb-1').r;
  const lb2 = reconciler(work, dps['lb-2'], 'lb-2', {
    teardown: async () => {
      teardowns++;
      dps['lb-2'].reset();
    },
    reopenDataPlane: async () => dps['lb-2'].reopen(),
  }).r;
  for (const r of [lb1, lb2]) t.is((await r.reconcile('start')).kind, 'applied');

  const gone = await commitFiles(work, { 'nodes/lb-2.yaml': null }, 'decommission lb-2');
  t.is((await lb1.reconcile('poll')).kind, 'applied');
  t.is((await lb2.reconcile('poll')).kind, 'decommissioned');
  t.is((await lb2.reconcile('poll')).kind, 'decommissioned', 'stays decommissioned, nothing retried');
  t.is(teardowns, 1);
  t.true(dps['lb-2'].isClosed, 'the data plane handle was closed before the teardown');
  t.is(lb1.appliedRevision, gone);
  t.is(lb1.counters.rollbacksPushed + lb2.counters.rollbacksPushed, 0);
  t.is(await git(work, 'rev-parse', 'main'), gone, 'no revert on the branch');
  const s = lb2.snapshot();
  t.is(s.lastAttempt?.result, 'decommissioned');
  t.is(getCondition(s.conditions, 'Ready')?.reason, 'Decommissioned');
  t.deepEqual(s.services, []);
  t.true(validStatus(s), JSON.stringify(validStatus.errors));

  await commitFiles(work, { 'nodes/lb-2.yaml': lbNodeYaml('lb-2') }, 'lb-2 is back');
  t.is((await lb2.reconcile('poll')).kind, 'applied');
  t.deepEqual(planOps(await dps['lb-2'].readLive(), lb2.desired!), []);
  t.is(cond(lb2, 'Ready')?.status, 'True');
});

test('auto-revert: only lb nodes, only for content-bad revisions, never a revert of a revert', async (t) => {
  const { work, rev: good } = await repoWith(configFiles(['lb-1'], REALS, { policy: 'auto' }));

  // A backend-role node records the failure and stands down.
  const be = reconciler(work, new MemoryDataPlane(), 'lb-1', { role: 'backend' }).r;
  const lb = reconciler(work, new MemoryDataPlane(), 'lb-1').r;
  for (const r of [be, lb]) t.is((await r.reconcile('start')).kind, 'applied');

  // A node-local failure (apply) is not the revision's fault: no revert.
  const dpLocal = new MemoryDataPlane();
  const local = reconciler(work, dpLocal, 'lb-1').r;
  t.is((await local.reconcile('start')).kind, 'applied');
  const fine = await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', REALS.slice(0, 2)) }, 'one real fewer');
  dpLocal.injectFault({ nth: 1, errno: 'ENOMEM', times: Infinity });
  const lo = await local.reconcile('poll');
  t.true(lo.kind === 'failed' && lo.stage === 'apply' && !lo.rollback, JSON.stringify(lo));
  t.is(await git(work, 'rev-parse', 'main'), fine);
  for (const r of [be, lb]) t.is((await r.reconcile('poll')).kind, 'applied');

  // A content-bad revision: the backend records it and pushes nothing; the lb node reverts it.
  const bad = await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['not-an-address']) }, 'bad change');
  const bo = await be.reconcile('poll');
  t.true(bo.kind === 'failed' && bo.stage === 'validate');
  t.falsy(bo.kind === 'failed' && bo.rollback, 'no revert attempted by a backend');
  t.is(await git(work, 'rev-parse', 'main'), bad);
  t.is(getCondition(be.snapshot().conditions, 'Stalled')?.reason, 'ValidationFailed');

  const o = await lb.reconcile('poll');
  t.true(o.kind === 'failed' && o.rollback?.pushed === true, JSON.stringify(o));
  const revert = await git(work, 'rev-parse', 'main');
  t.is(await git(work, 'rev-parse', 'main^'), bad, 'exactly one commit after the bad one');
  t.is(await git(work, 'rev-parse', 'main^{tree}'), await git(work, 'rev-parse', `${fine}^{tree}`), 'the revert restores the last good tree');
  t.regex(await git(work, 'log', '-1', '--format=%B', 'main'), new RegExp(`This reverts commit ${bad}[\\s\\S]*validate`));
  t.is(lb.counters.rollbacksPushed, 1);
  t.is((await lb.reconcile('poll')).kind, 'applied');
  t.is(lb.appliedRevision, revert);

  // A bad revert is not reverted again.
  const badRevert = await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['not-an-address']) },
    `Revert "one real fewer"\n\nThis reverts commit ${fine}.`);
  const ro = await lb.reconcile('poll');
  t.true(ro.kind === 'failed' && ro.rollback?.pushed === false, JSON.stringify(ro));
  t.is(await git(work, 'rev-parse', 'main'), badRevert);
  t.is(lb.counters.rollbacksPushed, 1);
  t.truthy(good);
});

test('memory data plane: plans with the planner, a fault fails exactly its op and undoes, `times` executes in a row', async (t) => {
  const desired = desiredOf(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const ops = await planOf(dp, desired);
  t.deepEqual(ops, planOps((await dp.readLive()), desired));
  dp.injectFault({ kind: 'real.put', nth: 2, errno: 'ENOSPC', times: 2 });
  for (let i = 0; i < 2; i++) {
    const err = await t.throwsAsync(dp.execute(ops));
    t.is((err as { code?: string }).code, 'ENOSPC');
    t.regex(err!.message, new RegExp(`^real\\.put \\(op ${ops.findIndex((x) => x.op === 'real.put') + 2} of ${ops.length}\\)`));
    t.deepEqual(planOps(await dp.readLive(), desired), ops, 'nothing of the failed execute stayed');
  }
  const report = await dp.execute(ops);
  t.is(report.ops, ops.length);
  t.is(report.ringSwitches, 1);
  t.deepEqual(await planOf(dp, desired), []);
  dp.close();
  await t.throwsAsync(dp.readLive(), { message: /after close/ });
});

test('a failed fetch is recorded and retried with backoff while the data plane keeps its state; recovery clears it', async (t) => {
  const { work, rev } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const { r, clock } = reconciler(work, dp);
  t.is((await r.reconcile('start')).kind, 'applied');
  await git(work, 'branch', '-q', '-m', 'main', 'elsewhere'); // the branch is gone from the source
  for (const delay of [1000, 2000]) {
    const o = await r.reconcile('poll');
    t.true(o.kind === 'failed' && o.stage === 'fetch' && /branch 'main' not found/.test(o.reason), JSON.stringify(o));
    t.is(r.nextRetryAt!.getTime() - clock.now, delay);
    clock.now = r.nextRetryAt!.getTime();
  }
  t.is(cond(r, 'Ready')?.reason, 'FetchFailed');
  t.is(cond(r, 'Reconciling')?.status, 'True');
  t.is(r.appliedRevision, rev);
  t.is(dp.executed.length, 1, 'nothing executed while the source was unreachable');
  await git(work, 'branch', '-q', '-m', 'elsewhere', 'main');
  t.is((await r.reconcile('poll')).kind, 'unchanged');
  t.is(cond(r, 'Ready')?.status, 'True');
  t.is(r.nextRetryAt, null);
});

test('with verification off a force-push is applied with a warning; drift is repaired, counted and shown as Degraded until a clean check', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', REALS.slice(0, 2)) }, 'two reals');
  const dp = new MemoryDataPlane();
  const { r } = reconciler(work, dp);
  t.is((await r.reconcile('start')).kind, 'applied');

  await git(work, 'reset', '-q', '--hard', 'HEAD~1');
  const rewritten = await commitFiles(work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', REALS.slice(1)) }, 'rewritten');
  const o = await r.reconcile('poll');
  t.is(o.kind, 'applied', JSON.stringify(o));
  t.true(o.kind === 'applied' && o.warnings.some((w) => /^force-push: /.test(w)));
  t.is(r.appliedRevision, rewritten);
  t.is(r.counters.forcePushes, 1);

  t.deepEqual((await r.checkDrift()).differences, []);
  const live = await dp.readLive();
  const real = live.reals[0]!;
  dp.tamper([{ op: 'real.put', real: { ...real, address: '198.51.100.99' }, before: real }, { op: 'vip.delete', vip: live.vips[0]! }]);
  const drift = await r.checkDrift();
  t.is(drift.differences.length, 2, drift.differences.join('; '));
  t.deepEqual(planOps(await dp.readLive(), r.desired!), [], 'repaired');
  t.is(r.counters.driftRepairs, 1);
  t.is(cond(r, 'Degraded')?.reason, 'DriftRepaired');
  t.deepEqual((await r.checkDrift()).differences, []);
  t.is(cond(r, 'Degraded')?.reason, 'Healthy');
});

test('auto-rollback over the HTTP Git server: with two daemons racing, exactly one revert is pushed and both apply it', async (t) => {
  const files = configFiles(['lb-1', 'lb-2'], REALS, { policy: 'auto' });
  const repo = await servedRepo();
  t.teardown(() => repo.cleanup());
  const good = await commitFiles(repo.work, files, 'initial config');
  await git(repo.work, 'push', '-q', 'origin', 'main');
  const daemons = await Promise.all(
    ['lb-1', 'lb-2'].map(async (node) => {
      const cacheDir = await tempDir(`rb-${node}`);
      dirs.push(cacheDir);
      return startDaemon({ repo: repo.url, branch: 'main', node, dataPlane: new MemoryDataPlane(), cacheDir, poll: '2', log: quiet });
    }),
  );
  try {
    await Promise.all(daemons.map((d) => d.idle()));
    for (const d of daemons) t.is(d.reconciler.appliedRevision, good);

    const bad = await commitFiles(repo.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['not-an-address']) }, 'bad change');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    for (const d of daemons) d.trigger('test'); // both at once

    // Wait until both nodes applied something newer than `bad` (the revert).
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 300));
      if (daemons.every((d) => d.reconciler.appliedRevision !== good && d.reconciler.appliedRevision !== bad)) break;
    }
    // Let a few more polls pass: nothing else may be pushed (no loop).
    await new Promise((r) => setTimeout(r, 2500));
    await Promise.all(daemons.map((d) => d.idle()));
    await git(repo.work, 'pull', '-q', 'origin', 'main');
    const revert = await git(repo.work, 'rev-parse', 'HEAD');
    t.is(await git(repo.work, 'rev-parse', 'HEAD^'), bad, 'exactly one commit after the bad one');
    t.regex(await git(repo.work, 'log', '-1', '--format=%B'), new RegExp(`This reverts commit ${bad}[\\s\\S]*validate`));
    t.is(await git(repo.work, 'rev-parse', 'HEAD^{tree}'), await git(repo.work, 'rev-parse', `${good}^{tree}`));
    for (const d of daemons) t.is(d.reconciler.appliedRevision, revert);
    t.is(daemons.reduce((n, d) => n + d.reconciler.counters.rollbacksPushed, 0), 1);
  } finally {
    await Promise.all(daemons.map((d) => d.stop()));
  }
});


/** An HTTP address on 127.0.0.1 where nothing listens: a Git server that is down (connections refused). */
async function deadGitUrl(): Promise<string> {
  const { createServer } = await import('node:net');
  const srv = createServer();
  await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
  const { port } = srv.address() as { port: number };
  await new Promise<void>((ok) => srv.close(() => ok()));
  return `http://127.0.0.1:${port}/config.git`;
}

/** Collects the warn/info lines a reconciler logs. */
function recordingLog() {
  const lines: { level: 'info' | 'warn'; msg: string }[] = [];
  return { lines, log: { info: (msg: string) => void lines.push({ level: 'info', msg }), warn: (msg: string) => void lines.push({ level: 'warn', msg }) } };
}

test('restart while the Git server is down: the pinned revision is adopted from the cache before any fetch, health re-renders from it', async (t) => {
  const { work, rev } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  t.is((await reconciler(work, dp).r.reconcile('start')).kind, 'applied');
  // The node's Git cache as the previous run left it (a bare copy holding the applied revision's objects).
  const cache = await tempDir('cache');
  dirs.push(cache);
  await git(cache, 'clone', '-q', '--bare', work, 'git');
  const { HttpRemote } = await import('../../src/reconciler/source/git-remote.js');
  const remote = new HttpRemote(await deadGitUrl(), `${cache}/git`, undefined, 2000);
  const down = new Set<string>();
  const models: string[] = [];
  const { lines, log } = recordingLog();
  const { r } = reconciler(work, dp, 'lb-1', {
    remote, lastVerified: { revision: rev }, log,
    health: () => ({ isHealthy: (_s: string, address: string) => !down.has(address) }),
    onApplied: (m) => void models.push(m.services.map((s) => s.metadata.name).join(',')),
  });
  const executedBefore = dp.executed.length;

  const start = await r.adoptAtStart();
  t.deepEqual(start, { adopted: rev, problem: null });
  t.deepEqual(models, ['web'], 'the health checker learnt the adopted model (onApplied)');
  t.deepEqual(r.desired?.reals.map((x) => x.address).sort(), [...REALS].sort(), 'the neighbour refresh has the reals');
  t.is(dp.executed.length, executedBefore, 'adoption writes nothing');
  t.true(lines.some((l) => l.level === 'info' && /^adopted [0-9a-f]{12} from the local Git cache before fetching/.test(l.msg)), JSON.stringify(lines));

  // The fetch fails (connection refused), and the health path still drains a real that went down.
  const o = await r.reconcile('start');
  t.true(o.kind === 'failed' && o.stage === 'fetch', JSON.stringify(o));
  down.add(REALS[1]!);
  t.truthy(await r.refreshHealth('real down'), 'the health re-render applied a difference');
  const downId = r.desired!.reals.find((x) => x.address === REALS[1])!.id;
  t.false((await dp.readLive({ tables: true })).services[0]!.ring!.includes(downId), 'the unhealthy real left the ring');
  t.is(r.appliedRevision, rev);
});

test('restart while the Git server is down and the cache lacks the pinned revision: said in the log and in status', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const cache = await tempDir('cache');
  dirs.push(cache);
  await git(cache, 'init', '-q', '--bare', 'git');
  const { HttpRemote } = await import('../../src/reconciler/source/git-remote.js');
  const remote = new HttpRemote(await deadGitUrl(), `${cache}/git`, undefined, 2000);
  const missing = '0123456789abcdef0123456789abcdef01234567';
  const { lines, log } = recordingLog();
  const { r } = reconciler(work, dp, 'lb-1', { remote, lastVerified: { revision: missing }, log });
  const start = await r.adoptAtStart();
  t.is(start.adopted, null);
  t.regex(start.problem ?? '', /revision 0123456789ab is not in the Git cache/);
  t.is(r.desired, null);
  t.true(lines.some((l) => l.level === 'warn' && /cannot adopt the pinned revision at start: revision 0123456789ab is not in the Git cache .*wait for the first successful fetch/.test(l.msg)), JSON.stringify(lines));
  const s = r.snapshot();
  t.true(s.warnings.some((w) => /not in the Git cache/.test(w)), JSON.stringify(s.warnings));
  t.true(validStatus(s), JSON.stringify(validStatus.errors));
});

test('a Git outage logs one fetch failure per backoff step, not one per poll, and a summary when the fetch recovers', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const { lines, log } = recordingLog();
  const { r, clock } = reconciler(work, dp, 'lb-1', { log });
  t.is((await r.reconcile('start')).kind, 'applied');
  await git(work, 'branch', '-q', '-m', 'main', 'elsewhere');
  const warned = () => lines.filter((l) => l.level === 'warn' && l.msg.startsWith('fetch failed')).length;
  // 60 polls, one every 2 s (2 minutes): backoff steps come due after 1, 2, 4, 8, 16, 32 and 64 s.
  const retryAts: number[] = [];
  for (let i = 0; i < 60; i++) {
    await r.reconcile('poll');
    retryAts.push(r.nextRetryAt!.getTime());
    clock.now += 2000;
  }
  // retry maximum in this reconciler: 8 s. Steps found due at 0 s (+1), 2 (+2), 4 (+4), 8 (+8), 16, 24, ... 112: 17.
  t.is(warned(), 17, lines.map((l) => l.msg).join('\n'));
  t.is(new Set(retryAts).size, 17, 'the backoff moves only when a step was due');
  t.regex(lines.find((l) => l.msg.startsWith('fetch failed (attempt 2,'))!.msg, /failing for 2 s; next retry in 2 s \(backoff step 2\), polls also retry\): branch 'main' not found/);
  await git(work, 'branch', '-q', '-m', 'elsewhere', 'main');
  t.is((await r.reconcile('poll')).kind, 'unchanged');
  t.true(lines.some((l) => l.level === 'info' && /^fetch recovered after 60 failed attempts over 2 min \(last error: branch 'main' not found/.test(l.msg)),
    lines.map((l) => l.msg).join('\n'));
});

test('a failed status push is logged once however many publishes it carried, retried, and its recovery said', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const dp = new MemoryDataPlane();
  const { lines, log } = recordingLog();
  const { HttpRemote } = await import('../../src/reconciler/source/git-remote.js');
  const { StatusWriter } = await import('../../src/reconciler/status/status-writer.js');
  const cache = await tempDir('cache');
  dirs.push(cache);
  // A real status writer against a Git server that is down: every push round fails (connection refused).
  const writer = new StatusWriter({ remote: new HttpRemote(await deadGitUrl(), `${cache}/git`, undefined, 2000), branch: 'gitlb-status', node: 'lb-1', backoffMs: { base: 1, max: 2 } });
  let healthy = false;
  const local = new LocalRemote(work);
  const { r } = reconciler(work, dp, 'lb-1', {
    log, retry: { baseMs: 1000, maxMs: 300_000 },
    statusSink: async (status, _b, why) => void (healthy ? await new StatusWriter({ remote: local, branch: 'gitlb-status', node: 'lb-1' }).write(status, why) : await writer.write(status, why)),
  });
  t.is((await r.reconcile('start')).kind, 'applied'); // push 1
  r.heartbeat(0); // push 2 queues behind push 1 ...
  r.heartbeat(0); // ... and these two coalesce into it
  r.heartbeat(0);
  await r.flushStatus();
  const failed = lines.filter((l) => l.level === 'warn' && l.msg.startsWith('status write failed'));
  t.is(failed.length, 2, failed.map((l) => l.msg).join('\n'));
  // The first push is not retried: a newer status was handed over meanwhile, and push 2 carries it.
  t.regex(failed[0]!.msg, /^status write failed \(1 in a row\): status push for lb-1 to gitlb-status failed: .*ECONNREFUSED/);
  t.regex(failed[1]!.msg, /^status write failed \(2 in a row; retry in 5 s\)/, 'the first three retries come every 5 s; only a lasting failure backs off');
  healthy = true;
  r.heartbeat(0);
  await r.flushStatus();
  r.stopStatusRetries();
  t.true(lines.some((l) => l.level === 'info' && l.msg === 'status write recovered after 2 failed pushes'), lines.map((l) => l.msg).join('\n'));
});

test('flushStatus waits for the statuses handed over before the call, not for the ones published while it waits', async (t) => {
  const { work } = await repoWith(configFiles(['lb-1'], REALS));
  const writes: { why: string; done: () => void }[] = [];
  const { r } = reconciler(work, new MemoryDataPlane(), 'lb-1', {
    statusSink: (_status, _branch, why) => new Promise<void>((done) => writes.push({ why, done })),
  });
  t.is((await r.reconcile('start')).kind, 'applied');
  t.deepEqual(writes.map((w) => w.why), ['start (start)']);
  let flushed = false;
  const flushing = r.flushStatus().then(() => (flushed = true));
  r.heartbeat(0); // a newer status while the flush waits (a health flip, a retry): its push has not ended
  t.deepEqual(writes.map((w) => w.why), ['start (start)', 'heartbeat']);
  writes[0]!.done();
  for (let i = 0; i < 5; i++) await new Promise((res) => setImmediate(res));
  t.true(flushed, 'the flush ended with the push it was called for');
  writes[1]!.done();
  await flushing;
  await r.flushStatus();
});
