// Transitions between two revisions that each fit an lb node's maps apply, whatever they replace (issue 15): the
// plan removes before it adds where no packet can tell, and goes in waves where old and new together exceed a
// map. Real maps under a per-run bpffs directory (no interface, no traffic): the kernel's own E2BIG is what would
// fail here. Every apply is read back (an empty plan) and its op order checked against what it must never do.
import test from 'ava';
import { rmSync } from 'node:fs';
import { LB_CAPACITY, openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { decodeVipValue, isMarkerKey } from '../../src/bpf/dataplane/codec.js';
import type { Op } from '../../src/render/ops.js';
import { PlanCapacityError } from '../../src/render/ops-plan.js';
import type { DesiredState } from '../../src/render/state.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { applyTo, planOf } from '../lib/converge.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-cap`;
let n = 0;
const pins: string[] = [];
async function fresh(): Promise<LbDataPlaneHandle> {
  const pin = `${PIN}-${n++}`;
  rmSync(pin, { recursive: true, force: true });
  pins.push(pin);
  return openLbDataPlane({ pinRoot: pin });
}
test.after.always(() => { for (const p of pins) rmSync(p, { recursive: true, force: true }); });

/** VIPs in 203.0.113.0/24 and 198.51.100.0/24 (documentation ranges), 16 ports each at most. */
const vipOf = (i: number) => `${i < 240 ? '203.0.113' : '192.0.2'}.${(i % 240) + 1}`;
const svc = (id: number, i: number, extra: Partial<SvcSpec> = {}): SvcSpec =>
  ({ id, vip: vipOf(i >> 4), forwarding: 'dsr-l2', ring: [1, 1, 1, 1, 1, 1, 1],
    ports: [{ port: 1000 + (i & 15), protocol: 'TCP' }], ...extra });
const state = (services: SvcSpec[], reals: Record<number, string> = { 1: '198.51.100.11' }) => makeState({ reals, services });

async function applyAndReadBack(t: import('ava').ExecutionContext, dp: LbDataPlaneHandle, d: DesiredState): Promise<Op[]> {
  const ops = await planOf(dp, d);
  const report = await dp.execute(ops, { desired: d });
  t.is(report.ops, ops.length);
  t.deepEqual(await planOf(dp, d), [], 'read-back: nothing left to do');
  return ops;
}

test.serial('1024 services (lb_rings full), one replaced by another: the old one goes first, then the new one is added', async (t) => {
  const dp = await fresh();
  try {
    const ids = Array.from({ length: LB_CAPACITY.services }, (_, i) => i + 1);
    await applyAndReadBack(t, dp, state(ids.map((id) => svc(id, id))));
    const ops = await applyAndReadBack(t, dp, state([...ids.slice(1).map((id) => svc(id, id)), svc(5000, 5000 % 1024 + 1024)]));
    // (service 1 shares its VIP address with others: its marker stays; service 5000 has an address of its own)
    t.deepEqual(ops.map((o) => o.op), ['vip.delete', 'service.delete', 'ring.fill', 'service.switch', 'marker.put', 'vip.put']);
    const live = await dp.readLive();
    t.is(live.services.length, LB_CAPACITY.services);
    t.true(live.services.some((s) => s.id === 5000));
    // the stats slot of the removed service went to the new one: 1024 services, 1024 distinct slots
    const slots = new Map<number, number>();
    for (const [k, v] of dp.object()!.map('lb_vips').entries()) {
      if (isMarkerKey(k)) continue;
      const val = decodeVipValue(v);
      slots.set(val.serviceId, val.statsSlot!);
    }
    t.is(slots.size, LB_CAPACITY.services);
    t.is(new Set(slots.values()).size, LB_CAPACITY.services, 'every service has a stats slot of its own');
    t.true([...slots.values()].every((s) => s < LB_CAPACITY.services));
  } finally {
    dp.close();
  }
});

test.serial('600 services all renamed on the same listeners: waves within the 1024 ring entries, no listener ever deleted', async (t) => {
  const dp = await fresh();
  try {
    const at = (base: number) => state(Array.from({ length: 600 }, (_, i) => svc(base + i, i)));
    await applyAndReadBack(t, dp, at(1));
    const ops = await applyAndReadBack(t, dp, at(10000));
    t.false(ops.some((o) => o.op === 'vip.delete' || o.op === 'marker.delete'), 'kept listeners are moved in place');
    const switches = ops.filter((o) => o.op === 'service.switch').length;
    t.is(switches, 600);
    // wave 1 fills the 424 free entries, wave 2 the rest once wave 1's old services are gone
    const firstDelete = ops.findIndex((o) => o.op === 'service.delete');
    t.is(ops.slice(0, firstDelete).filter((o) => o.op === 'service.switch').length, LB_CAPACITY.services - 600);
    t.deepEqual((await dp.readLive()).services.map((s) => s.id), Array.from({ length: 600 }, (_, i) => 10000 + i));
  } finally {
    dp.close();
  }
});

test.serial('2400 listeners + 40 VIP addresses, every port moved: removed listeners go before new ones (lb_vips 4096)', async (t) => {
  const dp = await fresh();
  try {
    const at = (base: number) => state(Array.from({ length: 40 }, (_, i) => ({ id: i + 1, vip: `203.0.113.${i + 1}`,
      forwarding: 'dsr-l2' as const, ring: [1, 1, 1], ports: Array.from({ length: 60 }, (_, p) => ({ port: base + p, protocol: 'TCP' as const })) })));
    await applyAndReadBack(t, dp, at(1000));
    const ops = await applyAndReadBack(t, dp, at(2000));
    t.is(ops.filter((o) => o.op === 'vip.delete').length, 2400);
    t.is(ops.filter((o) => o.op === 'vip.put').length, 2400);
    t.true(ops.findLastIndex((o) => o.op === 'vip.delete') < ops.findIndex((o) => o.op === 'vip.put'));
    t.is((await dp.readLive()).vips.length, 2400);
  } finally {
    dp.close();
  }
});

test.serial('reals: 60,000 live, all replaced (120,000 > 65,536 lb_reals): per-service waves; one ring too big for the room is refused before any write', async (t) => {
  const dp = await fresh();
  try {
    const PER = 2000;
    const realsOf = (base: number) => {
      const out: Record<number, string> = {};
      for (let i = 0; i < 30 * PER; i++) out[base + i] = `2001:db8:${(base >> 16).toString(16)}::${(i + 1).toString(16)}`;
      return out;
    };
    const at = (base: number) => state(Array.from({ length: 30 }, (_, s) =>
      svc(s + 1, s, { ring: Array.from({ length: PER }, (_, i) => base + s * PER + i) })), realsOf(base));
    await applyAndReadBack(t, dp, at(0x10000));
    const ops = await applyAndReadBack(t, dp, at(0x20000));
    const firstDelete = ops.findIndex((o) => o.op === 'real.delete');
    t.true(firstDelete > 0 && ops.slice(firstDelete).some((o) => o.op === 'service.switch'), 'room freed between switches');
    // never more than the map holds: count along the ops
    let held = 30 * PER;
    let peak = held;
    for (const o of ops) { if (o.op === 'real.put') peak = Math.max(peak, ++held); if (o.op === 'real.delete') held--; }
    t.true(peak <= LB_CAPACITY.reals, `peak ${peak}`);
    const live = await dp.readLive();
    t.is(live.reals.length, 30 * PER);
    t.true(live.reals.every((r) => r.id >= 0x20000));

    // one service whose 6,000 new reals exceed the 5,536 free entries while its old ring still names 2,000
    const big = at(0x20000);
    const before = await dp.readLive();
    const wide = state([...big.services.slice(1).map((s, i) => svc(s.id, i + 1, { ring: [...s.ring] })),
      svc(1, 0, { ring: Array.from({ length: 6000 }, (_, i) => 0x30000 + i) })],
    { ...Object.fromEntries(big.reals.filter((r) => r.id >= 0x20000 + PER).map((r) => [r.id, r.address])),
      ...Object.fromEntries(Array.from({ length: 6000 }, (_, i) => [0x30000 + i, `2001:db8:3::${(i + 1).toString(16)}`])) });
    const e = await t.throwsAsync(applyTo(dp, wide), { instanceOf: PlanCapacityError });
    t.regex(e!.message, /^lb_reals: the new ring of service svc-1 \(1\) needs 6000 reals the node does not hold, 5536 of 65536 entries are free/);
    t.deepEqual(await dp.readLive(), before, 'refused before anything was written');
  } finally {
    dp.close();
  }
});

test.serial('dsr-ipip sources: 9 IPv4 addresses are refused naming the field (lb_config holds 8); 8 apply and read back', async (t) => {
  const dp = await fresh();
  try {
    const at = (count: number) => makeState({ reals: { 1: '198.51.100.11' }, addresses: Array.from({ length: count }, (_, i) => `198.51.100.${100 + i}`),
      services: [{ id: 1, vip: '203.0.113.1', forwarding: 'dsr-ipip', ring: [1, 1, 1] }] });
    await t.throwsAsync(applyTo(dp, at(9)), { message: 'addresses: 9 IPv4 addresses, lb_config holds 8 dsr-ipip outer sources (lb_consts.h)' });
    await applyAndReadBack(t, dp, at(8));
    t.deepEqual((await dp.readLive()).settings!.src4, at(8).addresses);
  } finally {
    dp.close();
  }
});
