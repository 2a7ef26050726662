// The one plan engine (src/render/ops-plan.ts), pure: order, make-before-break after every single op, map occupancy
// within capacity after every single op (removals first, waves when old and new together do not fit), minimal
// ops, idempotence (live == desired -> no ops), backend entries, and the text `gitlb plan --live` prints.
import test from 'ava';
import { ringRealIds, EMPTY_LIVE, type LiveState, type Op } from '../../src/render/ops.js';
import { planOps, LB_MAP_CAPACITY, PlanCapacityError, type LbCapacity } from '../../src/render/ops-plan.js';
import { describeOp } from '../../src/render/ops-text.js';
import { applyOps, liveOf } from '../../src/render/ops-apply.js';
import type { DesiredState } from '../../src/render/state.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';

const REALS: Record<number, string> = { 1: '198.51.100.1', 2: '198.51.100.2', 3: '198.51.100.3', 4: '2001:db8::4' };
const ring = (...ids: number[]) => Array.from({ length: 13 }, (_, i) => ids[i % ids.length]!);
const svc = (id: number, vip: string, r: number[], extra: Partial<SvcSpec> = {}): SvcSpec =>
  ({ id, vip, forwarding: 'dsr-ipip', ring: ring(...r), ...extra });
const lb = (services: SvcSpec[], o: { mtu?: number; reals?: Record<number, string> } = {}): DesiredState => {
  const used = new Set(services.flatMap((s) => [...s.ring]));
  const reals = Object.fromEntries(Object.entries(o.reals ?? REALS).filter(([id]) => used.has(Number(id))));
  return makeState({ reals, services, addresses: ['198.51.100.250'], hashSeed: 5, ...(o.mtu && { mtu: o.mtu }) });
};

const A = lb([svc(10, '203.0.113.10', [1, 2]), svc(20, '203.0.113.20', [2, 3], { ports: [{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }] })]);
const kinds = (ops: Op[]) => ops.map((o) => o.op);

/** What refers to something missing in `s` (rings: the reals each live ring names). */
function violations(s: LiveState, rings: Map<number, number[]>): string[] {
  const out: string[] = [];
  const services = new Set(s.services.map((x) => x.id));
  const reals = new Set(s.reals.map((r) => r.id));
  for (const v of s.vips) if (!services.has(v.serviceId)) out.push(`listener ${v.vip}:${v.port} points at missing service ${v.serviceId}`);
  for (const x of s.services)
    for (const id of rings.get(x.id) ?? []) if (id && !reals.has(id)) out.push(`ring of ${x.id} names missing real ${id}`);
  for (const v of s.vips) if (!s.markers.some((m) => m.address === v.vip)) out.push(`listener ${v.vip} without its marker`);
  return out;
}

/** Make-before-break, checked on the state after every single op: nothing refers to something missing. */
function assertConsistent(t: import('ava').ExecutionContext, s: LiveState, rings: Map<number, number[]>, where: string): void {
  for (const v of violations(s, rings)) t.fail(`${where}: ${v}`);
}

/** The violations met along `ops` (fill+switch pairs applied together, as the data plane does). */
function violationsAlong(from: LiveState, ops: Op[]): string[] {
  let s = from;
  const rings = new Map<number, number[]>();
  const seed = (st: LiveState) => { for (const x of st.services) { const r = x.ring ? ringRealIds(x.ring) : x.reals; if (r) rings.set(x.id, [...r]); } };
  seed(s);
  const out: string[] = [];
  ops.forEach((o, i) => {
    if (o.op === 'ring.fill') return;
    const fill = o.op === 'service.switch' ? ops.find((f) => f.op === 'ring.fill' && f.serviceId === o.serviceId)! : null;
    s = applyOps(s, fill ? [fill, o] : [o]);
    seed(s);
    for (const v of violations(s, rings)) out.push(`after op ${i} (${o.op}): ${v}`);
  });
  return out;
}

function stepThrough(t: import('ava').ExecutionContext, from: LiveState, ops: Op[], cap: LbCapacity = LB_MAP_CAPACITY): LiveState {
  let s = from;
  const rings = new Map<number, number[]>();
  const seed = (st: LiveState) => { for (const x of st.services) { const r = x.ring ? ringRealIds(x.ring) : x.reals; if (r) rings.set(x.id, [...r]); } };
  seed(s);
  ops.forEach((o, i) => {
    // a ring fill is invisible until its switch; apply fill+switch pairs as the data plane does
    if (o.op === 'ring.fill') return;
    const fill = o.op === 'service.switch' ? ops.find((f) => f.op === 'ring.fill' && f.serviceId === o.serviceId)! : null;
    s = applyOps(s, fill ? [fill, o] : [o]);
    seed(s);
    assertConsistent(t, s, rings, `after op ${i} (${o.op})`);
    const where = `after op ${i} (${o.op})`;
    if (s.services.length > cap.services) t.fail(`${where}: ${s.services.length} rings, capacity ${cap.services}`);
    if (s.reals.length > cap.reals) t.fail(`${where}: ${s.reals.length} reals, capacity ${cap.reals}`);
    if (s.vips.length + s.markers.length > cap.vipEntries) t.fail(`${where}: ${s.vips.length + s.markers.length} lb_vips entries, capacity ${cap.vipEntries}`);
  });
  return s;
}

test('from empty: settings, reals, ring fills, switches, markers, listeners, in that order', (t) => {
  const ops = planOps(EMPTY_LIVE, A);
  t.deepEqual(kinds(ops), ['settings.set', 'snat.set', 'real.put', 'real.put', 'real.put', 'ring.fill', 'ring.fill',
    'service.switch', 'service.switch', 'marker.put', 'marker.put', 'vip.put', 'vip.put', 'vip.put']);
  const end = stepThrough(t, EMPTY_LIVE, ops);
  t.deepEqual(planOps(end, A), [], 'the end state needs nothing more');
});

test('idempotence: live == desired -> zero ops (lb and backend)', (t) => {
  t.deepEqual(planOps(liveOf(A), A), []);
  const be: DesiredState = { ...A, role: 'backend' };
  t.deepEqual(planOps(liveOf(be), be), []);
  t.deepEqual(planOps(applyOps(EMPTY_LIVE, planOps(EMPTY_LIVE, be)), be), []);
});

test('minimal: one real leaves one ring -> one fill, one switch, one real delete', (t) => {
  const B = lb([svc(10, '203.0.113.10', [2]), svc(20, '203.0.113.20', [2, 3], { ports: [{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }] })]);
  const ops = planOps(liveOf(A), B);
  t.deepEqual(kinds(ops), ['ring.fill', 'service.switch', 'real.delete']);
  t.is((ops[2] as Extract<Op, { op: 'real.delete' }>).real.id, 1);
  stepThrough(t, liveOf(A), ops);
});

test('a settings change alone (MTU) is one op; the SNAT address is one op', (t) => {
  const B = lb([svc(10, '203.0.113.10', [1, 2]), svc(20, '203.0.113.20', [2, 3], { ports: [{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }] })], { mtu: 9000 });
  t.deepEqual(kinds(planOps(liveOf(A), B)), ['settings.set']);
  const C: DesiredState = { ...A, snatAddress: '198.51.100.200' };
  const ops = planOps(liveOf(A), C);
  t.deepEqual(kinds(ops), ['snat.set']);
  t.regex(describeOp(ops[0]!), /lb_snat_config\[0\] = \{addr4 198\.51\.100\.200/);
});

test('removing a service: its listeners and marker go first, then its ring, then reals no ring uses', (t) => {
  const B = lb([svc(10, '203.0.113.10', [1, 2])]);
  const ops = planOps(liveOf(A), B);
  t.deepEqual(kinds(ops), ['vip.delete', 'vip.delete', 'marker.delete', 'service.delete', 'real.delete']);
  stepThrough(t, liveOf(A), ops);
});

test('moving a listener to a new service: the new ring is switched in before the listener points at it', (t) => {
  const B = lb([svc(10, '203.0.113.10', [1, 2]), svc(30, '203.0.113.20', [4], { ports: [{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }] })]);
  const ops = planOps(liveOf(A), B);
  t.deepEqual(kinds(ops), ['real.put', 'ring.fill', 'service.switch', 'vip.put', 'vip.put', 'service.delete', 'real.delete']);
  stepThrough(t, liveOf(A), ops);
});

test('every op is needed: random revisions, each op changes the state, the plan converges in one pass', (t) => {
  let x = 12345;
  const rnd = (n: number) => ((x = (x * 1103515245 + 12345) >>> 0) % n);
  let live = EMPTY_LIVE;
  for (let round = 0; round < 40; round++) {
    const services: SvcSpec[] = [];
    for (let id = 1; id <= 5; id++) {
      if (rnd(3) === 0) continue;
      const rs = [1, 2, 3].filter(() => rnd(2) === 0);
      services.push(svc(id, `203.0.113.${id + (rnd(4) === 0 ? 100 : 0)}`, rs.length ? rs : [1],
        { forwarding: rnd(2) ? 'dsr-ipip' : 'snat', ports: [{ port: 80, protocol: 'TCP', targetPort: 80 + rnd(2) }] }));
    }
    const d = lb(services, { mtu: 1500 + rnd(2) * 100 });
    const ops = planOps(live, d);
    const next = stepThrough(t, live, ops);
    t.deepEqual(planOps(next, d), [], `round ${round}: converged`);
    // minimal: dropping any single non-fill op leaves the plan unfinished
    ops.forEach((o, i) => {
      if (o.op === 'ring.fill') return;
      const fewer = ops.filter((_, j) => j !== i && !(o.op === 'service.switch' && ops[j]!.op === 'ring.fill' && (ops[j] as { serviceId: number }).serviceId === o.serviceId));
      t.notDeepEqual(planOps(applyOps(live, fewer), d), [], `round ${round}: op ${i} (${o.op}) was needed`);
    });
    live = next;
  }
});

test('backend: new and changed be_vips entries first, removals last', (t) => {
  const be = (s: SvcSpec[]): DesiredState => ({ ...lb(s), role: 'backend' });
  const A2 = be([svc(10, '203.0.113.10', [1], { forwarding: 'dsr-ipip' }), svc(20, '203.0.113.20', [1], { forwarding: 'dsr-ipopt', ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] })]);
  const B2 = be([svc(20, '203.0.113.20', [1], { forwarding: 'dsr-ipopt', ports: [{ port: 80, protocol: 'TCP', targetPort: 9090 }] }), svc(30, '203.0.113.30', [1], { forwarding: 'dsr-l2' })]);
  const ops = planOps(liveOf(A2), B2);
  // Every DSR VIP gets both entry kinds whatever its encap (docs/backend.md): the new l2 VIP gets two, the ipopt
  // listener changes its target, the removed ipip VIP loses both.
  t.deepEqual(ops.map(describeOp), [
    'be_vips[listener 203.0.113.20:80/TCP target 9090, still trusting 8080] (was listener 203.0.113.20:80/TCP target 8080)',
    'be_vips[address 203.0.113.30]',
    'be_vips[listener 203.0.113.30:80/TCP target 80]',
    'delete be_vips[address 203.0.113.10]',
    'delete be_vips[listener 203.0.113.10:80/TCP target 80]',
  ]);
});

test('backend: a listener moved to another targetPort keeps the one it leaves; nothing else carries one, and it never causes a write', (t) => {
  const be = (targetPort: number, forwarding: SvcSpec['forwarding'] = 'dsr-ipopt'): DesiredState =>
    ({ ...lb([svc(20, '203.0.113.20', [1], { forwarding, ports: [{ port: 80, protocol: 'TCP', targetPort }] })]), role: 'backend' });
  const first = planOps(EMPTY_LIVE, be(8080));
  t.false(first.some((o) => o.op === 'backend-vip.put' && o.entry.previousTargetPort !== undefined), 'a first apply has nothing to keep');
  const live = applyOps(EMPTY_LIVE, first);
  const moved = planOps(live, be(8099));
  t.deepEqual(moved.map(describeOp), ['be_vips[listener 203.0.113.20:80/TCP target 8099, still trusting 8080] (was listener 203.0.113.20:80/TCP target 8080)']);
  // The kernel holds the previous port now; the same revision again (a restarted daemon) writes nothing.
  const after = applyOps(live, moved);
  t.deepEqual(planOps(after, be(8099)), []);
  // The revert: back to 8080, still trusting 8099 (lb nodes that applied it, if any, are answered too).
  t.deepEqual(planOps(after, be(8080)).map(describeOp),
    ['be_vips[listener 203.0.113.20:80/TCP target 8080, still trusting 8099] (was listener 203.0.113.20:80/TCP target 8099, still trusting 8080)']);
  // Address entries hold no port; a listener leaving the kernel is deleted as before.
  t.true(moved.every((o) => o.op !== 'backend-vip.put' || o.entry.kind === 'listener'));
});

test('describeOp names the map and the key of every op', (t) => {
  const lines = planOps(EMPTY_LIVE, A).map(describeOp);
  t.regex(lines[0]!, /^lb_config\[0\] = \{seed 5, mtu 1500, src4 \[198\.51\.100\.250\]\}$/);
  t.true(lines.includes('lb_reals[1] = 198.51.100.1'));
  t.true(lines.some((l) => /^new ring for service svc-10 \(10\): 13 entries, digest [0-9a-f]{12}$/.test(l)));
  t.true(lines.some((l) => /^lb_rings\[10\] = ring [0-9a-f]{12} \(new service\)$/.test(l)));
  t.true(lines.includes('lb_vips[203.0.113.20:53/UDP] = {service 20, dsr-ipip, target 53, sport-hash}'));
  t.true(lines.includes('lb_vips[203.0.113.20 marker] = {}'));
});

// ------------------------------------------------------------------ room: removals first, waves, refusal

const room = (c: Partial<LbCapacity>): LbCapacity => ({ ...LB_MAP_CAPACITY, ...c });
const many: Record<number, string> = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [i + 1, `198.51.100.${i + 1}`]));

test('a service replaced by another with every map full: the removed listeners, marker and ring go first', (t) => {
  const cap = room({ services: 3, vipEntries: 6, reals: 3 });
  const from = lb([svc(1, '203.0.113.1', [1]), svc(2, '203.0.113.2', [2]), svc(3, '203.0.113.3', [3])], { reals: many });
  const to = lb([svc(1, '203.0.113.1', [1]), svc(2, '203.0.113.2', [2]), svc(4, '203.0.113.4', [4])], { reals: many });
  const ops = planOps(liveOf(from), to, cap);
  t.deepEqual(kinds(ops), ['vip.delete', 'marker.delete', 'service.delete', 'real.delete', 'real.put', 'ring.fill',
    'service.switch', 'marker.put', 'vip.put']);
  const end = stepThrough(t, liveOf(from), ops, cap);
  t.deepEqual(planOps(end, to, cap), []);
});

test('every service renamed on the same listeners, one free ring entry: waves, each listener moved in place', (t) => {
  const cap = room({ services: 3 });
  const ports = [{ port: 80, protocol: 'TCP' as const }, { port: 443, protocol: 'TCP' as const }];
  const from = lb([svc(1, '203.0.113.1', [1], { ports }), svc(2, '203.0.113.2', [2], { ports })], { reals: many });
  const to = lb([svc(11, '203.0.113.1', [1], { ports }), svc(12, '203.0.113.2', [2], { ports })], { reals: many });
  const ops = planOps(liveOf(from), to, cap);
  t.deepEqual(kinds(ops), ['ring.fill', 'service.switch', 'vip.put', 'vip.put', 'service.delete',
    'ring.fill', 'service.switch', 'vip.put', 'vip.put', 'service.delete']);
  t.false(ops.some((o) => o.op === 'vip.delete'), 'no listener of the revision is ever missing');
  const end = stepThrough(t, liveOf(from), ops, cap);
  t.deepEqual(planOps(end, to, cap), []);
  // with room for both, one wave: all switches in one batch, then the listeners, then the old rings
  t.deepEqual(kinds(planOps(liveOf(from), to)), ['ring.fill', 'ring.fill', 'service.switch', 'service.switch',
    'vip.put', 'vip.put', 'vip.put', 'vip.put', 'service.delete', 'service.delete']);
});

test('reals: old and new together exceed lb_reals: per-service waves, a real deleted once no live ring names it', (t) => {
  const cap = room({ reals: 5 }); // 3 live, 3 new: 6 would not fit
  const from = lb([svc(1, '203.0.113.1', [1, 2]), svc(2, '203.0.113.2', [3])], { reals: many });
  const to = lb([svc(1, '203.0.113.1', [4, 5]), svc(2, '203.0.113.2', [6])], { reals: many });
  const ops = planOps(liveOf(from), to, cap);
  t.deepEqual(ops.map((o) => (o.op === 'real.put' || o.op === 'real.delete' ? `${o.op} ${o.real.id}` : 'serviceId' in o ? `${o.op} ${o.serviceId}` : o.op)),
    ['real.put 4', 'real.put 5', 'ring.fill 1', 'service.switch 1', 'real.delete 1', 'real.delete 2', 'real.put 6',
      'ring.fill 2', 'service.switch 2', 'real.delete 3']);
  const end = stepThrough(t, liveOf(from), ops, cap);
  t.deepEqual(planOps(end, to, cap), []);
});

test('reals of a live ring of unknown content wait until that ring is switched (safe without the table)', (t) => {
  const from = lb([svc(1, '203.0.113.1', [1, 2]), svc(2, '203.0.113.2', [3])], { reals: many });
  const to = lb([svc(1, '203.0.113.1', [2]), svc(2, '203.0.113.2', [3, 4])], { reals: many });
  const blind: LiveState = { ...liveOf(from), services: liveOf(from).services.map(({ reals: _r, ...s }) => s) };
  const ops = planOps(blind, to);
  const del = ops.findIndex((o) => o.op === 'real.delete');
  t.true(del > ops.findLastIndex((o) => o.op === 'service.switch'), 'real 1 goes only after every unknown ring is switched');
  t.deepEqual(planOps(applyOps(blind, ops), to), []);
});

test('refused before any op: a ring whose new reals alone exceed the free room; renames with no free ring entry', (t) => {
  const from = lb([svc(1, '203.0.113.1', [1, 2, 3])], { reals: many });
  const to = lb([svc(1, '203.0.113.1', [4, 5])], { reals: many });
  const e = t.throws(() => planOps(liveOf(from), to, room({ reals: 4 })), { instanceOf: PlanCapacityError });
  t.regex(e!.message, /^lb_reals: the new ring of service svc-1 \(1\) needs 2 reals the node does not hold, 1 of 4 entries are free/);
  const full = lb([svc(1, '203.0.113.1', [1]), svc(2, '203.0.113.2', [2])], { reals: many });
  const renamed = lb([svc(11, '203.0.113.1', [1]), svc(12, '203.0.113.2', [2])], { reals: many });
  const e2 = t.throws(() => planOps(liveOf(full), renamed, room({ services: 2 })), { instanceOf: PlanCapacityError });
  t.regex(e2!.message, /^lb_rings: no free entry for new service svc-11 \(11\): 2 of 2 in use, 2 of them by services the revision removes/);
  t.throws(() => planOps(EMPTY_LIVE, full, room({ services: 1 })), { message: /^lb_rings: the revision needs 2 services, the map holds 1$/ });
});

test('benign changes at full capacity plan exactly the ops they did before (no extra ops)', (t) => {
  const cap = room({ services: 2, reals: 3, vipEntries: 4 });
  const from = lb([svc(1, '203.0.113.1', [1, 2]), svc(2, '203.0.113.2', [3])], { reals: many });
  t.deepEqual(planOps(liveOf(from), from, cap), []);
  const oneRing = lb([svc(1, '203.0.113.1', [1, 2, 2]), svc(2, '203.0.113.2', [3])], { reals: many });
  t.deepEqual(kinds(planOps(liveOf(from), oneRing, cap)), ['ring.fill', 'service.switch']);
  const mode = lb([svc(1, '203.0.113.1', [1, 2], { forwarding: 'snat' }), svc(2, '203.0.113.2', [3])], { reals: many });
  t.deepEqual(kinds(planOps(liveOf(from), mode, cap)), ['vip.put']);
});

test('random revisions within small maps: every plan keeps references whole and occupancy within capacity, or is refused', (t) => {
  const cap = room({ services: 3, reals: 4, vipEntries: 8 });
  let x = 777;
  const rnd = (n: number) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 16) % n;
  let live = EMPTY_LIVE;
  let applied = 0;
  let refused = 0;
  let interleaved = 0;
  for (let round = 0; round < 300; round++) {
    const services: SvcSpec[] = [];
    for (let id = 1; id <= 6 && services.length < cap.services; id++) {
      if (rnd(2) === 0) continue;
      const rs = [1, 2, 3, 4, 5, 6, 7].filter(() => rnd(4) === 0);
      const ports = [80, 443, 53].filter(() => rnd(2) === 0).map((port) => ({ port, protocol: 'TCP' as const }));
      services.push(svc(id, `203.0.113.${rnd(3) ? id : 1 + rnd(3)}`, rs.length ? rs : [1 + rnd(7)], { ports: ports.length ? ports : [{ port: 80, protocol: 'TCP' }] }));
    }
    const d = lb(services, { reals: many });
    const vipKeys = new Set(d.vips.map((v) => `${v.vip}|${v.port}`));
    if (d.reals.length > cap.reals || vipKeys.size !== d.vips.length || d.vips.length + new Set(d.vips.map((v) => v.vip)).size > cap.vipEntries) continue;
    let ops: Op[];
    try {
      ops = planOps(live, d, cap);
    } catch (e) {
      t.true(e instanceof PlanCapacityError, String(e));
      refused++;
      continue;
    }
    const firstFree = ops.findIndex((o) => o.op === 'service.delete' || o.op === 'real.delete');
    if (firstFree >= 0 && ops.slice(firstFree).some((o) => o.op === 'service.switch')) interleaved++;
    live = stepThrough(t, live, ops, cap);
    t.deepEqual(planOps(live, d, cap), [], `round ${round}: converged`);
    applied++;
  }
  t.log(`${applied} revisions applied (${interleaved} freed room before a switch), ${refused} refused`);
  t.true(applied > 50 && interleaved > 10);
});

test('guard: the removals-first order still never removes a ring or real a live listener or ring names (and the check sees it)', (t) => {
  // a listener moves from a removed service to a new one, and a real leaves a kept ring: the tempting orders
  // (ring deleted before the listener moves, real deleted before the ring is switched) are what the plan must not do
  const ports = [{ port: 53, protocol: 'UDP' as const }, { port: 53, protocol: 'TCP' as const }];
  const from = lb([svc(10, '203.0.113.10', [1, 2]), svc(20, '203.0.113.20', [2, 3], { ports })]);
  const to = lb([svc(10, '203.0.113.10', [2]), svc(30, '203.0.113.20', [3], { ports })]);
  for (const cap of [LB_MAP_CAPACITY, room({ services: 3, reals: 3 })]) {
    const ops = planOps(liveOf(from), to, cap);
    t.deepEqual(violationsAlong(liveOf(from), ops), []);
    t.deepEqual(planOps(applyOps(liveOf(from), ops), to, cap), []);
    const early = (kind: 'service.delete' | 'real.delete') => {
      const i = ops.findIndex((o) => o.op === kind);
      return [ops[i]!, ...ops.filter((_, j) => j !== i)];
    };
    t.regex(violationsAlong(liveOf(from), early('service.delete')).join('\n'), /listener 203\.0\.113\.20:53 points at missing service 20/);
    t.regex(violationsAlong(liveOf(from), early('real.delete')).join('\n'), /ring of 10 names missing real 1/);
  }
});
