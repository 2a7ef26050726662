// Node.spec.snatPorts: schema bounds, the min <= max check, the model and the desired state, and the
// data plane's encoding of the SNAT settings (lb_snat_config).
import test from 'ava';
import { type ConfigFile, formatDiagnostic, parseConfig } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { DEFAULT_SNAT_PORTS, DEFAULT_SNAT_TIMEOUTS, decodeSnatConfig, encodeSnatConfig, snatConfigOf } from '../../src/bpf/dataplane/snat.js';

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const CLUSTER = 'apiVersion: gitlb/v1\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n';
const node = (ports: string) => `apiVersion: gitlb/v1
kind: Node
metadata:
  name: lb-1
spec:
  role: lb
  interface: eth0
  allowedVips: [203.0.113.0/24]
  snatAddress: 198.51.100.111
${ports}`;
const SERVICE = `apiVersion: gitlb/v1
kind: Service
metadata:
  name: dns
spec:
  vip: 203.0.113.53
  ports: [{port: 53, protocol: UDP}]
  dispatch: {mode: snat}
  healthCheck: {type: none}
  reals: [{address: 198.51.100.10}]
`;
const parse = (ports: string) => parseConfig([
  { path: 'cluster.yaml', content: enc(CLUSTER) }, { path: 'nodes.yaml', content: enc(node(ports)) },
  { path: 'svc.yaml', content: enc(SERVICE) },
] as ConfigFile[]);

test('snatPorts absent: the model has none and the data plane uses 32768..60999', (t) => {
  const r = parse('');
  t.deepEqual(r.diagnostics, []);
  const n = r.model!.nodes.find((x) => x.metadata.name === 'lb-1')!;
  t.is(n.spec.snatPorts, undefined);
  const d = renderDesiredState(r.model!, 'lb-1');
  t.is(d.snatPorts, undefined);
  const cfg = snatConfigOf(d);
  t.deepEqual([cfg.portMin, cfg.portMax], [DEFAULT_SNAT_PORTS.min, DEFAULT_SNAT_PORTS.max]);
  t.deepEqual([cfg.portMin, cfg.portMax], [32768, 60999]);
});

test('snatPorts given: carried into the model, the desired state and lb_snat_config', (t) => {
  const r = parse('  snatPorts: {min: 20000, max: 20999}\n');
  t.deepEqual(r.diagnostics.map(formatDiagnostic), []);
  const d = renderDesiredState(r.model!, 'lb-1');
  t.deepEqual(d.snatPorts, { min: 20000, max: 20999 });
  const cfg = snatConfigOf(d);
  t.is(cfg.addr4, '198.51.100.111');
  t.is(cfg.addr6, undefined);
  const back = decodeSnatConfig(encodeSnatConfig(cfg));
  t.deepEqual(back, { addr4: '198.51.100.111', portMin: 20000, portMax: 20999, timeouts: DEFAULT_SNAT_TIMEOUTS });
});

test('snatPorts with only min gets the default max', (t) => {
  const r = parse('  snatPorts: {min: 40000}\n');
  t.deepEqual(r.diagnostics, []);
  t.deepEqual(r.model!.nodes.find((x) => x.metadata.name === 'lb-1')!.spec.snatPorts, { min: 40000, max: 60999 });
});

test('snatPorts below 1024 is an error naming the field', (t) => {
  const r = parse('  snatPorts: {min: 1000, max: 2000}\n');
  t.is(r.model, null);
  const lines = r.diagnostics.map(formatDiagnostic);
  t.true(lines.some((l) => /^nodes\.yaml:\d+:\d+: error: .*snatPorts.*min/.test(l) && /1024/.test(l)), lines.join('\n'));
});

test('snatPorts with min above max is an error naming the field', (t) => {
  const r = parse('  snatPorts: {min: 50000, max: 40000}\n');
  t.is(r.model, null);
  const lines = r.diagnostics.map(formatDiagnostic);
  t.deepEqual(lines.filter((l) => l.includes('snatPorts')).length, 1, lines.join('\n'));
  t.regex(lines.join('\n'), /nodes\.yaml:10:\d+: error: spec\.snatPorts: min 50000 is above max 40000/);
});

test('snatPorts with an unknown key is refused', (t) => {
  const r = parse('  snatPorts: {min: 40000, max: 50000, step: 2}\n');
  t.is(r.model, null);
});

test('a snatPorts change shows in the plan as a node field change', async (t) => {
  const { planChanges } = await import('../../src/render/plan.js');
  const a = parse('  snatPorts: {min: 20000, max: 20999}\n').model!;
  const b = parse('  snatPorts: {min: 20000, max: 21999}\n').model!;
  const plan = planChanges(a, b);
  const node = plan.nodes.find((n) => n.name === 'lb-1');
  t.deepEqual(node?.fields, [{ field: 'snatPorts', before: '{"min":20000,"max":20999}', after: '{"min":20000,"max":21999}' }]);
});

// Two lb nodes with one snatAddress (the shared address that connection-state sync needs, docs/datapath.md)
const second = (address: string, ports: string) => node(ports).replace('name: lb-1', 'name: lb-2').replace('198.51.100.111', address);
const parseTwo = (ports1: string, address2: string, ports2: string) => parseConfig([
  { path: 'cluster.yaml', content: enc(CLUSTER) }, { path: 'nodes.yaml', content: enc(node(ports1)) },
  { path: 'nodes2.yaml', content: enc(second(address2, ports2)) }, { path: 'svc.yaml', content: enc(SERVICE) },
] as ConfigFile[]);

test('lb nodes sharing a snatAddress with overlapping snatPorts: an error naming the second node\'s field and the first node', (t) => {
  const r = parseTwo('  snatPorts: {min: 40000, max: 40999}\n', '198.51.100.111', '  snatPorts: {min: 40500, max: 41499}\n');
  t.is(r.model, null);
  const lines = r.diagnostics.map(formatDiagnostic);
  t.regex(lines.join('\n'), /nodes2\.yaml:\d+:\d+: error: spec\.snatPorts: 40500\.\.41499 overlaps 40000\.\.40999 of lb node 'lb-1', which has the same snatAddress 198\.51\.100\.111/);
});

test('lb nodes sharing a snatAddress with default ranges overlap too', (t) => {
  const r = parseTwo('', '198.51.100.111', '');
  t.is(r.model, null);
  t.regex(r.diagnostics.map(formatDiagnostic).join('\n'), /nodes2\.yaml:\d+:\d+: error: .*overlaps 32768\.\.60999 of lb node 'lb-1'/);
});

test('benign: a shared snatAddress with disjoint snatPorts, and own addresses with the same ranges, are accepted', (t) => {
  const shared = parseTwo('  snatPorts: {min: 40000, max: 40999}\n', '198.51.100.111', '  snatPorts: {min: 41000, max: 41999}\n');
  t.deepEqual(shared.diagnostics.map(formatDiagnostic), []);
  t.truthy(shared.model);
  const own = parseTwo('', '198.51.100.112', '');
  t.deepEqual(own.diagnostics.map(formatDiagnostic), []);
});

test('a closed TCP translation keeps its port for at least Linux\'s TIME_WAIT (60 s): a real that closed first refuses a SYN with an older timestamp on that 4-tuple (PAWS), and clients randomise timestamps per 4-tuple', (t) => {
  // 10 s cost 2,040 SYN retransmissions in three rounds of bench/e2e/two-arm-run (docs/datapath.md "Timeouts")
  t.true(DEFAULT_SNAT_TIMEOUTS.tcpClosingNs >= 60_000_000_000n);
  // still far below the established timeout: a closed connection's port comes back
  t.true(DEFAULT_SNAT_TIMEOUTS.tcpClosingNs < DEFAULT_SNAT_TIMEOUTS.tcpEstablishedNs / 10n);
});
