// apply()/readLive() of the LB data plane against the real kernel maps: cost of a one-real change on a
// 65537-entry Maglev ring with 100 reals (writes proportional to the change, one atomic switch), adoption
// after a restart (nothing changed -> nothing written), and rollback of a failed apply.
// No traffic and no interfaces: maps and programs only, pinned under a per-run bpffs directory.
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../src/bpf/dataplane/index.js';
import { buildMaglevTable } from '../src/render/maglev.js';
import { makeState } from './lib/lb-state.js';

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
const same = (a: Uint32Array, b: Uint32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
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

test.serial('one-real change at M=65537, N=100: writes proportional to the change, one atomic switch', async (t) => {
  dp = await openLbDataPlane({ pinRoot: PIN });
  const first = await dp.apply(state(ringAll));
  t.is(first.ringSwitches, 1);
  const moved = ringAll.reduce((n, r, i) => n + (r !== ringMinusOne[i] ? 1 : 0), 0);
  const t0 = process.hrtime.bigint();
  const change = await dp.apply(state(ringMinusOne));
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  t.log(`one-real change (real 42 of ${N} removed from a ${M}-entry ring): ${moved} ring entries differ; ` +
    `apply wrote ${change.changedRingEntries} ring entries + ${change.mapWrites - change.changedRingEntries} other map writes, ` +
    `${change.mapDeletes} deletes, ${change.ringSwitches} ring switch (one lb_services update), ${ms.toFixed(1)} ms`);
  console.log(`[xdp-apply] one-real change M=${M} N=${N}: changedRingEntries=${change.changedRingEntries} (of ${M}), ` +
    `mapWrites=${change.mapWrites}, mapDeletes=${change.mapDeletes}, ringSwitches=${change.ringSwitches}, ${ms.toFixed(1)} ms`);
  t.is(change.changedRingEntries, moved, 'the standby region was equal to the old ring, so only moved entries are written');
  t.true(moved < M / 50, `${moved} entries moved`);
  t.is(change.ringSwitches, 1);
  t.is(change.mapWrites, moved + 1, 'ring entries + the one service write that switches');
  t.is(change.mapDeletes, 1, 'the removed real is deleted after the switch');
  const live = await dp.readLive();
  t.true(same(live.services[0]!.ring, ringMinusOne));
  t.false(live.reals.some((r) => r.id === 42));

  // and back (a rollback): the standby region still holds ringAll, so switching back writes no ring entry
  const back = await dp.apply(state(ringAll));
  t.is(back.changedRingEntries, 0);
  t.is(back.ringSwitches, 1);
  t.true(same((await dp.readLive()).services[0]!.ring, ringAll));
});

test.serial('a restarted data plane adopts the pinned maps and writes nothing when nothing changed', async (t) => {
  dp?.close();
  dp = await openLbDataPlane({ pinRoot: PIN });
  const live = await dp.readLive();
  t.true(same(live.services[0]!.ring, ringAll));
  t.is(live.hashSeed, SEED);
  const again = await dp.apply(state(ringAll));
  t.deepEqual(again, { mapWrites: 0, mapDeletes: 0, ringSwitches: 0, changedRingEntries: 0 });
});

test.serial('a failed apply leaves the previous state intact', async (t) => {
  const before = await dp!.readLive();
  // ring capacity is 2^21 entries: two regions per service cannot hold 17 more rings of 65537
  const many = Array.from({ length: 17 }, (_, i) => ({ id: 10 + i, vip: `203.0.113.${20 + i}`, forwarding: 'dsr-l2' as const, ring: ringMinusOne }));
  const err = await t.throwsAsync(dp!.apply(state(ringMinusOne, many)));
  t.is((err as { code?: string }).code, 'E2BIG');
  const after = await dp!.readLive();
  t.deepEqual(after.vips, before.vips);
  t.deepEqual(after.reals, before.reals);
  t.deepEqual(after.services.map((s) => [s.id, s.digest]), before.services.map((s) => [s.id, s.digest]));
  // and the data plane still applies normally afterwards
  const ok = await dp!.apply(state(ringMinusOne));
  t.is(ok.ringSwitches, 1);
  t.true(same((await dp!.readLive()).services[0]!.ring, ringMinusOne));
});

test.serial('bad desired state is refused naming the field', async (t) => {
  const bad = state(ringAll);
  bad.services[0]!.ring = new Uint32Array(M).fill(999);
  const err = await t.throwsAsync(dp!.apply(bad));
  t.regex(err!.message, /services\[svc-1\]\.ring\[0\]: real id 999 is not in reals/);
});
