// `validate` refuses what one lb node's data plane can never hold (its fixed map sizes), naming the node, and
// accepts the same services when another lb node takes half of them. Table sizes are not a capacity limit.
import test from 'ava';
import { parseConfig, formatDiagnostic } from '../../src/render/config/index.js';
import { DATAPLANE_LIMITS } from '../../src/render/config/limits.js';
import { clusterYaml, serviceYaml } from '../reconcile-helpers.js';

const enc = (s: string) => new TextEncoder().encode(s);
const lbNode = (name: string, allowed: string[]) => [
  'apiVersion: gitlb/v1', 'kind: Node', `metadata: { name: ${name} }`, 'spec:', '  role: lb', '  interface: eth0',
  `  addresses: [2001:db8:ff::${name === 'lb-1' ? 1 : 2}]`, `  allowedVips: [${allowed.join(', ')}]`, '',
].join('\n');

function config(services: number, allowed: Record<string, string[]>) {
  const files = [{ path: 'cluster.yaml', content: enc(clusterYaml()) }];
  for (const [n, a] of Object.entries(allowed)) files.push({ path: `nodes/${n}.yaml`, content: enc(lbNode(n, a)) });
  // files of 100 documents each (a revision's files and a file's documents are both limited)
  const docs = Array.from({ length: services }, (_, i) =>
    serviceYaml(`s${i}`, `2001:db8:${i < 600 ? 1 : 2}::${(i + 1).toString(16)}`, ['2001:db8:ff::10'], { tableSize: 131071 }));
  for (let f = 0; f * 100 < docs.length; f++)
    files.push({ path: `services/part${f}.yaml`, content: enc(docs.slice(f * 100, f * 100 + 100).join('---\n')) });
  return parseConfig(files);
}

test('an lb node given more services than lb_rings holds is refused, naming the node and the field', (t) => {
  const n = DATAPLANE_LIMITS.lbServices + 1;
  const r = config(n, { 'lb-1': ['2001:db8::/32'] });
  const errors = r.diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);
  t.is(r.model, null);
  t.true(errors.some((e) => /nodes\/lb-1\.yaml:\d+:\d+/.test(e) && /lb node 'lb-1' would serve 1025 services \(lb_rings holds 1024\)/.test(e)), errors.join('\n'));
});

test('the same services split over two lb nodes validate, big tables included', (t) => {
  const n = DATAPLANE_LIMITS.lbServices + 1;
  const r = config(n, { 'lb-1': ['2001:db8:1::/64'], 'lb-2': ['2001:db8:2::/64'] });
  t.deepEqual(r.diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic), []);
  t.truthy(r.model);
});

test('an lb node with more IPv4 addresses than lb_config holds (8 dsr-ipip sources) is refused at the 9th; 8 + IPv6 validate', (t) => {
  const withAddresses = (role: 'lb' | 'backend', addrs: string[]) => parseConfig([
    { path: 'cluster.yaml', content: enc(clusterYaml()) },
    { path: 'nodes/n.yaml', content: enc(['apiVersion: gitlb/v1', 'kind: Node', 'metadata: { name: n1 }', 'spec:',
      `  role: ${role}`, '  interface: eth0', '  addresses:', ...addrs.map((a) => `    - ${a}`),
      ...(role === 'lb' ? ['  allowedVips: [203.0.113.0/24]'] : []), ''].join('\n')) },
    { path: 'services/web.yaml', content: enc(serviceYaml('web', '203.0.113.10', ['198.51.100.10'])) },
  ]);
  const nine = Array.from({ length: 9 }, (_, i) => `198.51.100.${100 + i}`);
  const errors = withAddresses('lb', nine).diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);
  // line 16: the 9th list item (7 header lines, then one address per line)
  t.deepEqual(errors, ["nodes/n.yaml:16:7: error: spec.addresses[8]: 198.51.100.108 is the 9th IPv4 address of lb node 'n1'; " +
    'an lb node uses at most 8 (the dsr-ipip outer sources, lb_config holds 8)']);
  const ok = withAddresses('lb', [...nine.slice(0, 8), '2001:db8::1', '2001:db8::2']);
  t.deepEqual(ok.diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic), []);
  t.truthy(ok.model);
  t.deepEqual(withAddresses('backend', nine).diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic)
    .filter((e) => e.startsWith('nodes/')), [],
    'a backend node uses its addresses for nothing lb_config holds');
});
