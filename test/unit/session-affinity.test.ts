// Session affinity in the config stage and render (docs/config.md "sessionAffinity", docs/render.md): the schema's
// bounds with file:line:col errors, the Kubernetes default, every dispatch mode accepted, and the per-service
// setting carried into the service and each of its listeners, where the planner sees a change as a vip.put.
import test from 'ava';
import { formatDiagnostic, parseConfig, type ConfigFile } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { planOps } from '../../src/render/ops-plan.js';
import { describeOp } from '../../src/render/ops-text.js';
import { liveOf } from '../../src/render/ops-apply.js';
import { validateDesired } from '../../src/bpf/dataplane/validate.js';

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
const svc = (affinity: string, dispatch = '{mode: dsr, encap: ipip}', ports = '[{port: 80}]') => `apiVersion: gitlb/v1
kind: Service
metadata:
  name: web
spec:
  vip: 203.0.113.10
  ports: ${ports}
  dispatch: ${dispatch}
  reals: [{address: 198.51.100.1}, {address: 198.51.100.2}]
  healthCheck: {type: none}
${affinity}`;
const parse = (service: string) =>
  parseConfig([file('cluster.yaml', CLUSTER), file('nodes/lb-1.yaml', LB), file('services/web.yaml', service)]);

test('sessionAffinity: clientIP defaults to the Kubernetes timeout of 10800 s', (t) => {
  for (const text of ['  sessionAffinity: {}\n', '  sessionAffinity: {clientIP: {}}\n']) {
    const { model, diagnostics } = parse(svc(text));
    t.deepEqual(diagnostics, []);
    t.deepEqual(model!.services[0]!.spec.sessionAffinity, { clientIP: { timeout: 10800 } }, text);
  }
  const { model } = parse(svc(''));
  t.is(model!.services[0]!.spec.sessionAffinity, undefined, 'absent: no affinity');
});

test('sessionAffinity: timeout bounds 1..86400, an integer, errors at file:line:col', (t) => {
  for (const ok of [1, 86400]) {
    const { model, diagnostics } = parse(svc(`  sessionAffinity:\n    clientIP:\n      timeout: ${ok}\n`));
    t.deepEqual(diagnostics, [], `timeout ${ok}`);
    t.is(model!.services[0]!.spec.sessionAffinity!.clientIP.timeout, ok);
  }
  for (const bad of ['0', '86401', '1.5', '"10s"', '-3']) {
    const { model, diagnostics } = parse(svc(`  sessionAffinity:\n    clientIP:\n      timeout: ${bad}\n`));
    t.is(model, null, bad);
    const lines = diagnostics.map(formatDiagnostic);
    t.true(lines.some((l) => l.startsWith('services/web.yaml:13:16: error:') && l.includes('timeout')), `${bad}: ${lines.join(' | ')}`);
  }
  const { model, diagnostics } = parse(svc('  sessionAffinity: {clientIp: {timeout: 10}}\n'));
  t.is(model, null, 'a misspelt key is refused, not ignored');
  t.true(diagnostics.map(formatDiagnostic).some((l) => l === "services/web.yaml:11:21: error: unknown field 'spec.sessionAffinity.clientIp' (did you mean 'clientIP'?)"), diagnostics.map(formatDiagnostic).join(' | '));
});

test('sessionAffinity is accepted in every dispatch mode', (t) => {
  for (const dispatch of ['{mode: dsr, encap: l2}', '{mode: dsr, encap: ipip}', '{mode: dsr, encap: ipopt}', '{mode: snat}', '{mode: hybrid, encap: ipip}']) {
    const { model, diagnostics } = parse(svc('  sessionAffinity: {clientIP: {timeout: 600}}\n', dispatch, '[{port: 80}, {port: 53, protocol: UDP}]'));
    t.deepEqual(diagnostics.map(formatDiagnostic), [], dispatch);
    t.truthy(model, dispatch);
  }
});

test('render: the timeout goes into the service and every one of its listeners, whatever their forwarding', (t) => {
  const { model } = parse(svc('  sessionAffinity: {clientIP: {timeout: 600}}\n', '{mode: hybrid, encap: ipip}', '[{port: 80}, {port: 53, protocol: UDP}]'));
  const d = renderDesiredState(model!, 'lb-1');
  t.deepEqual(d.services[0]!.sessionAffinity, { timeoutS: 600 });
  t.deepEqual(d.vips.map((v) => [v.forwarding, v.affinityTimeoutS]), [['snat', 600], ['dsr-ipip', 600]]);
  // deterministic: the same model renders the same bytes
  t.deepEqual(renderDesiredState(parse(svc('  sessionAffinity: {clientIP: {timeout: 600}}\n', '{mode: hybrid, encap: ipip}', '[{port: 80}, {port: 53, protocol: UDP}]')).model!, 'lb-1'), d);
  const none = renderDesiredState(parse(svc('')).model!, 'lb-1');
  t.false('sessionAffinity' in none.services[0]!);
  t.false('affinityTimeoutS' in none.vips[0]!);
});

test('plan: turning affinity on, changing its timeout and turning it off rewrite the listeners only', (t) => {
  const render = (a: string) => renderDesiredState(parse(svc(a)).model!, 'lb-1');
  const off = render('');
  const on = render('  sessionAffinity: {clientIP: {timeout: 600}}\n');
  const longer = render('  sessionAffinity: {clientIP: {timeout: 3600}}\n');
  for (const [from, to, text] of [[off, on, 'affinity 600 s'], [on, longer, 'affinity 3600 s'], [longer, off, '']] as const) {
    const ops = planOps(liveOf(from), to);
    t.deepEqual(ops.map((o) => o.op), ['vip.put']);
    const line = describeOp(ops[0]!);
    if (text) t.true(line.includes(text), line);
    else t.false(line.includes('affinity ') && !line.includes('(was'), line);
    t.deepEqual(planOps(liveOf(to), to), [], 'converged: nothing to do');
  }
  t.deepEqual(off.services[0]!.digest, on.services[0]!.digest, 'affinity does not change the table');
});

test('the lb data plane refuses a timeout it cannot hold or a listener out of step with its service, naming the field', (t) => {
  const d = renderDesiredState(parse(svc('  sessionAffinity: {clientIP: {timeout: 600}}\n', '{mode: dsr, encap: ipip}', '[{port: 80}, {port: 443}]')).model!, 'lb-1');
  t.notThrows(() => validateDesired(d), 'benign: what render produces');
  const vips = d.vips.map((v, i) => (i === 1 ? { ...v, affinityTimeoutS: 601 } : v));
  t.throws(() => validateDesired({ ...d, vips }), { message: /^vips\[203\.0\.113\.10:443\/TCP\]\.affinityTimeoutS: 601, but service \d+ has 600$/ });
  const services = d.services.map((s) => ({ ...s, sessionAffinity: { timeoutS: 86401 } }));
  t.throws(() => validateDesired({ ...d, services, vips: d.vips.map((v) => ({ ...v, affinityTimeoutS: 86401 })) }),
    { message: /^services\[web\]\.sessionAffinity\.timeoutS: 86401 is not a whole number of seconds in 1\.\.86400$/ });
});
