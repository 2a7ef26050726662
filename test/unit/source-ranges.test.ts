// Service spec.sourceRanges through config, render and the planner (pure stages): canonical and ordered whatever the
// YAML says, refused with file:line:col when a prefix is wrong, over the caps, and planned so that a service with
// ranges never has a moment without its allowed prefixes (new prefixes before the listener flag, old ones after).
// Invalid prefixes (format, host bits, family, duplicates) are the fixture test/fixtures/config/invalid/source-ranges.
import test from 'ava';
import { type ConfigFile, LIMITS, formatDiagnostic, parseConfig } from '../../src/render/config/index.js';
import { DATAPLANE_LIMITS } from '../../src/render/config/limits.js';
import { desiredStateToJson, renderDesiredState } from '../../src/render/desired.js';
import { EMPTY_LIVE, desiredSourceRanges, type Op } from '../../src/render/ops.js';
import { PlanCapacityError, planOps } from '../../src/render/ops-plan.js';
import { describeOp } from '../../src/render/ops-text.js';
import { applyOps, liveOf } from '../../src/render/ops-apply.js';
import type { DesiredState } from '../../src/render/state.js';
import { planChanges } from '../../src/render/plan.js';
import { formatPlanText } from '../../src/render/plan-format.js';
import { formatDesiredStateText } from '../../src/render/desired-format.js';
import { validateDesired } from '../../src/bpf/dataplane/validate.js';

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const file = (path: string, text: string): ConfigFile => ({ path, content: enc(text) });
const CLUSTER = file('cluster.yaml', 'apiVersion: gitlb/v1\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n');
const LB = file('nodes.yaml', `apiVersion: gitlb/v1
kind: Node
metadata:
  name: lb-1
spec:
  role: lb
  interface: eth0
  allowedVips: [203.0.113.0/24, 2001:db8:ff::/64]
`);
const svc = (name: string, vip: string, ranges: string | null) => `apiVersion: gitlb/v1
kind: Service
metadata:
  name: ${name}
spec:
  vip: ${vip}
  ports: [{port: 80}, {port: 443}]
  dispatch: {mode: dsr, encap: l2}
  reals: [{address: ${vip.includes(':') ? '2001:db8:1::21' : '198.51.100.21'}}]
${ranges === null ? '' : `  sourceRanges: ${ranges}\n`}  healthCheck: {type: none}
`;
const parse = (...services: string[]) => parseConfig([CLUSTER, LB, file('services.yaml', services.join('---\n'))]);

test('the model holds canonical prefixes in one order, whatever the YAML spelling and order', (t) => {
  const a = parse(svc('web', '203.0.113.10', '[198.51.100.0/24, 192.0.2.128/25, 192.0.2.0/24]'),
    svc('web6', '2001:db8:ff::10', '[2001:DB8:0:0::/48, 2001:db8::/32]'));
  const b = parse(svc('web', '203.0.113.10', '[192.0.2.0/24, 198.51.100.0/24, 192.0.2.128/25]'),
    svc('web6', '2001:db8:ff::10', '[2001:db8::/32, 2001:db8::/48]'));
  t.deepEqual(a.diagnostics, []);
  t.deepEqual(a.model!.services.map((s) => s.spec.sourceRanges),
    [['192.0.2.0/24', '192.0.2.128/25', '198.51.100.0/24'], ['2001:db8::/32', '2001:db8::/48']]);
  // render is deterministic: the same bytes from either spelling (and the listeners say they check)
  const da = renderDesiredState(a.model!, 'lb-1');
  t.is(desiredStateToJson(da, { tables: true }), desiredStateToJson(renderDesiredState(b.model!, 'lb-1'), { tables: true }));
  t.deepEqual(Object.fromEntries(da.services.map((s) => [s.name, s.sourceRanges])),
    Object.fromEntries(a.model!.services.map((s) => [s.metadata.name, s.spec.sourceRanges])));
  t.true(da.vips.every((v) => v.sourceRanges === true));
  t.is(da.vips.length, 4, 'both ports of both services');
});

test('absent or empty sourceRanges: every client, no listener checks, nothing in the map', (t) => {
  const r = parse(svc('open', '203.0.113.10', null), svc('empty', '203.0.113.11', '[]'));
  t.deepEqual(r.diagnostics, []);
  t.true(r.model!.services.every((s) => s.spec.sourceRanges === undefined));
  const d = renderDesiredState(r.model!, 'lb-1');
  t.true(d.services.every((s) => !('sourceRanges' in s)));
  t.true(d.vips.every((v) => !('sourceRanges' in v)), 'desired-state JSON of a service without ranges is unchanged');
  t.deepEqual(desiredSourceRanges(d), []);
});

test('over 1024 prefixes in one service: schema error at the field', (t) => {
  const many = `[${Array.from({ length: LIMITS.maxSourceRangesPerService + 1 }, (_, i) => `192.0.${i >> 8}.${i & 255}/32`).join(', ')}]`;
  const r = parse(svc('web', '203.0.113.10', many));
  t.deepEqual(r.diagnostics.map(formatDiagnostic),
    [`services.yaml:10:17: error: spec.sourceRanges: must list at most ${LIMITS.maxSourceRangesPerService} items (got ${LIMITS.maxSourceRangesPerService + 1}); refused`]);
  t.is(r.model, null);
});

test('over 16384 prefixes on one lb node: error at its allowedVips; exactly 16384 is accepted', (t) => {
  const full = (n: number) => `[${Array.from({ length: n }, (_, i) => `10.${(i >> 8) & 255}.${i & 255}.0/24`).join(', ')}]`;
  const services = (last: number) => Array.from({ length: 16 }, (_, i) => svc(`s${i}`, `203.0.113.${10 + i}`, full(1024)))
    .concat(last ? [svc('last', '203.0.113.99', full(last))] : []);
  t.is(16 * 1024, DATAPLANE_LIMITS.lbSourceRanges);
  const ok = parse(...services(0));
  t.deepEqual(ok.diagnostics, []);
  const over = parse(...services(1));
  t.deepEqual(over.diagnostics.map(formatDiagnostic), [
    `nodes.yaml:8:16: error: lb node 'lb-1' would serve ${DATAPLANE_LIMITS.lbSourceRanges + 1} sourceRanges entries (at most ${DATAPLANE_LIMITS.lbSourceRanges} per lb node): more than its data plane can ever hold; narrow spec.allowedVips or spread the services over more lb nodes`,
  ]);
});

// ---- planner

const state = (ranges: Record<string, string[] | null>): DesiredState => {
  const names = Object.keys(ranges);
  const r = parse(...names.map((n, i) => svc(n, `203.0.113.${10 + i}`, ranges[n] ? `[${ranges[n]!.join(', ')}]` : null)));
  if (!r.model) throw new Error(r.diagnostics.map(formatDiagnostic).join('\n'));
  return renderDesiredState(r.model, 'lb-1');
};
const kinds = (ops: Op[]) => ops.filter((o) => o.op.startsWith('source-range') || o.op === 'vip.put').map((o) =>
  o.op === 'vip.put' ? `vip ${o.vip.port}${o.vip.sourceRanges ? ' checks' : ''}` : `${o.op === 'source-range.put' ? '+' : '-'}${o.range.prefix}`);

test('a new service with ranges: its prefixes are in before any of its listeners', (t) => {
  const ops = planOps(EMPTY_LIVE, state({ web: ['192.0.2.0/24', '198.51.100.0/24'] }));
  t.deepEqual(kinds(ops), ['+192.0.2.0/24', '+198.51.100.0/24', 'vip 80 checks', 'vip 443 checks']);
  t.true(ops.some((o) => describeOp(o).startsWith('lb_source_ranges[service ') && describeOp(o).endsWith(', 192.0.2.0/24] = allow')));
});

test('ranges change: new prefixes first, the old one last (the service always has its allowed clients)', (t) => {
  const before = state({ web: ['192.0.2.0/24', '198.51.100.0/24'] });
  const after = state({ web: ['192.0.2.0/24', '203.0.113.128/25'] });
  const ops = planOps(liveOf(before), after);
  t.deepEqual(kinds(ops), ['+203.0.113.128/25', '-198.51.100.0/24'], 'the listeners keep checking: no vip op');
  t.deepEqual(applyOps(liveOf(before), ops), liveOf(after));
  t.deepEqual(planOps(applyOps(liveOf(before), ops), after), [], 'read-back: nothing left');
});

test('ranges added to a service: prefixes, then the flag; removed: the flag cleared, then the prefixes', (t) => {
  const open = state({ web: null });
  const closed = state({ web: ['192.0.2.0/24'] });
  t.deepEqual(kinds(planOps(liveOf(open), closed)), ['+192.0.2.0/24', 'vip 80 checks', 'vip 443 checks']);
  const ops = planOps(liveOf(closed), open);
  t.deepEqual(kinds(ops), ['vip 80', 'vip 443', '-192.0.2.0/24']);
  t.deepEqual(applyOps(liveOf(closed), ops), liveOf(open));
});

test('prefixes of a service no listener checks any more go first, freeing room; a live map too full is refused', (t) => {
  const a = state({ web: ['192.0.2.0/24'] });
  // a leftover of a failed apply: prefixes of a service that no listener names
  const live = { ...liveOf(a), sourceRanges: [...liveOf(a).sourceRanges, { serviceId: 4242, prefix: '198.51.100.0/24' }] };
  const ops = planOps(live, a);
  t.deepEqual(ops.map(describeOp), ['delete lb_source_ranges[service 4242, 198.51.100.0/24]']);
  const b = state({ web: ['192.0.2.0/25', '192.0.2.128/25'] });
  const cap = { services: 1024, vipEntries: 4096, reals: 65536, sourceRanges: 2 };
  const e = t.throws(() => planOps(liveOf(a), b, cap), { instanceOf: PlanCapacityError });
  t.regex(e.message, /lb_source_ranges: 1 entries listeners still check plus 2 new ones exceed the 2 it holds/);
  t.notThrows(() => planOps(liveOf(a), b, { ...cap, sourceRanges: 3 }));
});

// ---- gitlb plan (revision to revision)

test('gitlb plan names a sourceRanges change, and warns when clients lose access (open connections included)', (t) => {
  const m = (ranges: string | null) => parse(svc('web', '203.0.113.10', ranges)).model!;
  const narrowed = planChanges(m('[192.0.2.0/24]'), m('[192.0.2.0/25]'));
  t.true(narrowed.changed);
  t.deepEqual(narrowed.services[0]!.fields, [{ field: 'sourceRanges', before: '192.0.2.0/24', after: '192.0.2.0/25' }]);
  t.is(narrowed.services[0]!.movedEntries, 0, 'no flow changes real');
  t.regex(narrowed.services[0]!.warnings.join('\n'), /clients outside the new ranges are dropped .* open connections included/);
  t.regex(formatPlanText(narrowed), /sourceRanges: 192\.0\.2\.0\/24 -> 192\.0\.2\.0\/25/);
  const closed = planChanges(m(null), m('[192.0.2.0/24]'));
  t.deepEqual(closed.services[0]!.fields, [{ field: 'sourceRanges', before: 'any client', after: '192.0.2.0/24' }]);
  t.is(closed.services[0]!.warnings.length, 1);
  // widening takes nobody's access away: no warning
  for (const [b, h] of [['[192.0.2.0/25]', '[192.0.2.0/24]'], ['[192.0.2.0/24]', null], ['[192.0.2.0/25, 192.0.2.128/25]', '[192.0.2.0/24]']] as const) {
    const p = planChanges(m(b), m(h));
    t.true(p.changed);
    t.deepEqual(p.services[0]!.warnings, [], `${b} -> ${h}`);
  }
  t.false(planChanges(m('[192.0.2.0/24]'), m('[192.0.2.0/24]')).changed);
});

test('gitlb render --format text lists a service\'s source ranges', (t) => {
  const text = formatDesiredStateText(state({ web: ['192.0.2.0/24', '198.51.100.0/24'], open: null }));
  t.regex(text, /\n {2}web {2}id \d+ .*\n {4}source ranges \(only these clients\): 192\.0\.2\.0\/24 198\.51\.100\.0\/24\n/);
  t.is(text.match(/source ranges/g)!.length, 1, 'nothing for the service without');
});

test('the data plane refuses a desired state whose ranges it cannot represent, naming the field', (t) => {
  const good = state({ web: ['192.0.2.0/24'], open: null });
  t.notThrows(() => validateDesired(good));
  const web = good.services.find((s) => s.name === 'web')!;
  const open = good.services.find((s) => s.name === 'open')!;
  const withService = (svc: Partial<typeof web>, id = web.id): DesiredState =>
    ({ ...good, services: good.services.map((s) => (s.id === id ? { ...s, ...svc } : s)) });
  const cases: Array<[DesiredState, RegExp]> = [
    [withService({ sourceRanges: ['192.0.2.1/24'] }), /services\[web\]\.sourceRanges\[0\]: '192\.0\.2\.1\/24' is not a canonical prefix/],
    [withService({ sourceRanges: ['2001:db8::/32'] }), /services\[web\]\.sourceRanges\[0\]: 2001:db8::\/32 is not of the VIP's family \(IPv4\)/],
    [withService({ sourceRanges: undefined }), /vips\[203\.0\.113\.\d+:80\/TCP\]\.sourceRanges: set, but service \d+ has no sourceRanges/],
    [withService({ sourceRanges: ['192.0.2.0/24'] }, open.id), /vips\[203\.0\.113\.\d+:80\/TCP\]\.sourceRanges: absent, but service \d+ has sourceRanges/],
  ];
  for (const [d, re] of cases) t.throws(() => validateDesired(d), { message: re });
});
