// Config stage: the fixture corpus (exact diagnostics), defaults and canonical forms of the model,
// hostile input, and the directory reader.
import test from 'ava';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { parseAllDocuments } from 'yaml';
import { join } from 'node:path';
import { type ConfigFile, LIMITS, formatDiagnostic, parseConfig } from '../../src/render/config/index.js';
import { canonicalCidr, canonicalIp, cidrContains, parseCidr, parseIp } from '../../src/render/ip.js';
import { firstInvalidUtf8Offset } from '../../src/render/config/decode.js';
import { readConfigDir } from '../../src/reconciler/source/read-dir.js';

const fixtures = join(import.meta.dirname, '..', 'fixtures', 'config');
const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const file = (path: string, text: string): ConfigFile => ({ path, content: enc(text) });

function expectedLines(dir: string): string[] {
  const p = join(dir, 'expected.txt');
  return existsSync(p) ? readFileSync(p, 'utf8').split('\n').filter((l) => l !== '') : [];
}

const CLUSTER = 'apiVersion: gitlb/v1\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n';
const LB = `apiVersion: gitlb/v1
kind: Node
metadata:
  name: lb-1
spec:
  role: lb
  interface: eth0
  allowedVips: [203.0.113.0/24, 2001:db8:ff::/64]
  snatAddress: 198.51.100.111
`;
function service(name: string, vip: string, reals: string): string {
  return `apiVersion: gitlb/v1\nkind: Service\nmetadata:\n  name: ${name}\nspec:\n  vip: ${vip}\n  ports: [{port: 80}]\n  dispatch: {mode: snat}\n  reals: ${reals}\n`;
}

// ---- the corpus ---------------------------------------------------------------------------------

for (const name of readdirSync(join(fixtures, 'invalid')).sort()) {
  test(`invalid/${name}: exact diagnostics, no model`, async (t) => {
    const dir = join(fixtures, 'invalid', name);
    const result = parseConfig(await readConfigDir(dir));
    const expected = expectedLines(dir);
    t.true(expected.some((l) => l.includes(': error: ')), 'fixture must expect at least one error');
    t.deepEqual(result.diagnostics.map(formatDiagnostic), expected);
    t.is(result.model, null);
  });
}

for (const name of readdirSync(join(fixtures, 'valid')).sort()) {
  test(`valid/${name}: model and exact warnings`, async (t) => {
    const dir = join(fixtures, 'valid', name);
    const result = parseConfig(await readConfigDir(dir));
    t.deepEqual(result.diagnostics.map(formatDiagnostic), expectedLines(dir));
    // Nothing silently dropped: the model holds one entry per Service/Node document the YAML library sees in the
    // files the reader selected, and the Cluster it names.
    const docs = (await readConfigDir(dir)).flatMap((f) => parseAllDocuments(new TextDecoder().decode(f.content)).map((d) => d.toJS()))
      .filter((d): d is { kind: string; metadata: { name: string } } => d !== null && typeof d === 'object');
    const names = (kind: string) => docs.filter((d) => d.kind === kind).map((d) => d.metadata.name).sort();
    t.deepEqual(result.model!.services.map((x) => x.metadata.name), names('Service'));
    t.deepEqual(result.model!.nodes.map((x) => x.metadata.name), names('Node'));
    t.deepEqual([result.model!.cluster.metadata.name], names('Cluster'));
  });
}

test('the sample config repo validates clean and has every dispatch mode', async (t) => {
  const { model, diagnostics } = parseConfig(await readConfigDir(join(import.meta.dirname, '..', '..', 'sample-config-repo')));
  t.deepEqual(diagnostics, []);
  t.truthy(model);
  const m = model!;
  t.deepEqual(m.nodes.map((n) => `${n.metadata.name}:${n.spec.role}`), ['be-1:backend', 'be-2:backend', 'be-3:backend', 'lb-1:lb', 'lb-2:lb']);
  const forms = new Set(m.services.map((s) => `${s.spec.dispatch.mode}/${s.spec.dispatch.encap ?? '-'}`));
  for (const f of ['dsr/l2', 'dsr/ipip', 'dsr/ipopt', 'snat/-', 'hybrid/ipip']) t.true(forms.has(f), f);
  const hybrid = m.services.find((s) => s.spec.dispatch.mode === 'hybrid')!;
  t.deepEqual(new Set(hybrid.spec.ports.map((p) => p.protocol)), new Set(['TCP', 'UDP']));
  const states = m.services.flatMap((s) => s.spec.reals.map((r) => r.state));
  t.true(states.includes('drain'));
  t.true(new Set(m.services.map((s) => s.spec.healthCheck.type)).has('tcp'));
  t.true(new Set(m.services.map((s) => s.spec.healthCheck.type)).has('http'));
  t.true(m.services.some((s) => s.spec.vip.includes(':')), 'one IPv6 service');
  // Only the documentation ranges the test network rules allow.
  const allowed = ['192.0.2.0/24', '198.51.100.0/24', '203.0.113.0/24', '2001:db8::/32'].map((c) => parseCidr(c)!);
  const addrs = [
    ...m.nodes.flatMap((n) => [...n.spec.addresses, ...(n.spec.snatAddress ? [n.spec.snatAddress] : [])]),
    ...m.services.flatMap((s) => [s.spec.vip, ...s.spec.reals.map((r) => r.address)]),
  ];
  for (const a of addrs) t.true(allowed.some((c) => cidrContains(c, parseIp(a)!)), a);
  for (const f of await readConfigDir(join(import.meta.dirname, '..', '..', 'sample-config-repo'))) {
    t.regex(new TextDecoder().decode(f.content).split('\n')[0]!, /^# yaml-language-server: \$schema=(\.\.\/)+schemas\/(cluster|node|service)\.schema\.json$/, f.path);
  }
});

// ---- defaults and canonical model ---------------------------------------------------------------

test('defaults are filled in', (t) => {
  const { model, diagnostics } = parseConfig([
    file('c.yaml', CLUSTER),
    file('n.yaml', LB),
    file('s.yaml', 'apiVersion: gitlb/v1\nkind: Service\nmetadata: {name: s}\nspec:\n  vip: 203.0.113.1\n  ports: [{port: 80}]\n  dispatch: {mode: dsr, encap: l2}\n  reals: [{address: 198.51.100.21}]\n'),
  ]);
  // The default check is none, and a service left without one is said to be unchecked (docs/health.md, Defaults).
  t.deepEqual(diagnostics.map(formatDiagnostic), ['s.yaml:4:1: warning: spec.healthCheck: none given, so no real of this service is checked and a dead one keeps receiving new connections; add healthCheck: { type: tcp } (a TCP connect to the target port every 2s) or say type: none']);
  t.deepEqual(model!.cluster.spec, {
    maglev: { tableSize: 16381, seed: 'JLfvgnHc2kaSUFaI' },
    conntrack: { maxEntries: 65536, newFlowRate: 0 },
    status: { branch: 'gitlb-status' },
    rollback: { policy: 'manual' },
  });
  t.deepEqual(model!.nodes[0]!.spec, {
    role: 'lb',
    interface: 'eth0',
    allowedVips: ['203.0.113.0/24', '2001:db8:ff::/64'],
    snatAddress: '198.51.100.111',
    addresses: [],
    mtu: 1500,
  });
  t.deepEqual(model!.services[0]!.spec, {
    vip: '203.0.113.1',
    ports: [{ port: 80, protocol: 'TCP' }],
    dispatch: { mode: 'dsr', encap: 'l2' },
    hash: { sourcePort: true },
    healthCheck: { type: 'none', intervalMs: 2000, timeoutMs: 1000, rise: 2, fall: 3 },
    reals: [{ address: '198.51.100.21', weight: 100, state: 'active' }],
  });
  t.deepEqual(model!.services[0]!.source, { file: 's.yaml', line: 1, col: 1 });
});

test('health check port defaults to the first targetPort, http path to /; durations in ms', (t) => {
  const svc = (hc: string) =>
    `apiVersion: gitlb/v1\nkind: Service\nmetadata: {name: s}\nspec:\n  vip: 203.0.113.1\n  ports: [{port: 53, protocol: UDP, targetPort: 5353}, {port: 80}]\n  dispatch: {mode: snat}\n  healthCheck: ${hc}\n  reals: [{address: 198.51.100.21}]\n`;
  const hc = (h: string) => parseConfig([file('c.yaml', CLUSTER), file('n.yaml', LB), file('s.yaml', svc(h))]).model!.services[0]!.spec.healthCheck;
  t.deepEqual(hc('{type: http, interval: 1m, timeout: 1500ms}'), { type: 'http', port: 5353, path: '/', intervalMs: 60000, timeoutMs: 1500, rise: 2, fall: 3 });
  t.deepEqual(hc('{type: tcp, port: 9, rise: 1, fall: 10}'), { type: 'tcp', port: 9, intervalMs: 2000, timeoutMs: 1000, rise: 1, fall: 10 });
});

test('healthCheck.via defaults to vip for dsr l2/ipip, IPv4, tcp/http, else real; ipopt takes vip when asked', (t) => {
  const svc = (vip: string, dispatch: string, hc: string) =>
    `apiVersion: gitlb/v1\nkind: Service\nmetadata: {name: s}\nspec:\n  vip: ${vip}\n  ports: [{port: 80}]\n  dispatch: ${dispatch}\n  healthCheck: ${hc}\n  reals: [{address: ${vip.includes(':') ? '2001:db8::21' : '198.51.100.21'}}]\n`;
  const parse = (vip: string, dispatch: string, hc = '{type: tcp}') =>
    parseConfig([file('c.yaml', CLUSTER), file('n.yaml', LB), file('s.yaml', svc(vip, dispatch, hc))]);
  const via = (vip: string, dispatch: string, hc?: string) => {
    const r = parse(vip, dispatch, hc);
    t.deepEqual(r.diagnostics.filter((d) => d.severity === 'error'), [], `${vip} ${dispatch} ${hc ?? ''}`);
    return r.model!.services[0]!.spec.healthCheck.via ?? 'real';
  };
  t.is(via('203.0.113.1', '{mode: dsr, encap: l2}'), 'vip');
  t.is(via('203.0.113.1', '{mode: dsr, encap: ipip}', '{type: http}'), 'vip');
  t.is(via('203.0.113.1', '{mode: dsr, encap: ipip}', '{type: tcp, via: real}'), 'real'); // explicit real wins
  t.is(via('203.0.113.1', '{mode: dsr, encap: ipopt}'), 'real');
  t.is(via('2001:db8:ff::1', '{mode: dsr, encap: ipip}'), 'real');
  t.is(via('203.0.113.1', '{mode: snat}'), 'real');
  t.is(via('203.0.113.1', '{mode: hybrid, encap: ipip}'), 'real');
  t.is(via('203.0.113.1', '{mode: dsr, encap: l2}', '{type: none}'), 'real');
  // vip probes the VIP's port by default; an explicit via: vip where it cannot work stays an error
  t.is(parse('203.0.113.1', '{mode: dsr, encap: l2}').model!.services[0]!.spec.healthCheck.port, 80);
  const bad = parse('203.0.113.1', '{mode: snat}', '{type: tcp, via: vip}');
  t.is(bad.model, null);
  t.true(bad.diagnostics.some((d) => d.severity === 'error' && d.message.startsWith('spec.healthCheck.via: vip: only dsr services are probed through the VIP')));
  // gue: through the VIP when asked for (not the default), IPv4 and IPv6
  t.is(via('203.0.113.1', '{mode: dsr, encap: gue}'), 'real');
  t.is(via('203.0.113.1', '{mode: dsr, encap: gue}', '{type: tcp, via: vip}'), 'vip');
  t.is(via('2001:db8:ff::1', '{mode: dsr, encap: gue}', '{type: http, via: vip}'), 'vip');
  // ipopt: through the VIP when asked for (not the default), at a TCP listener's targetPort only
  t.is(via('203.0.113.1', '{mode: dsr, encap: ipopt}', '{type: tcp, via: vip}'), 'vip');
  // IPv6: l2, ipip and ipopt through the VIP when asked for (not the default)
  t.is(via('2001:db8:ff::1', '{mode: dsr, encap: l2}', '{type: tcp, via: vip}'), 'vip');
  t.is(via('2001:db8:ff::1', '{mode: dsr, encap: ipip}', '{type: http, via: vip}'), 'vip');
  t.is(via('2001:db8:ff::1', '{mode: dsr, encap: ipopt}', '{type: tcp, via: vip}'), 'vip');
  const port = parse('203.0.113.1', '{mode: dsr, encap: ipopt}', '{type: tcp, port: 9, via: vip}');
  t.is(port.model, null);
  t.true(port.diagnostics.some((d) => d.severity === 'error' &&
    d.message === 'spec.healthCheck.via: vip: with encap ipopt the checked port (9) must be the targetPort of a TCP port of the service'));
});

test('addresses are canonical and lists sorted by name, whatever the file order', async (t) => {
  const files = await readConfigDir(join(fixtures, 'valid', 'multi-doc'));
  t.deepEqual(files.map((f) => f.path), ['all.yaml', 'nested/deeper/alpha.yml']);
  const a = parseConfig(files);
  const b = parseConfig([...files].reverse());
  t.deepEqual(a, b);
  const m = a.model!;
  t.deepEqual(m.services.map((s) => s.metadata.name), ['alpha', 'zeta']);
  t.deepEqual(m.nodes.map((n) => n.metadata.name), ['lb-a', 'lb-b']);
  const zeta = m.services[1]!;
  t.is(zeta.spec.vip, '2001:db8:ff::a');
  t.deepEqual(zeta.spec.reals, [{ address: '2001:db8:1::21', weight: 7, state: 'active' }]);
  t.deepEqual(m.nodes[1]!.spec.allowedVips, ['2001:db8:ff::/64', '203.0.113.0/25']);
  t.deepEqual(m.nodes[1]!.spec.addresses, ['2001:db8:1::12']);
  t.deepEqual(m.cluster.source, { file: 'all.yaml', line: 28, col: 1 });
  t.deepEqual(m.services[0]!.source, { file: 'nested/deeper/alpha.yml', line: 1, col: 1 });
  t.deepEqual(m.services[0]!.spec.maglev, { tableSize: 251 });
  t.deepEqual(m.services[0]!.spec.hash, { sourcePort: false });
});

test('ip: RFC 5952 canonical text, CIDR parsing and containment', (t) => {
  const cases: [string, string | null][] = [
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['2001:0db8::0001', '2001:db8::1'],
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
    ['2001:DB8::AbC', '2001:db8::abc'],
    ['0:0:0:0:0:0:0:1', '::1'],
    ['::', '::'],
    ['1::', '1::'],
    ['2001:db8:0:0:1:0:0:0', '2001:db8:0:0:1::'],
    ['::192.0.2.1', '::c000:201'],
    ['192.0.2.1', '192.0.2.1'],
    ['192.0.2.01', null],
    ['192.0.2', null],
    ['1:2:3:4:5:6:7:8:9', null],
    ['1::2::3', null],
    ['fe80::1%eth0', null],
    ['', null],
  ];
  for (const [input, want] of cases) t.is(canonicalIp(input), want, input);
  t.is(canonicalCidr('203.0.113.77/24'), '203.0.113.0/24');
  t.is(canonicalCidr('2001:DB8:FF::1/48'), '2001:db8:ff::/48');
  t.is(canonicalCidr('0.0.0.0/0'), '0.0.0.0/0');
  t.is(canonicalCidr('203.0.113.0/33'), null);
  t.is(canonicalCidr('203.0.113.0/024'), null);
  t.true(cidrContains(parseCidr('203.0.113.0/25')!, parseIp('203.0.113.127')!));
  t.false(cidrContains(parseCidr('203.0.113.0/25')!, parseIp('203.0.113.128')!));
  t.false(cidrContains(parseCidr('::/0')!, parseIp('203.0.113.1')!), 'families never match');
  t.true(cidrContains(parseCidr('2001:db8::/32')!, parseIp('2001:db8:ffff::1')!));
});

test('formatDiagnostic', (t) => {
  t.is(formatDiagnostic({ severity: 'warning', file: 'a/b.yaml', line: 3, col: 7, message: 'm' }), 'a/b.yaml:3:7: warning: m');
});

// ---- hostile input ------------------------------------------------------------------------------

function timed<T>(f: () => T): { value: T; ms: number } {
  const t0 = performance.now();
  const value = f();
  return { value, ms: performance.now() - t0 };
}

test('a file over the size cap is refused without parsing', (t) => {
  const big = new Uint8Array(LIMITS.maxFileBytes + 1).fill(0x5b); // '[' x 1 MiB: would be deadly to parse
  const { value, ms } = timed(() => parseConfig([file('a.yaml', CLUSTER), { path: 'big.yaml', content: big }]));
  t.deepEqual(value.diagnostics.map(formatDiagnostic), ['big.yaml:1:1: error: file is larger than the 1 MiB limit; refused']);
  t.is(value.model, null);
  t.true(ms < 10000, `${ms} ms`); // generous: the machine is shared; the bound only catches blow-ups
});

test('the total size cap is enforced across files', (t) => {
  const chunk = `# ${'x'.repeat(LIMITS.maxFileBytes - 100)}\n`;
  const files = [file('a.yaml', CLUSTER), ...Array.from({ length: 9 }, (_, i) => file(`f${i}.yaml`, chunk))];
  // Comment-only files also warn that they declare nothing; the cap is the one error.
  const lines = parseConfig(files).diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);
  t.deepEqual(lines, ['f8.yaml:1:1: error: the YAML files of the repository exceed 8 MiB in total; refused']);
});

test('deep flow nesting is refused quickly: under the entry budget by the nesting check, just under the size cap unparsed', (t) => {
  for (const [n, expected] of [
    [100_000, 'deep.yaml:1:36: error: YAML nesting deeper than 32 levels; refused'],
    [(LIMITS.maxFileBytes - 10) / 2, `deep.yaml:1:1: error: with this file the repository holds more than ${LIMITS.maxYamlEntries} YAML entries in total; refused before parsing`],
  ] as const) {
    const { value, ms } = timed(() => parseConfig([file('a.yaml', CLUSTER), file('deep.yaml', `a: ${'['.repeat(n)}${']'.repeat(n)}`)]));
    t.deepEqual(value.diagnostics.map(formatDiagnostic), [expected]);
    t.true(ms < 10000, `${ms} ms`);
  }
});

test('deep block nesting (- - - ...) is refused', (t) => {
  const r = parseConfig([file('a.yaml', CLUSTER), file('deep.yaml', `${'- '.repeat(20000)}x\n`)]);
  t.deepEqual(r.diagnostics.map(formatDiagnostic), ['deep.yaml:1:65: error: YAML nesting deeper than 32 levels; refused']);
});

test('a billion-laughs alias bomb is refused with one message, quickly', (t) => {
  let text = 'a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n';
  for (let i = 1; i < 20; i++) text += `a${i}: &a${i} [${Array.from({ length: 10 }, () => `*a${i - 1}`).join(', ')}]\n`;
  const { value, ms } = timed(() => parseConfig([file('a.yaml', CLUSTER), file('bomb.yaml', text)]));
  t.deepEqual(value.diagnostics.map(formatDiagnostic), [
    'bomb.yaml:2:10: error: YAML aliases are not allowed in gitlb config (refused to rule out alias bombs); write the value out (190 aliases in this document)',
  ]);
  t.true(ms < 10000, `${ms} ms`); // generous: the machine is shared; the bound only catches blow-ups
});

test('a map with 20,000 keys and a duplicate is handled in linear time', (t) => {
  const keys = Array.from({ length: 20000 }, (_, i) => `k${i}: ${i}`);
  keys.push('k7: again');
  const { value, ms } = timed(() => parseConfig([file('a.yaml', CLUSTER), file('keys.yaml', keys.join('\n'))]));
  t.deepEqual(value.diagnostics.map(formatDiagnostic), ["keys.yaml:20001:1: error: duplicate key 'k7' (first at line 8, column 1)"]);
  t.log(`${Math.round(ms)} ms`); // yaml's own (quadratic) uniqueKeys check takes ~15 s for 50,000 keys on an idle machine
  // Generous like the bounds above (shared machine): catches a blow-up, not a small constant-factor slowdown.
  t.true(ms < 10000, `${ms} ms`);
});

test('too many documents in one file', (t) => {
  const text = Array.from({ length: LIMITS.maxDocumentsPerFile + 5 }, () => 'a: 1\n').join('---\n');
  const r = parseConfig([file('a.yaml', CLUSTER), file('docs.yaml', text)]);
  t.deepEqual(r.diagnostics.map(formatDiagnostic), [`docs.yaml:2000:1: error: more than ${LIMITS.maxDocumentsPerFile} YAML documents in one file; refused before parsing`]);
  t.is(r.model, null);
});

test('too many files', (t) => {
  const files = [file('a.yaml', CLUSTER), ...Array.from({ length: LIMITS.maxFiles }, (_, i) => file(`n/${String(i).padStart(4, '0')}.yaml`, '# empty\n'))];
  const r = parseConfig(files);
  t.deepEqual(r.diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic), [`n/0999.yaml:1:1: error: more than ${LIMITS.maxFiles} YAML files in the repository; refused`]);
});

test('too many reals in a service, too many services', (t) => {
  const reals = `[${Array.from({ length: LIMITS.maxRealsPerService + 1 }, (_, i) => `{address: 198.51.${100 + (i >> 8)}.${i & 255}}`).join(', ')}]`;
  const r = parseConfig([file('a.yaml', CLUSTER), file('n.yaml', LB), file('s.yaml', service('s', '203.0.113.1', reals))]);
  // Counted before parsing (its 'address' keys); a key the count cannot see still meets the schema's maxItems.
  t.deepEqual(r.diagnostics.map(formatDiagnostic), [`s.yaml:1:1: error: a document with ${LIMITS.maxRealsPerService + 1} 'address' keys: more than the ${LIMITS.maxRealsPerService} reals a service may have; refused before parsing`]);
  const escaped = reals.replaceAll('{address:', '{"\\x61ddress":');
  const e = parseConfig([file('a.yaml', CLUSTER), file('n.yaml', LB), file('s.yaml', service('s', '203.0.113.1', escaped))]);
  t.deepEqual(e.diagnostics.map(formatDiagnostic), [`s.yaml:9:10: error: spec.reals: must list at most ${LIMITS.maxRealsPerService} items (got ${LIMITS.maxRealsPerService + 1}); refused`]);

  const perFile = 1000;
  const files = [file('a.yaml', CLUSTER), file('n.yaml', LB)];
  for (let f = 0; f * perFile <= LIMITS.maxServices; f++) {
    const docs: string[] = [];
    for (let i = f * perFile; i < Math.min((f + 1) * perFile, LIMITS.maxServices + 1); i++) {
      docs.push(`apiVersion: gitlb/v1\nkind: Service\nmetadata: {name: s${i}}\nspec: {vip: 203.0.113.1, ports: [{port: ${i + 1}}], dispatch: {mode: snat}, reals: [{address: 198.51.100.21}]}\n`);
    }
    files.push(file(`s${f}.yaml`, docs.join('---\n')));
  }
  const many = parseConfig(files);
  t.deepEqual(many.diagnostics.map(formatDiagnostic), [`s4.yaml:482:7: error: more than ${LIMITS.maxServices} Service documents; refused`]);
});

test('non-UTF-8: the first bad byte is located; overlong and surrogate encodings are refused', (t) => {
  const bytes = new Uint8Array([...enc('a: 1\nb: "x'), 0xc0, 0xaf, ...enc('"\n')]);
  t.deepEqual(parseConfig([file('c.yaml', CLUSTER), { path: 'bad.yaml', content: bytes }]).diagnostics.map(formatDiagnostic), [
    'bad.yaml:2:6: error: file is not valid UTF-8 (byte 0xc0 at offset 10)',
  ]);
  t.is(firstInvalidUtf8Offset(new Uint8Array([0x61, 0xed, 0xa0, 0x80])), 1, 'UTF-16 surrogate');
  t.is(firstInvalidUtf8Offset(new Uint8Array([0xe2, 0x82])), 0, 'truncated');
  t.is(firstInvalidUtf8Offset(enc('héllo ✓ 𝄞')), enc('héllo ✓ 𝄞').length, 'valid text');
});

test('a service without healthCheck is a warning once the config is otherwise valid; an explicit type none is not', (t) => {
  const unchecked = service('s', '203.0.113.1', '[{address: 198.51.100.21}]');
  const warned = parseConfig([file('c.yaml', CLUSTER), file('n.yaml', LB), file('s.yaml', unchecked)]);
  t.truthy(warned.model);
  t.deepEqual(warned.diagnostics.map(formatDiagnostic), ['s.yaml:5:1: warning: spec.healthCheck: none given, so no real of this service is checked and a dead one keeps receiving new connections; add healthCheck: { type: tcp } (a TCP connect to the target port every 2s) or say type: none']);
  t.is(warned.model!.services[0]!.spec.healthCheck.type, 'none', 'the default stays none: the warning asks for a choice');
  for (const hc of ['{type: none}', '{type: tcp}']) {
    const chosen = parseConfig([file('c.yaml', CLUSTER), file('n.yaml', LB), file('s.yaml', unchecked.replace('  reals:', `  healthCheck: ${hc}\n  reals:`))]);
    t.deepEqual(chosen.diagnostics, [], hc);
  }
  // With an error, the errors come first: no advice about checks.
  const broken = parseConfig([file('c.yaml', CLUSTER), file('n.yaml', LB), file('s.yaml', unchecked.replace('198.51.100.21', 'not-an-ip'))]);
  t.false(broken.diagnostics.some((d) => d.message.includes('healthCheck')));
});

test('validation is all-or-nothing: one bad service nullifies the whole model', (t) => {
  const good = service('good', '203.0.113.1', '[{address: 198.51.100.21}]');
  const bad = service('bad', '203.0.113.2', '[{address: 198.51.100.21, weight: 0}]');
  t.truthy(parseConfig([file('c.yaml', CLUSTER), file('n.yaml', LB), file('g.yaml', good)]).model);
  t.is(parseConfig([file('c.yaml', CLUSTER), file('n.yaml', LB), file('g.yaml', good), file('b.yaml', bad)]).model, null);
});

test('paths outside config (status/, hidden, non-YAML) are ignored by parseConfig too', (t) => {
  const r = parseConfig([file('c.yaml', CLUSTER), file('status/lb-1.yaml', 'kind: Nope'), file('.x/a.yaml', 'kind: Nope'), file('notes.txt', 'kind: Nope')]);
  t.deepEqual(r.diagnostics, []);
  t.truthy(r.model);
});

test('no files at all', (t) => {
  t.deepEqual(parseConfig([]).diagnostics.map(formatDiagnostic), ['.:1:1: error: no Cluster document: a config repository needs exactly one (kind: Cluster)']);
});

// ---- readConfigDir ------------------------------------------------------------------------------

test('readConfigDir: skips .git, status, hidden and non-YAML; passes YAML links on unread; caps sizes', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'gitlb-readdir-'));
  const outside = mkdtempSync(join(tmpdir(), 'gitlb-outside-'));
  try {
    const repo = join(root, 'repo');
    for (const d of ['.git', 'status', 'services', 'sub/status', 'real-dir']) mkdirSync(join(repo, d), { recursive: true });
    writeFileSync(join(repo, '.git', 'config.yaml'), 'x');
    writeFileSync(join(repo, 'status', 'lb-1.yaml'), 'x');
    writeFileSync(join(repo, 'sub', 'status', 'kept.yaml'), 'kept'); // only the top-level status/ is special
    writeFileSync(join(repo, '.hidden.yaml'), 'x');
    writeFileSync(join(repo, 'README.md'), 'x');
    writeFileSync(join(repo, 'cluster.yaml'), CLUSTER);
    writeFileSync(join(repo, 'services', 'b.yml'), 'b');
    writeFileSync(join(repo, 'real-dir', 'c.yaml'), 'c');
    writeFileSync(join(repo, 'big.yaml'), Buffer.alloc(LIMITS.maxFileBytes * 2, 0x20));
    writeFileSync(join(outside, 'secret.yaml'), 'secret');
    symlinkSync(join(outside, 'secret.yaml'), join(repo, 'escape.yaml'));
    symlinkSync('../cluster.yaml', join(repo, 'services', 'link-in.yaml'));
    symlinkSync(join(repo, 'real-dir'), join(repo, 'linked-dir'));
    symlinkSync(outside, join(repo, 'outside-dir'));
    symlinkSync(join(repo, 'missing.yaml'), join(repo, 'dangling.yaml'));
    const files = await readConfigDir(repo);
    t.deepEqual(files.map((f) => f.path), [
      'big.yaml',
      'cluster.yaml',
      'dangling.yaml',
      'escape.yaml',
      'real-dir/c.yaml',
      'services/b.yml',
      'services/link-in.yaml',
      'sub/status/kept.yaml',
    ]);
    t.is(files[0]!.content.length, LIMITS.maxFileBytes + 1, 'a big file is read only up to the cap + 1');
    // Links are never followed (inside or outside the tree): parseConfig refuses them, as for Git objects.
    const link = files.find((f) => f.path === 'services/link-in.yaml')!;
    t.deepEqual([link.symlinkTarget, link.content.length], ['../cluster.yaml', 0]);
    t.is(files.find((f) => f.path === 'escape.yaml')!.content.length, 0, 'nothing outside the tree is read');
  } finally {
    rmSync(root, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
  }
});

test('a UTF-8 byte-order mark is accepted; unresolved tags are warnings', (t) => {
  const withBom = new Uint8Array([0xef, 0xbb, 0xbf, ...enc(CLUSTER)]);
  const r = parseConfig([{ path: 'c.yaml', content: withBom }, file('n.yaml', LB.replace('interface: eth0', 'interface: !iface eth0'))]);
  t.deepEqual(r.diagnostics.map(formatDiagnostic), ['n.yaml:7:14: warning: YAML: Unresolved tag: !iface']);
  t.is(r.model!.nodes[0]!.spec.interface, 'eth0');
});

test('schema defaults and the documented DEFAULTS agree', async (t) => {
  const { SCHEMAS } = await import('../../src/render/config/schema.js');
  const { DEFAULTS } = await import('../../src/render/config/limits.js');
  const prop = (schema: unknown, ...path: string[]): Record<string, unknown> =>
    path.reduce((s, k) => ((s as { properties: Record<string, unknown> }).properties[k] as Record<string, unknown>), schema as Record<string, unknown>);
  t.is(prop(SCHEMAS.Cluster, 'spec', 'maglev', 'tableSize').default, DEFAULTS.tableSize);
  t.is(prop(SCHEMAS.Cluster, 'spec', 'maglev', 'seed').default, DEFAULTS.seed);
  t.is(prop(SCHEMAS.Cluster, 'spec', 'conntrack', 'maxEntries').default, DEFAULTS.conntrackMaxEntries);
  t.is(prop(SCHEMAS.Cluster, 'spec', 'status', 'branch').default, DEFAULTS.statusBranch);
  t.is(prop(SCHEMAS.Cluster, 'spec', 'rollback', 'policy').default, DEFAULTS.rollbackPolicy);
  t.is(prop(SCHEMAS.Node, 'spec', 'mtu').default, DEFAULTS.mtu);
  const hc = prop(SCHEMAS.Service, 'spec', 'healthCheck');
  t.is(prop(hc, 'type').default, DEFAULTS.healthCheck.type);
  t.is(prop(hc, 'interval').default, DEFAULTS.healthCheck.interval);
  t.is(prop(hc, 'timeout').default, DEFAULTS.healthCheck.timeout);
  t.is(prop(hc, 'rise').default, DEFAULTS.healthCheck.rise);
  t.is(prop(hc, 'fall').default, DEFAULTS.healthCheck.fall);
  const real = (prop(SCHEMAS.Service, 'spec', 'reals').items as Record<string, unknown>);
  t.is(prop(real, 'weight').default, DEFAULTS.weight);
  t.is(prop(real, 'weight').minimum, 1);
  t.is(prop(real, 'weight').maximum, 65535);
});
