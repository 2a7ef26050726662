// BGP (issue 14), pure tiers: Cluster/Node bgp settings through the real config stage (exact file:line:col
// diagnostics), the announcement rule, and the generated BIRD configuration, which BIRD itself must accept.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { renderDesiredState } from '../../src/render/desired.js';
import { decideAnnouncements, announcementText, type AnnounceFacts } from '../../src/render/bgp/announce.js';
import { renderBirdConfig, peerProtocolName } from '../../src/render/bgp/bird.js';
import type { ConfigModel } from '../../src/render/model.js';
import { assessStatus, formatStatusVerdict } from '../../src/reconciler/status/assess.js';
import type { NodeStatus } from '../../src/reconciler/status/status-doc.js';
import { BE, CLUSTER_BGP, PEERS, file, goodModel, lbNode, parse, svc } from '../helpers/bgp-model.js';

test('config: bgp settings reach the model with defaults, canonical and sorted', (t) => {
  const m = goodModel(PEERS + '  state: drain\n');
  t.deepEqual(m.cluster.spec.bgp, { localAsn: 65001, holdTime: 3, keepaliveTime: 1, communities: [[65001, 100], [65001, 200]], med: 50 });
  const lb = m.nodes.find((n) => n.metadata.name === 'lb-1')!;
  t.is(lb.spec.state, 'drain');
  t.deepEqual(lb.spec.bgp, {
    routerId: '198.51.100.11',
    peers: [
      { address: '198.51.100.1', asn: 65000, password: 's3cret' },
      { address: '2001:db8:1::1', asn: 65000 },
    ],
  });
  t.is(m.nodes.find((n) => n.metadata.name === 'be-1')!.spec.state, undefined);
});

test('config: bad bgp settings are refused with file:line:col, nothing else', (t) => {
  const { model, lines } = parse([
    file('cluster.yaml', CLUSTER_BGP('    localAsn: 23456\n    holdTime: 3\n    keepaliveTime: 3\n    communities: ["65001:70000"]\n')),
    file(
      'nodes/lb-1.yaml',
      lbNode(
        'lb-1',
        `  bgp:
    routerId: 198.51.100.11
    peers:
      - {address: 198.51.100.1, asn: 65000}
      - {address: 198.51.100.1, asn: 65000}
      - {address: 224.0.0.5, asn: 23456}
`,
      ),
    ),
    file('nodes/lb-2.yaml', lbNode('lb-2', '  bgp:\n    routerId: 198.51.100.11\n    peers: [{address: 198.51.100.1, asn: 65000}]\n')),
    file('nodes/be-1.yaml', BE + '  state: drain\n  bgp: {routerId: 198.51.100.21, peers: [{address: 198.51.100.1, asn: 65000}]}\n'),
    file('services/web.yaml', svc('web', '203.0.113.10', '[{address: 198.51.100.21}]')),
  ]);
  t.is(model, null);
  t.deepEqual(lines, [
    'cluster.yaml:7:15: error: spec.bgp.localAsn: 23456 is AS_TRANS, not an AS number a speaker may use',
    'cluster.yaml:9:20: error: spec.bgp.keepaliveTime: 3s must be below spec.bgp.holdTime (3s)',
    "cluster.yaml:10:19: error: spec.bgp.communities[0]: '65001:70000' has a part above 65535",
    "nodes/be-1.yaml:9:10: error: spec.state: only lb nodes can drain (this node's role is backend)",
    "nodes/be-1.yaml:10:3: error: spec.bgp: only lb nodes announce VIPs (this node's role is backend)",
    'nodes/lb-1.yaml:14:19: error: spec.bgp.peers[1].address: 198.51.100.1 is already spec.bgp.peers[0]',
    'nodes/lb-1.yaml:15:19: error: spec.bgp.peers[2].address: 224.0.0.5 is a multicast address',
    "nodes/lb-1.yaml:15:35: error: spec.bgp.peers[2].asn: 23456 is AS_TRANS, not a peer's AS number",
    "nodes/lb-2.yaml:11:15: error: spec.bgp.routerId: 198.51.100.11 is already the router id of node 'lb-1'",
  ]);
});

test('config: a node with bgp needs the Cluster\'s bgp; a peer must not be the node itself', (t) => {
  const { model, lines } = parse([
    file('cluster.yaml', 'apiVersion: gitlb/v1\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n'),
    file('nodes/lb-1.yaml', lbNode('lb-1', '  bgp:\n    routerId: 198.51.100.11\n    peers: [{address: 198.51.100.11, asn: 65000}]\n')),
    file('nodes/be-1.yaml', BE),
    file('services/web.yaml', svc('web', '203.0.113.10', '[{address: 198.51.100.21}]')),
  ]);
  t.is(model, null);
  t.deepEqual(lines, [
    "nodes/lb-1.yaml:10:3: error: spec.bgp: the Cluster has no spec.bgp (local AS number), so this node cannot speak BGP (cluster.yaml:4:9)",
    "nodes/lb-1.yaml:12:23: error: spec.bgp.peers[0].address: 198.51.100.11 is one of this node's own addresses",
  ]);
});

test('config: the schema bounds ASNs and passwords', (t) => {
  const { model, lines } = parse([
    file('cluster.yaml', CLUSTER_BGP('    localAsn: 4294967295\n')),
    file('nodes/lb-1.yaml', lbNode('lb-1', '  state: gone\n  bgp:\n    routerId: 2001:db8::1\n    peers: [{address: 198.51.100.1, asn: 0, password: "a b"}]\n')),
    file('nodes/be-1.yaml', BE),
    file('services/web.yaml', svc('web', '203.0.113.10', '[{address: 198.51.100.21}]')),
  ]);
  t.is(model, null);
  t.deepEqual(lines.filter((l) => !l.startsWith('services/')), [
    'cluster.yaml:7:15: error: spec.bgp.localAsn: must be between 1 and 4294967294 (got 4294967295)',
    "nodes/lb-1.yaml:10:10: error: spec.state: must be one of 'active', 'drain' (got 'gone')",
    "nodes/lb-1.yaml:12:15: error: spec.bgp.routerId: must be an IPv4 address (a BGP router id is a 32-bit number written as one) (got '2001:db8::1')",
    'nodes/lb-1.yaml:13:42: error: spec.bgp.peers[0].asn: must be between 1 and 4294967294 (got 0)',
    `nodes/lb-1.yaml:13:55: error: spec.bgp.peers[0].password: must be 1 to 80 printable ASCII characters without spaces, '"' or '\\' (got 'a b')`,
  ]);
});

// ---- the announcement rule ------------------------------------------------------------------------

function facts(model: ConfigModel, over: Partial<AnnounceFacts> & { down?: string[] } = {}): AnnounceFacts {
  const down = new Set(over.down ?? []);
  const desired = renderDesiredState(model, 'lb-1', { isHealthy: (_s, addr) => !down.has(addr) });
  return { node: 'lb-1', model, desired, dataPlaneUp: true, stopping: false, ...over };
}
const states = (f: AnnounceFacts) => decideAnnouncements(f).map((a) => `${a.prefix} ${announcementText(a)}`);

test('announce: every VIP when applied, attached and healthy; sorted, /32 and /128', (t) => {
  t.deepEqual(states(facts(goodModel())), ['203.0.113.10/32 announced', '203.0.113.20/32 announced', '2001:db8:ff::10/128 announced']);
});

test('announce: all reals of one VIP down withdraws only that VIP; one healthy real keeps it', (t) => {
  const m = goodModel();
  t.deepEqual(states(facts(m, { down: ['198.51.100.21'] })), [
    '203.0.113.10/32 announced', // 198.51.100.22 still up
    '203.0.113.20/32 withdrawn: no healthy real',
    '2001:db8:ff::10/128 announced',
  ]);
});

test('announce: drain, data-plane failure, stopping, nothing applied and decommission withdraw everything', (t) => {
  const m = goodModel();
  const all = (reason: string) => ['203.0.113.10/32', '203.0.113.20/32', '2001:db8:ff::10/128'].map((p) => `${p} withdrawn: ${reason}`);
  t.deepEqual(states(facts(goodModel(PEERS + '  state: drain\n'))), all('draining'));
  t.deepEqual(states(facts(m, { dataPlaneUp: false })), all('data plane down'));
  t.deepEqual(states(facts(m, { stopping: true, dataPlaneUp: false })), all('stopping'));
  t.deepEqual(states(facts(m, { model: null })), all('not applied'));
  const gone = { ...m, nodes: m.nodes.filter((n) => n.metadata.name !== 'lb-1') };
  t.deepEqual(states(facts(m, { model: gone })), all('decommissioned'));
  t.deepEqual(states(facts(m, { model: goodModel('') })), all('decommissioned'), 'BGP settings removed from the node');
  t.deepEqual(decideAnnouncements({ ...facts(m), desired: null }), []);
  // A drained real takes no new flows: it does not keep the VIP announced.
  const drained = goodModel();
  drained.services.find((s) => s.metadata.name === 'api')!.spec.reals[0]!.state = 'drain';
  t.deepEqual(states(facts(drained)).slice(1, 2), ['203.0.113.20/32 withdrawn: no healthy real']);
});

// ---- the BIRD configuration -----------------------------------------------------------------------

test('bird: deterministic, announced VIPs as static routes, withdrawn ones only as comments', (t) => {
  const m = goodModel();
  const a = renderBirdConfig(m, 'lb-1', decideAnnouncements(facts(m, { down: ['198.51.100.21'] })))!;
  t.is(renderBirdConfig(m, 'lb-1', decideAnnouncements(facts(m, { down: ['198.51.100.21'] }))), a);
  t.regex(a, /route 203\.0\.113\.10\/32 blackhole;/);
  t.notRegex(a, /route 203\.0\.113\.20\/32/);
  t.regex(a, /# {3}203\.0\.113\.20\/32 +withdrawn: no healthy real +api/);
  t.regex(a, /route 2001:db8:ff::10\/128 blackhole;/);
  t.regex(a, /bgp_med = 50;\n {2}bgp_community\.add\(\(65001, 100\)\);\n {2}bgp_community\.add\(\(65001, 200\)\);/);
  t.regex(a, new RegExp(`protocol bgp ${peerProtocolName('198.51.100.1')} \\{[^}]*neighbor 198\\.51\\.100\\.1 as 65000;[^}]*hold time 3;[^}]*password "s3cret";[^}]*ipv4 \\{`));
  t.regex(a, /protocol bgp gitlb_peer_2001_db8_1__1 \{[^}]*local as 65001;[^}]*ipv6 \{/);
  t.notRegex(renderBirdConfig(m, 'lb-1', [], { redactPasswords: true })!, /s3cret/);
  t.is(renderBirdConfig(m, 'be-1', []), null);
  // Only what the node may serve can become a route.
  t.throws(() => renderBirdConfig(m, 'lb-1', [{ vip: '192.0.2.9', prefix: '192.0.2.9/32', family: 4, announced: true, services: [] }]), {
    message: /outside spec\.allowedVips/,
  });
});

test('bird: BIRD 2 itself accepts the generated file, with and without announcements', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-bird-'));
  try {
    const m = goodModel();
    for (const [name, f] of [['up', facts(m)], ['withdrawn', facts(m, { stopping: true })]] as const) {
      const path = join(dir, `${name}.conf`);
      writeFileSync(path, renderBirdConfig(m, 'lb-1', decideAnnouncements(f))!);
      t.notThrows(() => execFileSync('bird', ['-p', '-c', path], { stdio: 'pipe' }), name);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---- gitlb status ---------------------------------------------------------------------------------

test('gitlb status: a BGP table per node and VIP; malformed entries from a status file are skipped', (t) => {
  const now = new Date('2026-01-01T00:00:10Z');
  const base = { apiVersion: 'gitlb/v1', kind: 'NodeStatus', branch: 'main', appliedRevision: null, appliedAt: null, lastAttempt: null,
    lastFailure: null, warnings: [], services: [], counters: {}, startedAt: '', updatedAt: '2026-01-01T00:00:00Z' } as unknown as NodeStatus;
  const statuses: NodeStatus[] = [
    { ...base, node: 'be-1', role: 'backend' },
    { ...base, node: 'lb-1', role: 'lb', bgp: { vips: [{ vip: '203.0.113.10', state: 'withdrawn: draining' }, { vip: 7, state: null } as never], bird: { error: 'birdc configure: refused' } } },
    { ...base, node: 'lb-2', role: 'lb', bgp: { vips: [{ vip: '203.0.113.10', services: ['web'], state: 'announced' }] } },
  ];
  const verdict = (list: NodeStatus[]) => assessStatus({ statuses: list, head: null, configNodes: [], now, behindGraceMs: 60_000, staleAfterMs: 600_000 });
  const v = verdict(statuses);
  t.deepEqual(v.problems, ['lb-1: BIRD did not take the announcements: birdc configure: refused']);
  const text = formatStatusVerdict(v, now);
  const bgp = text.slice(text.indexOf('BGP announcements:'), text.indexOf(' node(s);'));
  t.deepEqual(bgp.split('\n').map((l) => l.trimEnd().split(/\s{2,}/)), [
    ['BGP announcements:'],
    ['NODE', 'VIP', 'BGP'],
    ['lb-1', '203.0.113.10', 'withdrawn: draining'],
    ['lb-1', '(BIRD)', 'error: birdc configure: refused'],
    ['lb-2', '203.0.113.10', 'announced'],
    ['3'],
  ]);
  t.notRegex(formatStatusVerdict(verdict([statuses[0]!]), now), /BGP/, 'no section without BGP');
});
