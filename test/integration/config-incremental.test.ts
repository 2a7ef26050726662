// Revisions validated and rendered one after another in one process, as the daemon does: what validate and render
// remember between revisions (unchanged files, services and tables) must never show in their results.
import test from 'ava';
import { type ConfigFile, parseConfig } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import type { ConfigModel } from '../../src/render/model.js';
import { clusterYaml } from '../reconcile-helpers.js';

const enc = new TextEncoder();
const LB = 'apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: lb-1 }\nspec:\n  role: lb\n  interface: eth0\n  addresses: [192.0.2.1]\n  allowedVips: [203.0.113.0/24]\n';
const svc = (i: number, weight: number, real2 = '198.51.100.2') =>
  `apiVersion: gitlb/v1\nkind: Service\nmetadata: { name: s${i} }\nspec:\n  vip: 203.0.113.${i}\n  ports: [{ port: 80, protocol: TCP }]\n` +
  `  dispatch: { mode: dsr, encap: ipip }\n  reals:\n    - { address: 198.51.100.1, weight: ${weight} }\n    - { address: "${real2}", weight: 100 }\n`;

function revision(files: Record<string, string>): ConfigFile[] {
  return Object.entries(files).map(([path, t]) => ({ path, content: enc.encode(t) }));
}
const base = () => ({ 'cluster.yaml': clusterYaml({ tableSize: 251 }), 'nodes/lb-1.yaml': LB, 'services/a.yaml': svc(1, 100), 'services/b.yaml': svc(2, 100) });
const model = (files: Record<string, string>): ConfigModel => {
  const r = parseConfig(revision(files));
  if (!r.model) throw new Error(r.diagnostics.map((d) => d.message).join('; '));
  return r.model;
};
const weightsOf = (m: ConfigModel, name: string) => m.services.find((s) => s.metadata.name === name)!.spec.reals.map((r) => r.weight);

test('a changed file changes its services only; going back gives the first result again', (t) => {
  const first = model(base());
  const firstState = renderDesiredState(first, 'lb-1');
  const changed = model({ ...base(), 'services/b.yaml': svc(2, 10) });
  t.deepEqual(weightsOf(changed, 's2'), [10, 100]);
  t.deepEqual(weightsOf(changed, 's1'), [100, 100]);
  const changedState = renderDesiredState(changed, 'lb-1');
  const digest = (s: typeof firstState, name: string) => s.services.find((x) => x.name === name)!.digest;
  t.is(digest(changedState, 's1'), digest(firstState, 's1'));
  t.not(digest(changedState, 's2'), digest(firstState, 's2'));
  const again = model(base());
  t.deepEqual(again, first);
  t.deepEqual(renderDesiredState(again, 'lb-1'), firstState);
});

test('an unchanged service file is checked again against what changed around it', (t) => {
  t.truthy(model(base()));
  // The node no longer allows the VIPs: the services' files did not change, their errors must still appear.
  const narrowed = parseConfig(revision({ ...base(), 'nodes/lb-1.yaml': LB.replace('203.0.113.0/24', '203.0.113.128/25') }));
  t.is(narrowed.model, null);
  t.deepEqual(narrowed.diagnostics.filter((d) => d.severity === 'error').map((d) => `${d.file}:${d.line}`), ['services/a.yaml:5', 'services/b.yaml:5']);
  // A duplicate real in one file is reported, and fixed again by the next revision.
  const dup = parseConfig(revision({ ...base(), 'services/a.yaml': svc(1, 100, '198.51.100.1') }));
  t.true(dup.diagnostics.some((d) => d.file === 'services/a.yaml' && /already listed as spec\.reals\[0\]/.test(d.message)));
  t.truthy(parseConfig(revision(base())).model);
});

test('the same model rendered with other health gets other tables, and back', (t) => {
  const m = model(base());
  const all = renderDesiredState(m, 'lb-1');
  const down = renderDesiredState(m, 'lb-1', { isHealthy: (_s, address) => address !== '198.51.100.1' });
  const s1 = (s: typeof all) => s.services.find((x) => x.name === 's1')!;
  const real = (s: typeof all, address: string) => s1(s).reals.find((r) => r.address === address)!;
  t.like(real(down, '198.51.100.1'), { healthy: false, entries: 0 });
  t.like(real(down, '198.51.100.2'), { healthy: true, entries: 251 });
  t.not(s1(down).digest, s1(all).digest);
  t.deepEqual(renderDesiredState(m, 'lb-1'), all);
});

test('a model changed in place after rendering renders anew', (t) => {
  const m = model(base());
  const before = renderDesiredState(m, 'lb-1').services.find((x) => x.name === 's1')!;
  m.services.find((s) => s.metadata.name === 's1')!.spec.reals[0]!.weight = 1;
  const after = renderDesiredState(m, 'lb-1').services.find((x) => x.name === 's1')!;
  t.not(after.digest, before.digest);
  t.is(after.reals.find((r) => r.address === '198.51.100.1')!.weight, 1);
});
