// converge (src/reconciler/converge.ts) against the in-memory data plane: the one place where desired meets live
// plans, validates, executes and reads back; diff is its read-only half. The memory data plane executes with the one
// simulation of what ops do (applyOps), so these are the planner's real outputs, not canned ones.
import test from 'ava';
import { Converger, converge, diff, planDataPlane } from '../../src/reconciler/converge.js';
import { MemoryDataPlane } from '../../src/bpf/dataplane/memory.js';
import { renderDesiredState, type HealthView } from '../../src/render/desired.js';
import { EMPTY_LIVE, type LiveState } from '../../src/render/ops.js';
import { planOps } from '../../src/render/ops-plan.js';
import type { DesiredState } from '../../src/render/state.js';
import type { LiveSource } from '../../src/bpf/dataplane/types.js';
import { cluster, model, node, real, service } from '../helpers/model-builder.js';

const REALS = ['198.51.100.11', '198.51.100.12', '198.51.100.13'];
const config = model({
  cluster: cluster({ tableSize: 251 }),
  nodes: [node('lb-1', { role: 'lb', interface: 'lbA', addresses: ['192.0.2.1'], allowedVips: ['203.0.113.0/24'] })],
  services: [
    service('web', { vip: '203.0.113.10', reals: REALS.map((a) => real(a)) }),
    service('api', { vip: '203.0.113.11', reals: REALS.slice(0, 2).map((a) => real(a)) }),
  ],
});
const down = (...addresses: string[]): HealthView => ({ isHealthy: (_svc, address) => !addresses.includes(address) });
const render = (health?: HealthView): DesiredState => renderDesiredState(config, 'lb-1', health);
const lbPlane = (): MemoryDataPlane => {
  const dp = new MemoryDataPlane();
  dp.target = { role: 'lb', interface: 'lbA' };
  return dp;
};

test('converge then diff is empty; converge again plans once, executes nothing and needs no read-back', async (t) => {
  const dp = lbPlane();
  const desired = render();
  const c = new Converger();
  const done = await c.converge(dp, desired);
  t.true(done.ops.length > 0);
  t.deepEqual(done.left, [], 'the read-back with the same planner finds nothing left');
  t.is(done.report.ops, done.ops.length);
  t.deepEqual(c.stats, { plans: 1, readbacks: 1, diffs: 0, validations: 1 });
  t.deepEqual((await diff(dp, desired)).ops, []);
  t.deepEqual(planOps(await dp.readLive(), desired), [], 'the planner itself agrees');

  const again = await c.converge(dp, desired);
  t.deepEqual(again.ops, []);
  t.is(again.report.mapWrites + again.report.mapDeletes, 0);
  t.deepEqual(c.stats, { plans: 2, readbacks: 1, diffs: 0, validations: 2 });
  t.is(dp.executed.length, 1, 'an empty plan is not an execute that wrote something');
});

test('a failing execute leaves the previous state, throws its errno, and the next converge finishes the job', async (t) => {
  const dp = lbPlane();
  await converge(dp, render());
  const before = await dp.readLive({ tables: true });
  const flipped = render(down(REALS[0]!));
  const pending = (await diff(dp, flipped)).ops;
  t.deepEqual(pending.map((o) => o.op), ['ring.fill', 'ring.fill', 'service.switch', 'service.switch'], 'both rings drop the real');

  dp.injectFault({ kind: 'service.switch', nth: 2, errno: 'ENOMEM' });
  const err = await t.throwsAsync(converge(dp, flipped));
  t.is((err as { code?: string }).code, 'ENOMEM');
  t.deepEqual(await dp.readLive({ tables: true }), before, 'nothing of the failed execute stayed');
  t.deepEqual((await diff(dp, flipped)).ops, pending, 'the same work is still to do');

  const done = await converge(dp, flipped);
  t.deepEqual(done.ops, pending);
  t.deepEqual(done.left, []);
});

test('a health flip plans once, validates once and reads back once; a flip that changes no ring writes nothing', async (t) => {
  const dp = lbPlane();
  const c = new Converger();
  await c.converge(dp, render());
  const base = { ...c.stats };

  const done = await c.converge(dp, render(down(REALS[2]!))); // only web names the third real
  t.deepEqual(done.ops.map((o) => o.op), ['ring.fill', 'service.switch']);
  t.deepEqual(done.left, []);
  t.deepEqual(c.stats, { plans: base.plans + 1, readbacks: base.readbacks + 1, diffs: 0, validations: base.validations + 1 });

  // the same health again (a new render, the same tables): one plan, nothing to execute, no read-back
  const same = await c.converge(dp, render(down(REALS[2]!)));
  t.deepEqual(same.ops, []);
  t.deepEqual(c.stats, { plans: base.plans + 2, readbacks: base.readbacks + 1, diffs: 0, validations: base.validations + 2 });
});

test('a desired state the data plane cannot hold is refused before anything is written, naming the field', async (t) => {
  const dp = lbPlane();
  await converge(dp, render());
  const before = await dp.readLive({ tables: true });
  const good = render(down(REALS[0]!));
  // a ring that names a real the state does not hold (only the rings a plan writes are checked)
  const bad: DesiredState = { ...good, services: good.services.map((s, i) => (i === 0 ? { ...s, ring: s.ring.map(() => 999) } : s)) };
  const err = await t.throwsAsync(converge(dp, bad));
  t.like(err, { code: 'DataPlaneRefused', errno: 'EINVAL' });
  t.regex(err!.message, /^services\[\w+\]\.ring\[0\]: real id 999 is not in reals$/);
  t.deepEqual(await dp.readLive({ tables: true }), before);
  t.is(dp.executed.length, 1);
  // another interface than the one the data plane was opened on
  const elsewhere = await t.throwsAsync(diff(dp, { ...good, interface: 'lbB' }));
  t.regex(elsewhere!.message, /^interface: desired state names 'lbB', the data plane was opened on 'lbA'$/);
  // benign: the same state on the right interface converges
  t.deepEqual((await converge(dp, good)).left, []);
});

test('diff keeps its last plan while the live state object and table sizes stay the same (an idle drift check)', async (t) => {
  const desired = render();
  let live: LiveState = Object.freeze({ ...EMPTY_LIVE });
  let sizes: Record<string, number> = { lb_conntrack: desired.conntrackMaxEntries };
  const source: LiveSource = { readLive: async () => live, tableSizes: () => sizes, target: { role: 'lb' } };
  const c = new Converger();
  const first = await c.diff(source, desired);
  t.deepEqual(first.ops, planDataPlane(live, sizes, desired));
  t.is((await c.diff(source, desired)).ops, first.ops, 'the same objects: not planned again');
  t.is(c.stats.diffs, 1);

  sizes = { lb_conntrack: desired.conntrackMaxEntries * 2 }; // a table of another size: planned again, resize first
  const resized = await c.diff(source, desired);
  t.is(c.stats.diffs, 2);
  t.deepEqual(resized.ops[0], { op: 'table.resize', map: 'lb_conntrack', from: desired.conntrackMaxEntries * 2, to: desired.conntrackMaxEntries });
  t.deepEqual(resized.ops.slice(1), first.ops);

  live = Object.freeze({ ...EMPTY_LIVE }); // a new read (the maps changed): planned again
  await c.diff(source, desired);
  t.is(c.stats.diffs, 3);
});
