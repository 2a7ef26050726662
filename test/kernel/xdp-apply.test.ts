// plan()/execute()/readLive() of the LB data plane against the real kernel maps: a one-real change on a
// 65537-entry Maglev ring with 100 reals (one new ring, one outer-map switch), adoption after a restart
// (nothing changed -> no ops), readLive without reading rings, capacity (many large rings on a running node),
// and undo of a failed execute. No traffic and no interfaces: maps and programs only, per-run bpffs directory.
import test from 'ava';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, MapType, type BpfError } from '../../src/bpf/libbpf.js';
import { rewriteRingEntry, writableRing } from '../lib/ring-copy.js';
import { RING_ROTATION_CHECKS, openLbDataPlane, ringDigest, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { buildMaglevTable } from '../../src/render/maglev.js';
import type { Op } from '../../src/render/ops.js';
import { describeOp } from '../../src/render/ops-text.js';
import { makeState } from '../lib/lb-state.js';
import { applyTo, planOf } from '../lib/converge.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-xdpa`;
const M = 65537;
const N = 100;
const SEED = 7;

const reals: Record<number, string> = {};
for (let i = 1; i <= N; i++) reals[i] = `198.51.100.${i}`;
const backends = (ids: number[]) => ids.map((id) => ({ id: reals[id]!, weight: 1, realId: id }));
const all = Array.from({ length: N }, (_, i) => i + 1);
const ringAll = buildMaglevTable(backends(all), M, SEED);
const ringMinusOne = buildMaglevTable(backends(all.filter((id) => id !== 42)), M, SEED);
const without42 = Object.fromEntries(Object.entries(reals).filter(([id]) => id !== '42'));
const same = (a: Uint32Array | undefined, b: Uint32Array) => !!a && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
const state = (ring: Uint32Array, extra: Parameters<typeof makeState>[0]['services'] = []) => makeState({
  reals: ring === ringMinusOne ? without42 : reals, hashSeed: SEED, conntrackMaxEntries: 8192,
  services: [{ id: 1, vip: '203.0.113.10', forwarding: 'dsr-l2', ring }, ...extra],
});

let dp: LbDataPlaneHandle | null = null;
test.before(() => rmSync(PIN, { recursive: true, force: true }));
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

test.serial('one-real change at M=65537, N=100: one new ring, one switch, the real deleted after it', async (t) => {
  // a pin of the single shared ring of earlier versions is removed at load
  const old = BpfMap.create({ name: 'lb_ring', type: MapType.array, keySize: 4, valueSize: 4, maxEntries: 16 });
  old.pin(join(PIN, 'lb_ring'));
  old.close();
  dp = await openLbDataPlane({ pinRoot: PIN });
  const first = await applyTo(dp, state(ringAll));
  t.is(first.ringSwitches, 1);
  t.false(existsSync(join(PIN, 'lb_ring')));
  const ops = await planOf(dp, state(ringMinusOne));
  t.deepEqual(ops.map((o) => o.op), ['ring.fill', 'service.switch', 'real.delete']);
  t.log(ops.map(describeOp).join('\n'));
  const change = await dp.execute(ops);
  t.is(change.ringSwitches, 1);
  t.is(change.changedRingEntries, M, 'a ring is written whole into a new map, never in place');
  t.is(change.mapDeletes, 1, 'the removed real is deleted after the switch');
  const live = await dp.readLive({ tables: true });
  t.true(same(live.services[0]!.ring, ringMinusOne));
  t.false(live.reals.some((r) => r.id === 42));
  t.deepEqual(await planOf(dp, state(ringMinusOne)), [], 'read-back: nothing left to do');
});

test.serial('readLive identifies rings by their map: no table is read unless asked', async (t) => {
  const a = await dp!.readLive();
  t.is(a.services[0]!.ring, undefined);
  t.is(a.services[0]!.digest, state(ringMinusOne).services[0]!.digest);
  t.true(Number.isInteger(a.services[0]!.mapId));
  const verified = await dp!.readLive({ verify: true });
  t.deepEqual(verified.services.map((s) => [s.id, s.digest, s.mapId]), a.services.map((s) => [s.id, s.digest, s.mapId]));
});

test.serial('rings are frozen; a ring swapped in and then changed in place is found within one rotation', async (t) => {
  const outer = dp!.object()!.map('lb_rings');
  const key = Buffer.from([1, 0, 0, 0]);
  const ours = outer.openInner(key)!;
  t.is((t.throws(() => rewriteRingEntry(ours, 4, 99)) as BpfError).code, 'EPERM', 'no process can rewrite our ring');
  ours.close();
  // another writer swaps in a copy of the right ring that it can still write: a new identity, read at once, no drift
  const copy = writableRing(ringMinusOne);
  outer.setInner(key, copy);
  t.deepEqual(await planOf(dp!, state(ringMinusOne)), [], 'the copy holds the right table');
  // ... and then rewrites one entry in place: the identity is unchanged, so only the rotation can see it
  rewriteRingEntry(copy, 4, 99);
  copy.close();
  t.deepEqual(await planOf(dp!, state(ringMinusOne)), [], 'a plan without a rotation turn trusts the identity');
  let foundAt = -1;
  for (let turn = 0; turn < RING_ROTATION_CHECKS && foundAt < 0; turn++) {
    const live = await dp!.readLive({ verifyTurn: turn });
    if (live.services[0]!.digest !== state(ringMinusOne).services[0]!.digest) foundAt = turn;
  }
  t.is(foundAt, 1 % RING_ROTATION_CHECKS, `service 1 is due at turn ${1 % RING_ROTATION_CHECKS} of ${RING_ROTATION_CHECKS}`);
  t.deepEqual((await planOf(dp!, state(ringMinusOne))).map((o) => o.op), ['ring.fill', 'service.switch'], 'the tampered ring is replaced by a new one');
  await applyTo(dp!, state(ringMinusOne));
  t.deepEqual(await planOf(dp!, state(ringMinusOne)), []);
});

test.serial('a restarted data plane adopts the pinned maps and plans nothing when nothing changed', async (t) => {
  dp?.close();
  dp = await openLbDataPlane({ pinRoot: PIN });
  const live = await dp.readLive();
  t.is(live.services[0]!.digest, state(ringMinusOne).services[0]!.digest, 'digest of an unknown map: read once');
  t.is(live.settings?.hashSeed, SEED);
  t.deepEqual(await planOf(dp, state(ringMinusOne)), []);
  const again = await applyTo(dp, state(ringMinusOne));
  t.deepEqual(again, { ops: 0, mapWrites: 0, mapDeletes: 0, ringSwitches: 0, changedRingEntries: 0 });
});

test.serial('capacity: 100 SNAT services with 16381-entry tables join a running node with big tables, no restart', async (t) => {
  // the scenario that used to fail with "lb_ring: no room for a ring of 16381 entries": now each ring is its own map
  const ring16381 = Uint32Array.from({ length: 16381 }, (_, i) => 1 + (i % 41)); // real 42 is not in this state
  const big = Array.from({ length: 8 }, (_, i) => ({ id: 200 + i, vip: `203.0.113.${200 + i}`, forwarding: 'dsr-l2' as const, ring: ringMinusOne }));
  await applyTo(dp!, state(ringMinusOne, big));
  const snat = Array.from({ length: 100 }, (_, i) => ({ id: 1000 + i, vip: `198.51.100.${150 + (i % 50)}`, forwarding: 'snat' as const,
    ring: ring16381, ports: [{ port: 1000 + i, protocol: 'UDP' as const }] }));
  const r = await applyTo(dp!, state(ringMinusOne, [...big, ...snat]));
  t.is(r.ringSwitches, 100);
  t.is((await dp!.readLive()).services.length, 109);
  t.deepEqual(await planOf(dp!, state(ringMinusOne, [...big, ...snat])), []);
  const back = await applyTo(dp!, state(ringMinusOne));
  t.is(back.mapDeletes, 108 + 108 + 8 + 50, 'listeners, rings and the VIP address markers of the 108 services');
});

test.serial('a failed execute undoes every op it ran: the previous state stays intact', async (t) => {
  const before = await dp!.readLive();
  const extra = [{ id: 5, vip: '203.0.113.5', forwarding: 'dsr-l2' as const, ring: ringAll }];
  const ops = await planOf(dp!, state(ringAll, extra));
  t.true(ops.some((o) => o.op === 'real.put') && ops.some((o) => o.op === 'service.switch') && ops.some((o) => o.op === 'vip.put'));
  // an op the lb data plane cannot run, after reals, rings and listeners were written
  const poisoned: Op[] = [...ops, { op: 'backend-vip.put', entry: { kind: 'address', address: '203.0.113.5', family: 4, port: 0, protocol: null, targetPort: 0 }, before: null }];
  const err = await t.throwsAsync(dp!.execute(poisoned));
  t.regex(err!.message, /cannot execute 'backend-vip.put'/);
  const after = await dp!.readLive();
  t.deepEqual(after, before);
  // and the data plane still applies normally afterwards
  const ok = await applyTo(dp!, state(ringAll, extra));
  t.is(ok.ringSwitches, 2);
  t.true(same((await dp!.readLive({ tables: true })).services.find((s) => s.id === 5)!.ring, ringAll));
});

test.serial('bad desired state is refused naming the field', async (t) => {
  const bad = state(ringAll);
  bad.services[0]!.ring = new Uint32Array(M).fill(999);
  bad.services[0]!.digest = ringDigest(bad.services[0]!.ring); // as render would: a new ring, so it is written
  const err = await t.throwsAsync(applyTo(dp!, bad));
  t.regex(err!.message, /services\[svc-1\]\.ring\[0\]: real id 999 is not in reals/);
});
