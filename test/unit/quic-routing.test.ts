// QUIC connection-ID routing in the config stage, render and the plan (docs/config.md "quic", docs/datapath.md "QUIC
// connection IDs"): spec.reals[].serverId bounds and uniqueness with file:line:col errors, the dsr-only rule, the
// warnings for settings that do nothing; render's server list (healthy reals only, drained ones kept, the flag on the
// dsr UDP listeners only); the plan's order against reals (deletes before any real goes, puts after every real is in)
// and a changed id as one update; the data plane's own validation.
import test from 'ava';
import { formatDiagnostic, parseConfig, type ConfigFile } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import type { Op } from '../../src/render/ops.js';
import { planOps } from '../../src/render/ops-plan.js';
import { describeOp } from '../../src/render/ops-text.js';
import { applyOps, liveOf } from '../../src/render/ops-apply.js';
import { validateDesired } from '../../src/bpf/dataplane/validate.js';
import { planChanges } from '../../src/render/plan.js';
import { formatPlanText } from '../../src/render/plan-format.js';
import type { DesiredState } from '../../src/render/state.js';

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const file = (path: string, text: string): ConfigFile => ({ path, content: enc(text) });
const CLUSTER = 'apiVersion: gitlb/v1\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n';
const LB = `apiVersion: gitlb/v1
kind: Node
metadata:
  name: lb-1
spec:
  role: lb
  interface: eth0
  allowedVips: [203.0.113.0/24]
  snatAddress: 198.51.100.111
  addresses: [198.51.100.200]
`;
const A = '198.51.100.1';
const B = '198.51.100.2';
const C = '198.51.100.3';
interface Real { address: string; serverId?: number | string; state?: string }
const svc = (reals: Real[], opts: { quic?: string; dispatch?: string; ports?: string } = {}) => `apiVersion: gitlb/v1
kind: Service
metadata:
  name: web
spec:
  vip: 203.0.113.10
  ports: ${opts.ports ?? '[{port: 443, protocol: UDP}, {port: 443, protocol: TCP}]'}
  dispatch: ${opts.dispatch ?? '{mode: dsr, encap: ipip}'}
  healthCheck: {type: none}
${opts.quic ?? '  quic: {connectionIdRouting: true}\n'}  reals:
${reals.map((r) => `    - address: ${r.address}\n${r.serverId !== undefined ? `      serverId: ${r.serverId}\n` : ''}${r.state ? `      state: ${r.state}\n` : ''}`).join('')}`;
const parse = (service: string) =>
  parseConfig([file('cluster.yaml', CLUSTER), file('nodes/lb-1.yaml', LB), file('services/web.yaml', service)]);
const lines = (service: string) => parse(service).diagnostics.map(formatDiagnostic);
const render = (service: string, down: string[] = []): DesiredState => {
  const { model, diagnostics } = parse(service);
  if (!model) throw new Error(diagnostics.map(formatDiagnostic).join('\n'));
  return renderDesiredState(model, 'lb-1', { isHealthy: (_s, address) => !down.includes(address) });
};

test('serverId: 1..4294967295, an integer, errors at file:line:col', (t) => {
  for (const ok of [1, 65535, 16777215, 4294967295]) {
    const { model, diagnostics } = parse(svc([{ address: A, serverId: ok }]));
    t.deepEqual(diagnostics.map(formatDiagnostic), [], `serverId ${ok}`);
    t.is(model!.services[0]!.spec.reals[0]!.serverId, ok);
  }
  for (const bad of ['0', '4294967296', '1.5', '"7"', '-1']) {
    const out = lines(svc([{ address: A, serverId: bad }]));
    t.true(out.some((l) => l.startsWith('services/web.yaml:13:17: error:') && l.includes('serverId')), `${bad}: ${out.join(' | ')}`);
  }
  const misspelt = lines(svc([{ address: A, serverId: 3 }], { quic: '  quic: {connectionIDRouting: true}\n' }));
  t.true(misspelt.some((l) => l.startsWith('services/web.yaml:10:') && l.includes("unknown field 'spec.quic.connectionIDRouting'")), misspelt.join(' | '));
});

test('a server id names one real of the service: a second use is an error at the second one', (t) => {
  const out = lines(svc([{ address: A, serverId: 7 }, { address: B, serverId: 8 }, { address: C, serverId: 7 }]));
  t.deepEqual(out.filter((l) => l.includes('error')), [
    'services/web.yaml:17:17: error: spec.reals[2].serverId: server id 7 is already spec.reals[0].serverId (a server id names one real of the service)',
  ]);
  // the same id in two services is fine (ids are per service), and so is a real without one
  t.deepEqual(lines(svc([{ address: A, serverId: 7 }, { address: B }])), []);
});

test('connection-ID routing needs dispatch mode dsr; settings that do nothing are warnings', (t) => {
  for (const dispatch of ['{mode: snat}', '{mode: hybrid, encap: ipip}']) {
    const out = lines(svc([{ address: A, serverId: 1 }], { dispatch }));
    t.true(out.some((l) => l.startsWith('services/web.yaml:10:') && l.includes('error: spec.quic.connectionIdRouting: needs dispatch mode dsr')), `${dispatch}: ${out.join(' | ')}`);
  }
  for (const dispatch of ['{mode: dsr, encap: l2}', '{mode: dsr, encap: ipip}', '{mode: dsr, encap: ipopt}'])
    t.deepEqual(lines(svc([{ address: A, serverId: 1 }], { dispatch })), [], dispatch);
  t.deepEqual(lines(svc([{ address: A, serverId: 1 }], { quic: '' })),
    ['services/web.yaml:12:17: warning: spec.reals[0].serverId: has no effect without spec.quic.connectionIdRouting: true']);
  t.deepEqual(lines(svc([{ address: A }])),
    ['services/web.yaml:10:31: warning: spec.quic.connectionIdRouting: no real has a spec.reals[].serverId, so no packet is routed by connection ID']);
  t.deepEqual(lines(svc([{ address: A, serverId: 1 }], { ports: '[{port: 443}]' })),
    ['services/web.yaml:10:31: warning: spec.quic.connectionIdRouting: the service has no UDP port, so no packet is routed by connection ID']);
});

test('render: the server ids of healthy reals (drained included, disabled and unhealthy not), the flag on dsr UDP listeners only', (t) => {
  const reals: Real[] = [{ address: A, serverId: 30 }, { address: B, serverId: 10, state: 'drain' }, { address: C, serverId: 20, state: 'disabled' }];
  const d = render(svc(reals));
  const ids = new Map(d.services[0]!.reals.map((r) => [r.address, r.realId]));
  t.deepEqual(d.services[0]!.quic, { servers: [{ serverId: 10, realId: ids.get(B)! }, { serverId: 30, realId: ids.get(A)! }] });
  t.deepEqual(d.vips.map((v) => [v.protocol, v.quic ?? false]), [['TCP', false], ['UDP', true]]);
  const down = render(svc(reals), [A]);
  t.deepEqual(down.services[0]!.quic, { servers: [{ serverId: 10, realId: ids.get(B)! }] }, 'an unhealthy real loses its id: its packets go by the table');
  t.deepEqual(render(svc(reals)), d, 'deterministic: the same config renders the same state');
  const off = render(svc(reals, { quic: '' }));
  t.false('quic' in off.services[0]!);
  t.false(off.vips.some((v) => 'quic' in v));
  t.is(off.services[0]!.digest, d.services[0]!.digest, 'server ids do not change the Maglev table');
  validateDesired(d);
  validateDesired(down);
});

test('plan: turning routing on puts the ids after the listeners are written; off deletes them first', (t) => {
  const reals: Real[] = [{ address: A, serverId: 1 }, { address: B, serverId: 2 }];
  const off = render(svc(reals, { quic: '' }));
  const on = render(svc(reals));
  let ops = planOps(liveOf(off), on);
  t.deepEqual(ops.map((o) => o.op), ['vip.put', 'quic-server.put', 'quic-server.put']);
  t.regex(describeOp(ops[1]!), /^lb_quic_servers\[service \d+, server id 1\] = real \d+$/);
  t.true(describeOp(ops[0]!).includes(', quic'), describeOp(ops[0]!));
  t.deepEqual(planOps(applyOps(liveOf(off), ops), on), [], 'converged');
  ops = planOps(liveOf(on), off);
  t.deepEqual(ops.map((o) => o.op), ['quic-server.delete', 'quic-server.delete', 'vip.put']);
  t.deepEqual(planOps(applyOps(liveOf(on), ops), off), []);
});

test('plan: a server id moved to another real is one put; a real removed loses its id before it goes, a new one gets it after it is in', (t) => {
  const before = render(svc([{ address: A, serverId: 1 }, { address: B, serverId: 2 }]));
  const swapped = render(svc([{ address: A, serverId: 2 }, { address: B, serverId: 1 }]));
  let ops = planOps(liveOf(before), swapped);
  t.deepEqual(ops.map((o) => o.op), ['quic-server.put', 'quic-server.put'], 'two replacements, no delete: a packet finds one real or the other');
  t.true(ops.every((o) => o.op === 'quic-server.put' && o.before !== null));

  // B leaves, C arrives with B's server id: the entry naming B goes before B, C's entry comes after C
  const replaced = render(svc([{ address: A, serverId: 1 }, { address: C, serverId: 2 }]));
  ops = planOps(liveOf(before), replaced);
  const kinds = ops.map((o) => o.op);
  const at = (pred: (o: Op) => boolean) => ops.findIndex(pred);
  const bId = before.services[0]!.reals.find((r) => r.address === B)!.realId;
  const cId = replaced.services[0]!.reals.find((r) => r.address === C)!.realId;
  const delB = at((o) => o.op === 'quic-server.delete' && o.entry.realId === bId);
  const realDelB = at((o) => o.op === 'real.delete' && o.real.id === bId);
  const putC = at((o) => o.op === 'quic-server.put' && o.entry.realId === cId);
  const realPutC = at((o) => o.op === 'real.put' && o.real.id === cId);
  t.true(delB >= 0 && realDelB > delB, kinds.join(' '));
  t.true(realPutC >= 0 && putC > realPutC, kinds.join(' '));
  t.deepEqual(planOps(applyOps(liveOf(before), ops), replaced), []);

  // a health flip takes the id out and puts it back, nothing else
  const down = render(svc([{ address: A, serverId: 1 }, { address: B, serverId: 2 }]), [B]);
  ops = planOps(liveOf(before), down);
  t.deepEqual(ops.filter((o) => o.op.startsWith('quic')).map((o) => o.op), ['quic-server.delete']);
  t.deepEqual(planOps(liveOf(down), before).filter((o) => o.op.startsWith('quic')).map((o) => o.op), ['quic-server.put']);
});

test('the data plane refuses QUIC state it cannot hold, naming the field', (t) => {
  const d = render(svc([{ address: A, serverId: 1 }, { address: B, serverId: 2 }]));
  const s = d.services[0]!;
  const bad = (change: (x: DesiredState) => void) => {
    const x = structuredClone(d);
    change(x);
    return t.throws(() => validateDesired(x))!.message;
  };
  t.regex(bad((x) => { x.services[0]!.quic!.servers[1]!.serverId = 1; }), /quic\.servers\[1\]\.serverId: 1 is listed twice/);
  t.regex(bad((x) => { x.services[0]!.quic!.servers[0]!.serverId = 0; }), /serverId: 0 is not a u32 >= 1/);
  t.regex(bad((x) => { x.services[0]!.quic!.servers[0]!.realId = 999; }), /realId: real 999 is not a real of the service/);
  t.regex(bad((x) => { delete x.vips.find((v) => v.protocol === 'UDP')!.quic; }), /\.quic: absent, but it is a dsr UDP listener/);
  t.regex(bad((x) => { x.vips.find((v) => v.protocol === 'TCP')!.quic = true; }), /\.quic: set, but it is not/);
  t.truthy(s.quic);
});

test('gitlb plan names server id and routing changes, and warns when an id of a staying real stops routing', (t) => {
  const m = (reals: Real[], quic?: string) => parse(svc(reals, quic === undefined ? {} : { quic })).model!;
  const base = m([{ address: A, serverId: 1 }, { address: B, serverId: 2 }]);
  const changed = planChanges(base, m([{ address: A, serverId: 1 }, { address: B, serverId: 3 }]));
  t.true(changed.changed);
  t.deepEqual(changed.services[0]!.fields, [{ field: 'reals[].serverId', before: `${A}=1,${B}=2`, after: `${A}=1,${B}=3` }]);
  t.is(changed.services[0]!.movedEntries, 0, 'server ids move no table entry');
  t.regex(changed.services[0]!.warnings.join('\n'), new RegExp(`QUIC server ids ${B.replace(/\./g, '\\.')}=2 no longer route`));
  t.regex(formatPlanText(changed), /reals\[\]\.serverId: /);
  const off = planChanges(base, m([{ address: A, serverId: 1 }, { address: B, serverId: 2 }], ''));
  t.deepEqual(off.services[0]!.fields.map((f) => f.field), ['quic.connectionIdRouting']);
  t.is(off.services[0]!.warnings.length, 1, 'turning routing off warns');
  // benign: turning it on, adding an id, removing a real with its id warn of nothing
  for (const [b, h] of [
    [m([{ address: A, serverId: 1 }], ''), m([{ address: A, serverId: 1 }])],
    [m([{ address: A, serverId: 1 }, { address: B }]), m([{ address: A, serverId: 1 }, { address: B, serverId: 2 }])],
    [base, m([{ address: A, serverId: 1 }])],
  ] as const) {
    const p = planChanges(b, h);
    t.true(p.changed);
    t.deepEqual(p.services[0]!.warnings, []);
  }
  t.false(planChanges(base, m([{ address: A, serverId: 1 }, { address: B, serverId: 2 }])).changed);
});
