// The one plan engine (src/render/ops.ts), pure: order, make-before-break after every single op, minimal ops,
// idempotence (live == desired -> no ops), backend entries, and the text `gitlb plan --live` prints.
import test from 'ava';
import { applyOps, describeOp, liveOf, planOps, EMPTY_LIVE, type LiveState, type Op } from '../src/render/ops.js';
import type { DesiredState } from '../src/render/state.js';
import { makeState, type SvcSpec } from './lib/lb-state.js';

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

/** Make-before-break, checked on the state after every single op: nothing refers to something missing. */
function assertConsistent(t: import('ava').ExecutionContext, s: LiveState, rings: Map<number, number[]>, where: string): void {
  const services = new Set(s.services.map((x) => x.id));
  const reals = new Set(s.reals.map((r) => r.id));
  for (const v of s.vips) t.true(services.has(v.serviceId), `${where}: listener ${v.vip}:${v.port} points at missing service ${v.serviceId}`);
  for (const x of s.services)
    for (const id of rings.get(x.id) ?? []) if (id) t.true(reals.has(id), `${where}: ring of ${x.id} names missing real ${id}`);
  for (const v of s.vips) t.true(s.markers.some((m) => m.address === v.vip), `${where}: listener ${v.vip} without its marker`);
}

function stepThrough(t: import('ava').ExecutionContext, from: LiveState, ops: Op[]): LiveState {
  let s = from;
  const rings = new Map<number, number[]>();
  const seed = (st: LiveState) => { for (const x of st.services) if (x.ring) rings.set(x.id, [...x.ring]); };
  seed(s);
  ops.forEach((o, i) => {
    // a ring fill is invisible until its switch; apply fill+switch pairs as the data plane does
    if (o.op === 'ring.fill') return;
    const fill = o.op === 'service.switch' ? ops.find((f) => f.op === 'ring.fill' && f.serviceId === o.serviceId)! : null;
    s = applyOps(s, fill ? [fill, o] : [o]);
    seed(s);
    assertConsistent(t, s, rings, `after op ${i} (${o.op})`);
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
