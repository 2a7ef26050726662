// Pure parts of health checking, as tables: hysteresis, the semaphore, consensus, fail modes, the health gate,
// check targets. (Real servers in namespaces: test/netns/health-netns.test.ts.)
import test from 'ava';
import { createHash } from 'node:crypto';
import {
  HealthChecker,
  Semaphore,
  checkTargets,
  describeProbe,
  consensusHealth,
  decideHealth,
  healthGate,
  initialHealth,
  localDownSet,
  resolveHealth,
  stepHealth,
  type GateState,
  type NodeObservations,
  type Observations,
} from '../../src/reconciler/health/index.js';
import { buildMaglevTable, maglevBackendId } from '../../src/render/maglev.js';
import { model, service } from '../health-lab.js';

// ---- hysteresis ------------------------------------------------------------------------------------------------

function run(results: string, rise: number, fall: number): string {
  let h = initialHealth(0);
  const states: string[] = [];
  [...results].forEach((c, i) => {
    h = stepHealth(h, { ok: c === '+', detail: '', at: i + 1, durationMs: 0 }, rise, fall).next;
    states.push(h.state === 'up' ? 'U' : h.state === 'down' ? 'D' : '?');
  });
  return states.join('');
}

const hysteresisTable: [string, number, number, string, string][] = [
  ['first success confirms at once', 2, 3, '+', 'U'],
  ['unknown needs fall failures', 2, 3, '---', '??D'],
  ['up -> down after fall consecutive failures', 2, 3, '+---', 'UUUD'],
  ['a success resets the failure streak', 2, 3, '+--+--+', 'UUUUUUU'],
  ['down -> up after rise consecutive successes', 2, 3, '---++', '??DDU'],
  ['a failure resets the success streak', 3, 1, '-++-+++', 'DDDDDDU'],
  ['alternating never flips with rise=fall=2', 2, 2, '+-+-+-+-+-', 'UUUUUUUUUU'],
  ['alternating flips every time with rise=fall=1', 1, 1, '+-+-+-', 'UDUDUD'],
  ['rise/fall of 0 behave as 1', 0, 0, '-+', 'DU'],
];
for (const [name, rise, fall, results, expected] of hysteresisTable) {
  test(`hysteresis: ${name}`, (t) => {
    t.is(run(results, rise, fall), expected);
  });
}

test('hysteresis: since moves only on a flip; changed is reported exactly then', (t) => {
  let h = initialHealth(100);
  const flips: number[] = [];
  const seq = '+--+---++';
  [...seq].forEach((c, i) => {
    const s = stepHealth(h, { ok: c === '+', detail: c, at: 1000 + i, durationMs: 1 }, 2, 3);
    if (s.changed) flips.push(s.next.since);
    h = s.next;
  });
  t.deepEqual(flips, [1000, 1006, 1008]);
  t.is(h.since, 1008);
  t.is(h.last?.detail, '+');
});

// ---- semaphore ------------------------------------------------------------------------------------------------

test('semaphore: bounds holders, serves waiters in order, abort leaves the queue, double release is harmless', async (t) => {
  const sem = new Semaphore(2);
  const order: string[] = [];
  const r1 = await sem.acquire();
  const r2 = await sem.acquire();
  const p3 = sem.acquire().then((r) => (order.push('3'), r));
  const ac = new AbortController();
  const p4 = sem.acquire(ac.signal);
  const p5 = sem.acquire().then((r) => (order.push('5'), r));
  t.is(sem.active, 2);
  t.is(sem.waiting, 3);
  ac.abort(new Error('gone'));
  await t.throwsAsync(p4, { message: 'gone' });
  t.is(sem.waiting, 2);
  r1();
  r1(); // must not free a second slot
  const r3 = await p3;
  t.is(sem.active, 2);
  t.deepEqual(order, ['3']);
  r2();
  const r5 = await p5;
  t.deepEqual(order, ['3', '5']);
  r3();
  r5();
  t.is(sem.active, 0);
  t.is(sem.highWater, 2);
  t.throws(() => new Semaphore(0), { instanceOf: RangeError });
});

// ---- consensus --------------------------------------------------------------------------------------------------

const NOW = Date.parse('2026-11-29T12:00:00Z');
const ago = (ms: number) => new Date(NOW - ms).toISOString();
const up = (since = ago(60_000)) => ({ up: true, since });
const down = (since = ago(5_000)) => ({ up: false, since });

function nodeObs(node: string, observations: Observations, publishedMsAgo = 1000): NodeObservations {
  return { node, publishedAt: ago(publishedMsAgo), observations };
}

const LBS = ['lb1', 'lb2', 'lb3'];
const A = '198.51.100.2', B = '198.51.100.3', C = '198.51.100.4';

test('consensus: one lb partitioned from one backend -> every node computes the same (empty) down set', (t) => {
  const all: NodeObservations[] = [
    nodeObs('lb1', { web: { [A]: up(), [B]: down() } }), // lb1 cannot reach B
    nodeObs('lb2', { web: { [A]: up(), [B]: up() } }),
    nodeObs('lb3', { web: { [A]: up(), [B]: up() } }),
  ];
  const results = all.map((self) => consensusHealth(self, all.filter((o) => o !== self), LBS, NOW, 30_000));
  for (const r of results) {
    t.deepEqual(r.down, {});
    t.deepEqual(r.voters, LBS);
    t.is(r.quorum, 2);
  }
});

test('consensus: backend really dead -> every node computes the same down set', (t) => {
  const all: NodeObservations[] = [
    nodeObs('lb1', { web: { [A]: up(), [B]: down() }, api: { [C]: down() } }),
    nodeObs('lb2', { web: { [A]: up(), [B]: down() }, api: { [C]: up() } }),
    nodeObs('lb3', { web: { [A]: up() } }), // lb3 has no opinion on B yet: absence is not "down"
  ];
  const results = all.map((self) => consensusHealth(self, all.filter((o) => o !== self), LBS, NOW, 30_000));
  for (const r of results) t.deepEqual(r.down, { web: [B] });
});

const consensusTable: { name: string; local: NodeObservations; peers: NodeObservations[]; lbs: string[]; down: Record<string, string[]>; voters: string[]; stale: string[]; quorum: number }[] = [
  {
    name: 'alone: local observation decides',
    local: nodeObs('lb1', { web: { [A]: down() } }, 0), peers: [], lbs: ['lb1'],
    down: { web: [A] }, voters: ['lb1'], stale: [], quorum: 1,
  },
  {
    name: 'two nodes: one down report is not a majority',
    local: nodeObs('lb1', { web: { [A]: down() } }), peers: [nodeObs('lb2', { web: { [A]: up() } })], lbs: ['lb1', 'lb2'],
    down: {}, voters: ['lb1', 'lb2'], stale: [], quorum: 2,
  },
  {
    name: 'stale peers do not vote; the fresh majority decides',
    local: nodeObs('lb1', { web: { [A]: down() } }),
    peers: [nodeObs('lb2', { web: { [A]: up() } }, 31_000), nodeObs('lb3', { web: { [A]: down() } }, 29_000)],
    lbs: LBS, down: { web: [A] }, voters: ['lb1', 'lb3'], stale: ['lb2'], quorum: 2,
  },
  {
    name: 'a silent (never published) lb node is stale',
    local: nodeObs('lb1', { web: { [A]: down() } }), peers: [], lbs: ['lb1', 'lb2'],
    down: { web: [A] }, voters: ['lb1'], stale: ['lb2'], quorum: 1,
  },
  {
    name: 'local copy always counts, even when its own publication is old',
    local: nodeObs('lb1', { web: { [A]: down() } }, 999_000), peers: [nodeObs('lb2', { web: { [A]: down() } })], lbs: ['lb1', 'lb2'],
    down: { web: [A] }, voters: ['lb1', 'lb2'], stale: [], quorum: 2,
  },
  {
    name: 'non-lb publishers and a peer copy of the local node are ignored',
    local: nodeObs('lb1', { web: { [A]: up() } }),
    peers: [nodeObs('be1', { web: { [A]: down() } }), nodeObs('lb1', { web: { [A]: down() } }), nodeObs('lb2', { web: { [A]: down() } })],
    lbs: ['lb1', 'lb2'], down: {}, voters: ['lb1', 'lb2'], stale: [], quorum: 2,
  },
  {
    name: 'duplicate status of one peer: the newer copy wins',
    local: nodeObs('lb1', { web: { [A]: down() } }),
    peers: [nodeObs('lb2', { web: { [A]: down() } }, 20_000), nodeObs('lb2', { web: { [A]: up() } }, 2_000)],
    lbs: ['lb1', 'lb2'], down: {}, voters: ['lb1', 'lb2'], stale: [], quorum: 2,
  },
  {
    name: 'unparseable publishedAt is stale',
    local: nodeObs('lb1', { web: { [A]: up() } }),
    peers: [{ node: 'lb2', publishedAt: 'yesterday', observations: { web: { [A]: down() } } }],
    lbs: ['lb1', 'lb2'], down: {}, voters: ['lb1'], stale: ['lb2'], quorum: 1,
  },
  {
    name: 'down sets are sorted and per service',
    local: nodeObs('lb1', { web: { [C]: down(), [A]: down(), [B]: up() }, api: { [B]: down() } }), peers: [], lbs: ['lb1'],
    down: { api: [B], web: [A, C] }, voters: ['lb1'], stale: [], quorum: 1,
  },
];
for (const row of consensusTable) {
  test(`consensus: ${row.name}`, (t) => {
    const r = consensusHealth(row.local, row.peers, row.lbs, NOW, 30_000);
    t.deepEqual(r, { down: row.down, voters: row.voters, stale: row.stale, quorum: row.quorum });
    t.deepEqual(Object.keys(r.down), Object.keys(row.down)); // key order too: status YAML must be byte-stable
  });
}

test('consensus: rejects a nonsensical staleness bound', (t) => {
  t.throws(() => consensusHealth(nodeObs('lb1', {}), [], ['lb1'], NOW, 0), { instanceOf: RangeError });
});

/** The digest of the Maglev table a node would render for `web` with this health: what ECMP agreement needs. */
function webDigest(m: ReturnType<typeof model>, isHealthy: (s: string, a: string) => boolean): string {
  const svc = m.services.find((s) => s.metadata.name === 'web')!;
  const backends = svc.spec.reals
    .filter((r) => r.state === 'active' && isHealthy('web', r.address))
    .map((r, i) => ({ id: maglevBackendId(r.address, 80, 'TCP'), weight: r.weight, realId: i + 1 }));
  const ring = buildMaglevTable(backends, 251, 0);
  return createHash('sha256').update(Buffer.from(ring.buffer, ring.byteOffset, ring.byteLength)).digest('hex');
}

test('agreement: partition of lb1 from one backend -> consensus digests equal on all nodes, local ones do not', (t) => {
  const published: Record<string, Observations> = {
    lb1: { web: { [A]: up(), [B]: down(), [C]: up() } },
    lb2: { web: { [A]: up(), [B]: up(), [C]: up() } },
    lb3: { web: { [A]: up(), [B]: up(), [C]: up() } },
  };
  const digests = (mode: 'local' | 'consensus') => LBS.map((node) => {
    const m = model([service('web', { type: 'tcp' }, [A, B, C])], LBS, { mode, staleAfterMs: 30_000 });
    const peers = LBS.filter((n) => n !== node).map((n) => nodeObs(n, published[n]!));
    const d = decideHealth({ model: m, node, local: published[node]!, peers, now: NOW });
    t.is(d.mode, mode);
    return webDigest(m, d.view.isHealthy);
  });
  const consensus = digests('consensus');
  t.is(new Set(consensus).size, 1, 'consensus digests differ');
  const local = digests('local');
  t.is(new Set(local).size, 2, 'local mode should disagree on lb1 (that is what consensus is for)');
  t.is(local[1], consensus[0]);
});

// ---- fail modes -----------------------------------------------------------------------------------------------

test('fail modes: open keeps every real when all active ones are down, closed excludes them, partial down excludes', (t) => {
  const m = model([
    service('open', { type: 'tcp' }, [A, B]),
    service('closed', { type: 'tcp', failMode: 'closed' }, [A, B]),
    service('partial', { type: 'tcp', failMode: 'closed' }, [A, B]),
    service('drained', { type: 'tcp' }, [A, { address: B, state: 'drain' }]),
    service('unchecked', { type: 'none' }, [A]),
  ]);
  const r = resolveHealth(m, { open: [A, B], closed: [A, B], partial: [A], drained: [A], unchecked: [A] });
  t.deepEqual(r.failOpen, ['drained', 'open']); // drained: the only active real is down; B is draining anyway
  t.deepEqual(r.failClosed, ['closed']);
  t.deepEqual(r.excluded, { closed: [A, B], partial: [A] });
  t.true(r.view.isHealthy('open', A));
  t.false(r.view.isHealthy('closed', B));
  t.false(r.view.isHealthy('partial', A));
  t.true(r.view.isHealthy('partial', B));
  t.true(r.view.isHealthy('unchecked', A));
  t.true(r.view.isHealthy('no-such-service', A));
});

test('localDownSet keeps only down reals, sorted', (t) => {
  t.deepEqual(localDownSet({ web: { [C]: down(), [A]: up(), [B]: down() }, api: { [A]: up() } }), { web: [B, C] });
});

// ---- health gate ----------------------------------------------------------------------------------------------

// [entries, healthy] per real; table size = the sum of entries unless given as the last element.
const st = (services: Record<string, [number, boolean][]>, tableSize?: number): GateState => ({
  services: Object.entries(services).map(([name, reals]) => ({
    name,
    tableSize: tableSize ?? reals.reduce((n, [e]) => n + e, 0),
    reals: reals.map(([entries, healthy], i) => ({ address: `198.51.100.${i + 2}`, entries, healthy })),
  })),
});

const gateTable: { name: string; before: GateState; after: GateState; max: number; pass: boolean; reason: RegExp }[] = [
  { name: 'no change passes', before: st({ web: [[50, true], [51, true]] }), after: st({ web: [[50, true], [51, true]] }), max: 0, pass: true, reason: /no service lost/ },
  { name: 'a table that moves no entry passes even at a zero limit (weights scaled alike)', before: st({ web: [[34, true], [33, true], [34, false]] }), after: st({ web: [[34, true], [33, true], [34, false]] }), max: 0, pass: true, reason: /no service lost/ },
  { name: 'losing half fails a 25% limit', before: st({ web: [[50, true], [50, true]] }), after: st({ web: [[50, true], [50, false]] }), max: 0.25, pass: false, reason: /^web lost 50\.0% of its healthy table share \(100\.0% -> 50\.0% of entries on healthy reals\); limit 25\.0%$/ },
  { name: 'entries count, not reals', before: st({ web: [[75, true], [25, true]] }), after: st({ web: [[75, true], [25, false]] }), max: 0.25, pass: true, reason: /largest loss web 25\.0% within limit 25\.0%/ },
  { name: 'moving entries onto healthy reals passes (a drain)', before: st({ web: [[50, true], [50, true]] }), after: st({ web: [[100, true], [0, true]] }), max: 0, pass: true, reason: /no service lost/ },
  { name: 'moving entries onto a down real fails', before: st({ web: [[50, true], [50, false]] }), after: st({ web: [[10, true], [90, false]] }), max: 0.5, pass: false, reason: /web lost 80\.0%/ },
  { name: 'a removed service is not judged', before: st({ web: [[10, true]], old: [[10, true]] }), after: st({ web: [[10, true]] }), max: 0, pass: true, reason: /no service lost/ },
  { name: 'a service with no healthy share before cannot lose any', before: st({ web: [[10, false]] }), after: st({ web: [[10, false]] }), max: 0, pass: true, reason: /no service lost/ },
  { name: 'several failures are all named', before: st({ a: [[10, true]], b: [[10, true]] }), after: st({ a: [[10, false]], b: [[10, false]] }), max: 0.5, pass: false, reason: /^a lost 100\.0%.*; b lost 100\.0%/ },
];
for (const row of gateTable) {
  test(`health gate: ${row.name}`, (t) => {
    const r = healthGate(row.before, row.after, row.max);
    t.is(r.pass, row.pass, r.reason);
    t.regex(r.reason, row.reason);
  });
}

test('health gate: rejects a share outside [0, 1]', (t) => {
  t.throws(() => healthGate(st({}), st({}), 1.5), { instanceOf: RangeError });
});

// ---- targets ---------------------------------------------------------------------------------------------------

test('targets: one per non-disabled real of a checked service; port falls back to the first target port', (t) => {
  const web = service('web', { type: 'http', path: '/healthz' }, [A, { address: B, state: 'drain' }, { address: C, state: 'disabled' }], 443);
  web.spec.ports = [{ port: 443, protocol: 'TCP', targetPort: 8443 }];
  const targets = checkTargets(model([web, service('db', { type: 'tcp', port: 5432 }, [A]), service('dns', { type: 'none' }, [A])]));
  t.deepEqual(targets.map((x) => [x.service, x.address, x.probe.type, x.probe.port]), [
    ['db', A, 'tcp', 5432],
    ['web', A, 'http', 8443],
    ['web', B, 'http', 8443],
  ]);
  const http = targets[1]!.probe;
  t.deepEqual(http.type === 'http' && [http.path, http.expectStatus], ['/healthz', { min: 200, max: 399 }]);
});

test('targets: via: vip probes connect to the real, carrying the VIP and the service encap; without a probe path they fail', async (t) => {
  const svc = service('web', { type: 'tcp', port: 80, via: 'vip' }, [A]);
  svc.spec.dispatch = { mode: 'dsr', encap: 'ipip' };
  const [target] = checkTargets(model([svc]));
  t.deepEqual(target!.probe, { type: 'tcp', address: A, port: 80, timeoutMs: 150, via: { vip: svc.spec.vip, encap: 'ipip' } });
  t.is(describeProbe(target!.probe), `tcp ${svc.spec.vip}:80 via ipip to ${A}`);
  // a checker with no VipProbeRouter must not probe the real directly (that would be via: real): it fails, saying why
  const checker = new HealthChecker();
  const changes: string[] = [];
  checker.onChange((e) => changes.push(`${e.to} ${e.result.detail}`));
  checker.update(model([{ ...svc, spec: { ...svc.spec, healthCheck: { ...svc.spec.healthCheck, intervalMs: 100, fall: 1 } } }]));
  checker.start();
  for (let i = 0; i < 100 && changes.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
  await checker.stop();
  t.deepEqual(changes, ['down no VIP probe path on this node']);
});

// ---- status round trip -----------------------------------------------------------------------------------------

test('status: what a node publishes, a peer reads back through YAML; malformed status is an error, not a throw', async (t) => {
  const { healthStatus, peerObservations } = await import('../../src/reconciler/health/index.js');
  const YAML = (await import('yaml')).default;
  const observations: Observations = { web: { [A]: up(), [B]: down() } };
  const snapshot = { services: { web: { reals: {} } }, stats: { targets: 2, inFlight: 0, maxInFlight: 64, peakInFlight: 1, checks: 9 } };
  const written = YAML.stringify({ node: 'lb2', health: healthStatus({ now: NOW, mode: 'consensus', observations, snapshot, failOpen: [], failClosed: [] }) });
  const read = peerObservations('lb2', YAML.parse(written));
  // Only the down vote is published: the consensus counts down votes alone, so the peers' down set is the same.
  t.deepEqual(read, { obs: { node: 'lb2', publishedAt: new Date(NOW).toISOString(), observations: { web: { [B]: observations.web![B]! } } } });
  const peers = (obs: Observations) => consensusHealth({ node: 'lb1', publishedAt: ago(0), observations: {} }, [{ node: 'lb2', publishedAt: ago(0), observations: obs }],
    ['lb1', 'lb2'], NOW, 60_000).down;
  t.deepEqual(peers('obs' in read ? read.obs.observations : {}), peers(observations));

  const bad: [unknown, RegExp][] = [
    [null, /no 'health' mapping/],
    [{ health: { observations: {} } }, /publishedAt is not an ISO time/],
    [{ health: { publishedAt: ago(0), observations: [] } }, /observations is not a mapping/],
    [{ health: { publishedAt: ago(0), observations: { web: { [A]: { up: 'yes', since: ago(0) } } } } }, /web\.198\.51\.100\.2 needs up: bool/],
  ];
  for (const [doc, err] of bad) {
    const r = peerObservations('lb2', doc);
    t.true('error' in r && err.test(r.error), JSON.stringify(r));
  }
});

test('status text: per real state, since, last check; fail-open is loud', async (t) => {
  const { formatHealthStatus } = await import('../../src/reconciler/health/index.js');
  const text = formatHealthStatus('lb1', {
    publishedAt: ago(0), mode: 'local', observations: {}, failOpen: ['api'], failClosed: [], omittedReals: 3,
    services: {
      web: { counts: { total: 5, up: 1, down: 4, unknown: 0 }, reals: {
        [B]: { state: 'down', since: ago(125_000), check: `tcp ${B}:80`, lastCheck: { ok: false, detail: 'ECONNREFUSED', at: ago(1_000), durationMs: 0.4 } },
      } },
      api: { failOpen: true, counts: { total: 1, up: 0, down: 0, unknown: 1 }, reals: { [C]: { state: 'unknown', since: ago(2_000), check: `tcp ${C}:80` } } },
    },
  }, NOW);
  t.is(text, [
    `health on lb1 (mode local, published ${ago(0)})`,
    `6 reals checked in 2 services: 1 up, 4 down, 1 unknown`,
    `SERVICE  REAL          STATE    SINCE                                 LAST CHECK`,
    `api      ${C}  unknown  ${ago(2_000)} (2s ago)     not checked yet`,
    `web      ${B}  down     ${ago(125_000)} (2m05s ago)  FAIL ECONNREFUSED (0.4 ms, 1s ago)`,
    `... and 3 more reals not up, not listed (the status caps the list)`,
    `WARNING: api: every active real is down; failing OPEN (all kept in the table)`,
    '',
  ].join('\n'));
});

// ---- config fields ---------------------------------------------------------------------------------------------

test('config: healthCheck.failMode / expectStatus and Cluster spec.health reach the model; bad values are schema errors', async (t) => {
  const { parseConfig } = await import('../../src/render/config/index.js');
  const enc = (s: string) => new TextEncoder().encode(s);
  const cluster = (health: string) => ({ path: 'cluster.yaml', content: enc(`apiVersion: gitlb/v1\nkind: Cluster\nmetadata: { name: c }\nspec:\n  maglev: { tableSize: 1021, seed: JLfvgnHc2kaSUFaI }\n${health}`) });
  const node = { path: 'nodes/lb-1.yaml', content: enc(`apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: lb-1 }\nspec:\n  role: lb\n  interface: eth0\n  allowedVips: [203.0.113.0/24]\n`) };
  const svc = (hc: string) => ({ path: 'services/web.yaml', content: enc(`apiVersion: gitlb/v1\nkind: Service\nmetadata: { name: web }\nspec:\n  vip: 203.0.113.10\n  ports: [{ port: 80, protocol: TCP }]\n  dispatch: { mode: dsr, encap: l2 }\n  healthCheck: { type: http, ${hc} }\n  reals: [{ address: 198.51.100.21 }]\n`) });

  const ok = parseConfig([cluster('  health: { mode: consensus, staleAfter: 30s }\n'), node, svc('failMode: closed, expectStatus: { min: 200, max: 204 }')]);
  t.deepEqual(ok.diagnostics.filter((d) => d.severity === 'error'), []);
  t.deepEqual(ok.model!.cluster.spec.health, { mode: 'consensus', staleAfterMs: 30_000 });
  const hc = ok.model!.services[0]!.spec.healthCheck;
  t.is(hc.failMode, 'closed');
  t.deepEqual(hc.expectStatus, { min: 200, max: 204 });

  const plain = parseConfig([cluster(''), node, svc('path: /')]);
  t.is(plain.model!.cluster.spec.health, undefined); // absent means local, fail-open, 200-399
  t.is(plain.model!.services[0]!.spec.healthCheck.failMode, undefined);

  const bad = parseConfig([cluster('  health: { mode: quorum }\n'), node, svc('failMode: maybe, expectStatus: { min: 99, max: 200 }')]);
  t.is(bad.model, null);
  const errors = bad.diagnostics.filter((d) => d.severity === 'error').map((d) => `${d.file}: ${d.message}`).join('\n');
  t.regex(errors, /cluster\.yaml: .*mode/);
  t.regex(errors, /services\/web\.yaml: .*failMode/);
  t.regex(errors, /services\/web\.yaml: .*min/);
});
