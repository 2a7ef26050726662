// Desired state: which services a node gets, stable ids, drain/disabled/unhealthy handling, digests, JSON.
import test from 'ava';
import { createHash } from 'node:crypto';
import { renderDesiredState, desiredStateToJson, desiredStateFromJson, resolveForwarding } from '../../src/render/desired.js';
import { rawStableId } from '../../src/render/ids.js';
import { buildMaglevTable, maglevBackendId, maglevSeedFromBase64 } from '../../src/render/maglev.js';
import { cluster, model, node, real, service } from '../helpers/model-builder.js';
import { configFiles, gitlb, tempDir, writeTree } from '../helpers/cli-repo.js';
import { parseConfig } from '../../src/render/config/index.js';
import { readConfigDir } from '../../src/reconciler/source/read-dir.js';
import { runRender } from '../../src/cli/commands/render.js';

const SEED = 'Z2l0bGItc2VlZC0x'; // "gitlb-seed-1"

function sampleModel() {
  return model({
    cluster: cluster({ tableSize: 1021, seed: SEED }),
    nodes: [
      node('lb-1', { role: 'lb', allowedVips: ['192.0.2.0/25', '2001:db8:1::/64'], addresses: ['192.0.2.201'] }),
      node('lb-2', { role: 'lb', allowedVips: ['192.0.2.0/24'], snatAddress: '192.0.2.250', snatPorts: { min: 40000, max: 50000 } }),
      node('be-1', { role: 'backend', addresses: ['198.51.100.11'] }),
      node('be-4', { role: 'backend', addresses: ['198.51.100.14'] }),
      node('be-6', { role: 'backend', addresses: ['2001:db8:2::6'] }),
    ],
    services: [
      service('web', {
        vip: '192.0.2.10',
        ports: [
          { port: 443, protocol: 'TCP' },
          { port: 80, protocol: 'TCP' },
        ],
        dispatch: { mode: 'dsr', encap: 'ipip' },
        reals: [
          real('198.51.100.11', 1),
          real('198.51.100.12', 2),
          real('198.51.100.13', 1, 'drain'),
          real('198.51.100.14', 1, 'disabled'),
        ],
      }),
      service('dns', {
        vip: '192.0.2.53',
        ports: [
          { port: 53, protocol: 'UDP' },
          { port: 53, protocol: 'TCP' },
        ],
        dispatch: { mode: 'hybrid', encap: 'l2' },
        hash: { sourcePort: false },
        reals: [real('198.51.100.11'), real('198.51.100.21')],
      }),
      service('far', { vip: '192.0.2.200', reals: [real('198.51.100.31')] }), // outside lb-1's /25
      service('v6', {
        vip: '2001:db8:1::80',
        ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }],
        dispatch: { mode: 'snat' },
        reals: [real('2001:db8:2::6'), real('2001:db8:2::7')],
      }),
    ],
  });
}

const leDigest = (ring: Uint32Array) => {
  const dv = new DataView(new ArrayBuffer(ring.length * 4));
  ring.forEach((v, j) => dv.setUint32(j * 4, v, true));
  return createHash('sha256').update(new Uint8Array(dv.buffer)).digest('hex');
};

test('lb node: services whose VIP lies in allowedVips, listeners sorted, forwarding resolved', (t) => {
  const s = renderDesiredState(sampleModel(), 'lb-1');
  t.is(s.role, 'lb');
  t.deepEqual(s.services.map((x) => x.name).sort(), ['dns', 'v6', 'web']);
  t.deepEqual(
    s.vips.map((v) => `${v.vip} ${v.port}/${v.protocol} ${v.forwarding} ->${v.targetPort}`),
    [
      '192.0.2.10 80/TCP dsr-ipip ->80',
      '192.0.2.10 443/TCP dsr-ipip ->443',
      '192.0.2.53 53/TCP dsr-l2 ->53', // hybrid: TCP is DSR
      '192.0.2.53 53/UDP snat ->53', // hybrid: UDP is SNAT
      '2001:db8:1::80 80/TCP snat ->8080',
    ],
  );
  t.deepEqual(s.vips.map((v) => v.family), [4, 4, 4, 4, 6]);
  const dns = s.services.find((x) => x.name === 'dns')!;
  t.true(s.vips.filter((v) => v.vip === '192.0.2.53').every((v) => v.serviceId === dns.id && v.hashSourcePort === false));
  t.deepEqual(s.localVips, []);
  t.deepEqual(s.addresses, ['192.0.2.201']);
  t.is(renderDesiredState(sampleModel(), 'lb-2').addresses, undefined);
  t.is(s.hashSeed, Buffer.from(SEED, 'base64').readUInt32BE(4));
  t.is(s.conntrackMaxEntries, 65536);
  t.deepEqual(s.services.map((x) => x.id), [...s.services.map((x) => x.id)].sort((a, b) => a - b));
});

test('drain reals keep their id but get no entries; disabled reals are gone; entries add up to M', (t) => {
  const s = renderDesiredState(sampleModel(), 'lb-1');
  const web = s.services.find((x) => x.name === 'web')!;
  t.deepEqual(
    web.reals.map((r) => [r.address, r.state, r.entries > 0]).sort(),
    [
      ['198.51.100.11', 'active', true],
      ['198.51.100.12', 'active', true],
      ['198.51.100.13', 'drain', false],
    ],
  );
  t.is(web.reals.reduce((a, r) => a + r.entries, 0), 1021);
  t.true(s.reals.some((r) => r.address === '198.51.100.13'), 'drained real stays known to the data plane');
  t.false(s.reals.some((r) => r.address === '198.51.100.14'), 'disabled real is not known');
  // Weight 2 vs 1: roughly twice the entries.
  const e = (a: string) => web.reals.find((r) => r.address === a)!.entries;
  t.true(Math.abs(e('198.51.100.12') / e('198.51.100.11') - 2) < 0.05);
  t.true(web.ring.every((id) => id === web.reals[0]!.realId || id === web.reals[1]!.realId || id === web.reals[2]!.realId));
  t.deepEqual(s.reals.map((r) => r.id), [...s.reals.map((r) => r.id)].sort((a, b) => a - b));
});

test('unhealthy reals are excluded from the table and marked, but stay known', (t) => {
  const health = { isHealthy: (svc: string, addr: string) => !(svc === 'web' && addr === '198.51.100.12') };
  const s = renderDesiredState(sampleModel(), 'lb-1', health);
  const web = s.services.find((x) => x.name === 'web')!;
  const r12 = web.reals.find((r) => r.address === '198.51.100.12')!;
  const r11 = web.reals.find((r) => r.address === '198.51.100.11')!;
  t.false(r12.healthy);
  t.is(r12.entries, 0);
  t.is(r11.entries, 1021);
  t.true(web.ring.every((id) => id === r11.realId));
  t.true(s.reals.some((r) => r.address === '198.51.100.12'));
  // Other services are untouched.
  t.is(
    s.services.find((x) => x.name === 'dns')!.digest,
    renderDesiredState(sampleModel(), 'lb-1').services.find((x) => x.name === 'dns')!.digest,
  );
});

test('digest is SHA-256 of the ring as little-endian u32; every node agrees on a shared service', (t) => {
  const a = renderDesiredState(sampleModel(), 'lb-1');
  const b = renderDesiredState(sampleModel(), 'lb-2');
  for (const svc of a.services) t.is(svc.digest, leDigest(svc.ring));
  const webA = a.services.find((x) => x.name === 'web')!;
  const webB = b.services.find((x) => x.name === 'web')!;
  t.is(webA.digest, webB.digest);
  t.is(webA.id, webB.id);
  t.true(b.services.some((x) => x.name === 'far'));
  t.false(a.services.some((x) => x.name === 'far'));
  t.is(b.snatAddress, '192.0.2.250');
  t.deepEqual(b.snatPorts, { min: 40000, max: 50000 });
  t.is(a.snatPorts, undefined);
});

test('ids and tables are stable across revisions: reordering, adding a service, changing another', (t) => {
  const base = renderDesiredState(sampleModel(), 'lb-2');
  const m = sampleModel();
  // Reverse the order of reals and ports in YAML, add a service, change an unrelated one.
  for (const svc of m.services) {
    svc.spec.reals.reverse();
    svc.spec.ports.reverse();
  }
  m.services.push(service('added', { vip: '192.0.2.99', reals: [real('198.51.100.99'), real('198.51.100.11')] }));
  m.services.find((s) => s.metadata.name === 'far')!.spec.reals.push(real('198.51.100.32'));
  const head = renderDesiredState(m, 'lb-2');
  for (const name of ['web', 'dns']) {
    const x = base.services.find((s) => s.name === name)!;
    const y = head.services.find((s) => s.name === name)!;
    t.is(y.id, x.id);
    t.is(y.digest, x.digest);
    t.deepEqual(y.reals, x.reals);
  }
  const realId = (s: typeof base, a: string) => s.reals.find((r) => r.address === a)!.id;
  t.is(realId(head, '198.51.100.11'), realId(base, '198.51.100.11'));
  t.is(realId(head, '198.51.100.31'), realId(base, '198.51.100.31'));
  // Ids come from the name: SHA-256("gitlb/service/<name>") first 4 bytes, absent collisions.
  t.is(base.services.find((s) => s.name === 'web')!.id, rawStableId('service', 'web'));
  t.is(realId(base, '198.51.100.11'), rawStableId('real', '198.51.100.11'));
});

test('backend node: services that list its address, localVips for every DSR encap, none for snat', (t) => {
  const be1 = renderDesiredState(sampleModel(), 'be-1');
  t.is(be1.role, 'backend');
  t.deepEqual(be1.services.map((s) => s.name).sort(), ['dns', 'web']);
  t.deepEqual(be1.localVips, ['192.0.2.10', '192.0.2.53']);
  const be4 = renderDesiredState(sampleModel(), 'be-4'); // its real is disabled
  t.deepEqual(be4.services, []);
  t.deepEqual(be4.localVips, []);
  const be6 = renderDesiredState(sampleModel(), 'be-6'); // SNAT service: the backend sees its own address
  t.deepEqual(be6.services.map((s) => s.name), ['v6']);
  t.deepEqual(be6.localVips, []);
});

test("a real's Maglev identity is its address with the service's lowest target (port, protocol)", (t) => {
  const s = renderDesiredState(sampleModel(), 'lb-1');
  const check = (name: string, port: number, protocol: string) => {
    const svc = s.services.find((x) => x.name === name)!;
    const backends = svc.reals
      .filter((r) => r.entries > 0)
      .map((r) => ({ id: maglevBackendId(r.address, port, protocol), weight: r.weight, realId: r.realId }));
    t.deepEqual(buildMaglevTable(backends, svc.tableSize, maglevSeedFromBase64(SEED)), svc.ring, name);
  };
  check('web', 80, 'TCP'); // ports 443 and 80
  check('dns', 53, 'TCP'); // 53/UDP and 53/TCP: TCP first
  check('v6', 8080, 'TCP'); // port 80 -> targetPort 8080
});

test('forwarding: dsr without encap means l2; snat stays snat', (t) => {
  const svc = service('x', { vip: '192.0.2.1', reals: [], dispatch: { mode: 'dsr' } });
  t.is(resolveForwarding(svc, 'UDP'), 'dsr-l2');
  svc.spec.dispatch = { mode: 'hybrid', encap: 'ipopt' };
  t.is(resolveForwarding(svc, 'TCP'), 'dsr-ipopt');
  t.is(resolveForwarding(svc, 'UDP'), 'snat');
});

test('a service with no usable real has an all-zero ring (new flows dropped)', (t) => {
  const m = sampleModel();
  m.services.find((s) => s.metadata.name === 'far')!.spec.reals = [real('198.51.100.31', 1, 'drain')];
  const far = renderDesiredState(m, 'lb-2').services.find((s) => s.name === 'far')!;
  t.is(far.ring.length, 1021, 'a full-size ring, so the all-zero check below is not vacuous');
  t.true(far.ring.every((v) => v === 0));
  t.is(far.reals[0]!.entries, 0);
});

test('per-service table size overrides the cluster default', (t) => {
  const m = sampleModel();
  m.services.find((s) => s.metadata.name === 'web')!.spec.maglev = { tableSize: 251 };
  const s = renderDesiredState(m, 'lb-1');
  t.is(s.services.find((x) => x.name === 'web')!.ring.length, 251);
  t.is(s.services.find((x) => x.name === 'dns')!.ring.length, 1021);
});

test('JSON: sorted keys, byte-identical across runs, rings only with tables, round-trips', (t) => {
  const a = desiredStateToJson(renderDesiredState(sampleModel(), 'lb-1'));
  const b = desiredStateToJson(renderDesiredState(sampleModel(), 'lb-1'));
  t.is(a, b);
  t.false(a.includes('"ring"'));
  const checkSorted = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(checkSorted);
    else if (v && typeof v === 'object') {
      const keys = Object.keys(v);
      t.deepEqual(keys, [...keys].sort());
      Object.values(v).forEach(checkSorted);
    }
  };
  checkSorted(JSON.parse(a));
  const state = renderDesiredState(sampleModel(), 'lb-1');
  const withTables = desiredStateToJson(state, { tables: true });
  const back = desiredStateFromJson(withTables);
  t.deepEqual(back.services.map((s) => s.ring), state.services.map((s) => s.ring));
  t.is(desiredStateToJson(back, { tables: true }), withTables);
});

test('unknown node and bad seed give clear errors', (t) => {
  t.throws(() => renderDesiredState(sampleModel(), 'nope'), { message: /node 'nope' is not defined.*lb-1/ });
  const m = sampleModel();
  m.cluster.spec.maglev.seed = 'AAAA';
  t.throws(() => renderDesiredState(m, 'lb-1'), { message: /maglev\.seed/ });
  t.is(maglevSeedFromBase64(SEED), Buffer.from(SEED, 'base64').readUInt32BE(0));
});

// ---------- from YAML, and the command ----------

const webReals = ['{address: 198.51.100.1}', '{address: 198.51.100.2, weight: 250}', '{address: 198.51.100.3, state: drain}'];

test('YAML order and file layout do not change the state', async (t) => {
  const a = await tempDir('render-a');
  const b = await tempDir('render-b');
  try {
    await writeTree(a.path, configFiles({ webReals }));
    // Same config, reals reversed, every document in one file in another order.
    const files = configFiles({ webReals: [...webReals].reverse() });
    const all = ['services/web.yaml', 'nodes/lb.yaml', 'services/dns.yaml', 'cluster.yaml'].map((f) => files[f]!.trimEnd()).join('\n---\n');
    await writeTree(b.path, { 'everything.yml': all + '\n' });
    const ma = parseConfig(await readConfigDir(a.path));
    const mb = parseConfig(await readConfigDir(b.path));
    t.truthy(ma.model, JSON.stringify(ma.diagnostics));
    t.truthy(mb.model, JSON.stringify(mb.diagnostics));
    for (const n of ['lb-1', 'lb-2']) {
      t.is(
        desiredStateToJson(renderDesiredState(ma.model!, n), { tables: true }),
        desiredStateToJson(renderDesiredState(mb.model!, n), { tables: true }),
      );
    }
  } finally {
    await a.remove();
    await b.remove();
  }
});

test('gitlb render: JSON equals the library output, two nodes agree on digests; text; config errors exit 1', async (t) => {
  const dir = await tempDir('render-cli');
  try {
    // Two DSR services: one left to the default check path (via: vip there), one probing its reals directly.
    const dsr = (name: string, vip: string, check: string) => `apiVersion: gitlb/v1
kind: Service
metadata: {name: ${name}}
spec:
  vip: ${vip}
  ports: [{port: 80}]
  dispatch: {mode: dsr, encap: l2}
  healthCheck: ${check}
  reals:
    - {address: 198.51.100.61}
`;
    const extra = {
      'services/api.yaml': dsr('api', '192.0.2.20', '{type: http, path: /healthz}'),
      'services/raw.yaml': dsr('raw', '192.0.2.21', '{type: tcp, port: 81, via: real}'),
    };
    await writeTree(dir.path, configFiles({ webReals, extra }));
    // One real spawn of the CLI; the rest runs the command's core in-process (spawning tsx is slow here).
    const one = await gitlb(['render', dir.path, '--node', 'lb-1', '--format', 'json']);
    const two = await runRender(['--node', 'lb-2', '--format', 'json', '--tables', dir.path]); // in-process core
    t.is(one.code, 0, one.stderr);
    const s1 = JSON.parse(one.stdout);
    const s2 = JSON.parse(two.stdout);
    t.is(one.stdout, desiredStateToJson(renderDesiredState(parseConfig(await readConfigDir(dir.path)).model!, 'lb-1')));
    t.is(s1.node, 'lb-1');
    t.is(s2.interface, 'eth1');
    const digest = (s: { services: { name: string; digest: string }[] }, name: string) => s.services.find((x) => x.name === name)!.digest;
    t.is(digest(s1, 'web'), digest(s2, 'web'));
    t.is(digest(s1, 'dns'), digest(s2, 'dns'));
    t.false('ring' in s1.services[0]);
    const web2 = s2.services.find((x: { name: string }) => x.name === 'web');
    t.is(web2.ring.length, 1021);
    t.is(leDigest(Uint32Array.from(web2.ring)), web2.digest);

    const text = await runRender([dir.path, '--node', 'lb-1', '--tables']);
    t.is(text.code, 0);
    t.regex(text.stdout, new RegExp(`web +id \\d+ +snat +M=1021 +digest ${digest(s1, 'web')}`));
    t.regex(text.stdout, /192\.0\.2\.53:53\/UDP +dns +snat/);
    t.regex(text.stdout, /198\.51\.100\.3 .*drain.* 0 entries/);
    t.regex(text.stdout, /ring: \d+\(\d+\)/);
    // The resolved health-check path, as --format json and gitlb plan show it (docs/health.md).
    t.regex(text.stdout, /\n  api +id \d+ +dsr\/l2 .*digest [0-9a-f]{64} +check http :80\/healthz via vip\n/);
    t.regex(text.stdout, /\n  raw +id \d+ +dsr\/l2 .*digest [0-9a-f]{64} +check tcp :81 via real\n/);
    t.regex(text.stdout, /\n  web +id \d+ +snat .*digest [0-9a-f]{64} +check none\n/); // no healthCheck: nothing is probed
    t.is(s1.services.find((x: { name: string }) => x.name === 'api').healthCheck.via, 'vip');

    await writeTree(dir.path, { 'services/web.yaml': configFiles({ webReals: ['{address: 198.51.100.1, weight: 0}'] })['services/web.yaml']! });
    const bad = await runRender([dir.path, '--node', 'lb-1']);
    t.is(bad.code, 1);
    t.regex(bad.stderr, /services\/web\.yaml:\d+:\d+: error: /);
    t.is(bad.stdout, '');
  } finally {
    await dir.remove();
  }
});

test('sample-config-repo: every node renders; lb nodes agree on every shared digest', async (t) => {
  const { model: m, diagnostics } = parseConfig(await readConfigDir(new URL('../../sample-config-repo', import.meta.url).pathname));
  t.truthy(m, diagnostics.map((d) => `${d.file}:${d.line}:${d.col} ${d.message}`).join('\n'));
  const states = m!.nodes.map((n) => renderDesiredState(m!, n.metadata.name));
  const lbs = states.filter((s) => s.role === 'lb');
  t.true(lbs.length >= 2);
  const digests = new Map<string, string>();
  let comparisons = 0;
  for (const s of states) {
    for (const svc of s.services) {
      t.is(svc.digest, leDigest(svc.ring));
      t.is(svc.ring.length, svc.tableSize);
      const seen = digests.get(svc.name);
      if (seen) {
        t.is(svc.digest, seen, `${s.node}/${svc.name}`);
        comparisons++;
      } else digests.set(svc.name, svc.digest);
      const listed = new Set(svc.reals.map((r) => r.realId));
      t.true(svc.ring.every((id) => listed.has(id)));
    }
  }
  for (const s of states.filter((x) => x.role === 'backend')) {
    const vips = new Set(s.vips.map((v) => v.vip));
    t.true(s.localVips.every((v) => vips.has(v)));
  }
  t.true(comparisons > 0, 'at least one service is shared by two nodes, so agreement was actually checked');
  t.is(digests.size, m!.services.length, 'every service is served by some node');
});
