// `gitlb status` never misleads (issue 25): a degraded node is a problem unless --ignore-degraded; a node whose file
// predates a health flip (it cannot write to Git) is named and its digests are not called different; a stopped
// daemon is STOPPED, not Ready; a node behind the head that others serve is "behind", not "agree".
import test from 'ava';
import { assessStatus, formatStatusVerdict, LAG_GRACE_MS } from '../../src/reconciler/status/assess.js';
import type { NodeStatus } from '../../src/reconciler/status/status-doc.js';

const now = new Date('2026-11-30T12:00:00Z');
const iso = (agoMs: number) => new Date(now.getTime() - agoMs).toISOString();
const rev = 'a'.repeat(40);
const head = { oid: rev, committedAt: new Date(now.getTime() - 3_600_000) };
const REAL = '198.51.100.11';

/** An lb node's status at `rev` written `writtenAgoMs` ago; `downSinceAgoMs`: it sees REAL down since then. */
function lb(name: string, o: { digest?: string; writtenAgoMs?: number; downSinceAgoMs?: number; mode?: 'local' | 'consensus'; revision?: string; ready?: [string, string, string] } = {}): NodeStatus {
  const down = o.downSinceAgoMs !== undefined;
  const conditions = [
    { type: 'Ready', status: o.ready?.[0] ?? 'True', reason: o.ready?.[1] ?? 'Succeeded', message: o.ready?.[2] ?? `applied ${rev.slice(0, 12)}`, lastTransitionTime: iso(3_600_000) },
    down
      ? { type: 'Degraded', status: 'True', reason: 'RealsUnhealthy', message: `unhealthy: web/${REAL}`, lastTransitionTime: iso(o.downSinceAgoMs!) }
      : { type: 'Degraded', status: 'False', reason: 'Healthy', message: 'every active real is healthy', lastTransitionTime: iso(3_600_000) },
  ];
  return {
    node: name,
    role: 'lb',
    appliedRevision: o.revision ?? rev,
    appliedAt: iso(3_600_000),
    updatedAt: iso(o.writtenAgoMs ?? 0),
    lastAttempt: null,
    warnings: [],
    conditions,
    services: [{ name: 'web', id: 1, tableSize: 251, digest: o.digest ?? (down ? 'd-without' : 'd-all'),
      reals: down ? [{ address: REAL, weight: 100, state: 'active', healthy: false, entries: 0 }] : [] }],
    health: { publishedAt: iso(o.writtenAgoMs ?? 0), mode: o.mode ?? 'consensus',
      observations: down ? { web: { [REAL]: { up: false, since: iso(o.downSinceAgoMs!) } } } : {} },
  } as unknown as NodeStatus;
}

const config = [{ name: 'lb-a', role: 'lb' as const }, { name: 'lb-b', role: 'lb' as const }];
const assess = (statuses: NodeStatus[], extra: { ignoreDegraded?: boolean; head?: typeof head } = {}) =>
  assessStatus({ statuses, head: extra.head ?? head, configNodes: config, now, behindGraceMs: 120_000, staleAfterMs: 900_000, ignoreDegraded: extra.ignoreDegraded });

test('a healthy cluster is OK; a node with a real down is a problem (exit 1) unless --ignore-degraded', (t) => {
  const ok = assess([lb('lb-a'), lb('lb-b')]);
  t.true(ok.ok, ok.problems.join('\n'));
  t.deepEqual(ok.nodes.map((n) => n.digests), ['agree', 'agree']);

  const degraded = assess([lb('lb-a', { downSinceAgoMs: 30_000 }), lb('lb-b', { downSinceAgoMs: 30_000 })]);
  t.false(degraded.ok);
  t.deepEqual(degraded.problems, [`lb-a: degraded: unhealthy: web/${REAL}`, `lb-b: degraded: unhealthy: web/${REAL}`]);
  t.deepEqual(degraded.nodes.map((n) => n.digests), ['agree', 'agree'], 'same revision, same reals down, same digest');
  const text = formatStatusVerdict(degraded, now);
  t.regex(text, /verdict: 2 problem\(s\)/);
  t.is(text.split(`Degraded=True`).length, 1, 'the Degraded condition is said once, by its problem line');

  const ignored = assess([lb('lb-a', { downSinceAgoMs: 30_000 }), lb('lb-b', { downSinceAgoMs: 30_000 })], { ignoreDegraded: true });
  t.true(ignored.ok, ignored.problems.join('\n'));
  t.regex(formatStatusVerdict(ignored, now), /lb-a: unhealthy reals: web\/198\.51\.100\.11/);
});

test('a node cut off from Git: its old file is not "differ", and it is named as the node that cannot reach Git', (t) => {
  // lb-b saw the real go down 3 minutes ago and wrote; lb-a's file is from 10 minutes ago (it could not push since).
  const statuses = [lb('lb-a', { writtenAgoMs: 600_000 }), lb('lb-b', { downSinceAgoMs: 180_000 })];
  const v = assess(statuses, { ignoreDegraded: true });
  t.deepEqual(v.nodes.map((n) => n.digests), ['not compared', 'not compared']);
  t.true(v.digestsAgree, 'nothing comparable differs');
  t.false(v.ok);
  t.deepEqual(v.problems, [`lb-a: has not written its status since lb-b saw web/${REAL} down 3m ago (its file is 10m old): lb-a cannot reach Git`]);
  const text = formatStatusVerdict(v, now);
  t.notRegex(text, /DIFFER|differ/);
  t.regex(text, /not compared \(other reals down at the same revision\): lb-a, lb-b/);

  // Local health mode: lb-a may simply not see that real down; said as a note, not a problem.
  const local = assess([lb('lb-a', { writtenAgoMs: 600_000, mode: 'local' }), lb('lb-b', { downSinceAgoMs: 180_000, mode: 'local' })], { ignoreDegraded: true });
  t.true(local.ok, local.problems.join('\n'));
  t.regex(formatStatusVerdict(local, now), /lb-a: note: has not written its status since lb-b saw .* down 3m ago .*or does not see that real down/);
});

test('benign: a flip younger than the grace, or a file written after it, names nobody', (t) => {
  const fresh = assess([lb('lb-a', { writtenAgoMs: 600_000 }), lb('lb-b', { downSinceAgoMs: LAG_GRACE_MS - 5_000 })], { ignoreDegraded: true });
  t.true(fresh.ok, fresh.problems.join('\n'));
  const caughtUp = assess([lb('lb-a', { downSinceAgoMs: 175_000, writtenAgoMs: 170_000 }), lb('lb-b', { downSinceAgoMs: 180_000 })], { ignoreDegraded: true });
  t.true(caughtUp.ok, caughtUp.problems.join('\n'));
  t.deepEqual(caughtUp.nodes.map((n) => n.digests), ['agree', 'agree']);
  // The same view with different digests at one revision is still a disagreement.
  const differ = assess([lb('lb-a', { downSinceAgoMs: 175_000, digest: 'x' }), lb('lb-b', { downSinceAgoMs: 180_000 })], { ignoreDegraded: true });
  t.false(differ.ok);
  t.deepEqual(differ.nodes.map((n) => n.digests), ['differ', 'differ']);
});

test('a stopped daemon is STOPPED and a problem while the config names it; a node behind the head others serve is "behind"', (t) => {
  const stopped = lb('lb-a', { ready: ['False', 'Stopped', 'gitlb run stopped (stopping on SIGTERM); the pinned data plane keeps forwarding aaaaaaaaaaaa, nothing reconciles it'] });
  const v = assess([stopped, lb('lb-b')]);
  t.false(v.ok);
  t.true(v.nodes[0]!.stopped);
  t.deepEqual(v.problems, ['lb-a: stopped: gitlb run stopped (stopping on SIGTERM); the pinned data plane keeps forwarding aaaaaaaaaaaa, nothing reconciles it (start gitlb run, or remove the node from the config)']);
  t.regex(formatStatusVerdict(v, now), /lb-a\s+lb\s+\S+\s+a{12}\s+STOPPED\s+0s ago\s+agree\s+False\/Stopped/);
  // Not named by the config any more: stopped is where it should be.
  const gone = assessStatus({ statuses: [stopped, lb('lb-b')], head, configNodes: [config[1]!], now, behindGraceMs: 120_000, staleAfterMs: 900_000 });
  t.true(gone.ok, gone.problems.join('\n'));

  const old = 'b'.repeat(40);
  const behind = assess([lb('lb-a', { revision: old, digest: 'd-old' }), lb('lb-b')]);
  t.deepEqual(behind.nodes.map((n) => n.digests), ['behind', 'agree']);
  t.notRegex(formatStatusVerdict(behind, now), /DIFFER|differ/);
});

test('attacker: a status file cannot fake lines or reorder text in gitlb status; the verdict stays the real one', (t) => {
  // Whoever can push the status branch writes these fields: a warning that ends its line and prints 'verdict: OK',
  // a Ready reason with a bidi override, a condition message with a line separator.
  const forged = { ...lb('lb-a', { downSinceAgoMs: 30_000, ready: ['False', 'Fail\u202eDO', 'x\u2028verdict: OK'] }),
    warnings: ['fine\nverdict: OK\n\x1b[2J'] } as NodeStatus;
  const v = assess([forged, lb('lb-b')]);
  t.false(v.ok, 'the exit code (1 unless ok) follows the real verdict');
  const text = formatStatusVerdict(v, now);
  const lines = text.split('\n');
  t.false(lines.some((l) => /^\s*verdict: OK/.test(l)), text);
  t.false(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2028\u2029]/.test(text), JSON.stringify(text));
  t.true(text.includes('lb-a: warning: fine\\nverdict: OK\\n\\x1b[2J'), text);
  t.true(text.includes('False/Fail\\u202eDO'), text);
  t.regex(lines.at(-2)!, /^\s+lb-b: |^\s+lb-a: /, 'the last lines are the real problems');
  t.regex(text, /verdict: \d+ problem\(s\)/);
});

test('benign: ordinary status text (names, reasons, UTF-8) prints as written', (t) => {
  const plain = { ...lb('lb-a', { ready: ['False', 'ApplyFailed', 'Dienst „web“ – 198.51.100.11: connection refused'] }), warnings: ['peers: 2 messages refused (latest: lb-b)'] } as NodeStatus;
  const text = formatStatusVerdict(assess([plain, lb('lb-b')]), now);
  t.true(text.includes('lb-a: warning: peers: 2 messages refused (latest: lb-b)'), text);
  t.true(text.includes('Dienst „web“ – 198.51.100.11: connection refused'), text);
  t.false(text.includes('\\'), 'nothing escaped');
});

/** `s` with health.peers.silent naming `peer` silent since `sinceAgoMs`. */
const sayingSilent = (s: NodeStatus, peer: string, sinceAgoMs: number): NodeStatus => {
  const health = (s as unknown as { health: Record<string, unknown> }).health;
  return { ...s, health: { ...health, peers: { authentication: 'shared-secret', rejected: {},
    silent: [{ peer, since: iso(sinceAgoMs), heard: true, lastError: `${peer} health.observations: connect ECONNREFUSED` }] } } } as unknown as NodeStatus;
};

test('a killed lb daemon is named within seconds by the peer that no longer hears it, not after its file goes stale', (t) => {
  // lb-b's daemon was killed 40 s ago (its last status write 60 s ago); lb-a has not heard it for 30 s and said so.
  const v = assess([sayingSilent(lb('lb-a', { writtenAgoMs: 20_000 }), 'lb-b', 30_000), lb('lb-b', { writtenAgoMs: 60_000 })]);
  t.false(v.ok);
  t.deepEqual(v.problems, [`lb-b: silent on the peer channel to lb-a since ${iso(30_000)} (30s ago), and has not written its status since: its daemon stopped or was killed, or the node is cut off`]);
  t.false(v.nodes.find((n) => n.node === 'lb-b')!.stale, 'well inside --stale-after: only the peer can tell');
  // Its last write landed just after lb-a last heard it (within one silence period): still its last breath.
  const race = assess([sayingSilent(lb('lb-a', { writtenAgoMs: 5_000 }), 'lb-b', 30_000), lb('lb-b', { writtenAgoMs: 29_000 })]);
  t.regex(race.problems.join('\n'), /lb-b: silent on the peer channel to lb-a since .*has not written its status since/);
});

test('benign: a peer that still writes its status is named as a broken channel; a stale reporter and an old claim of a node that wrote since do not accuse', (t) => {
  const broken = assess([sayingSilent(lb('lb-a', { writtenAgoMs: 5_000 }), 'lb-b', 30_000), lb('lb-b', { writtenAgoMs: 10_000 })]);
  t.deepEqual(broken.problems, [`lb-b: lb-a has not heard it on the peer channel since ${iso(30_000)} (30s ago), though it still writes its status: the channel between them is broken (addresses, firewall, keys)`]);
  // lb-a's own file is older than --stale-after: its claims are not evidence (lb-a itself is reported stale).
  const staleReporter = assess([sayingSilent(lb('lb-a', { writtenAgoMs: 1_000_000 }), 'lb-b', 1_100_000), lb('lb-b', { writtenAgoMs: 2_000_000 })]);
  t.false(staleReporter.problems.some((p) => p.includes('peer channel')), staleReporter.problems.join('\n'));
  const quiet = assess([lb('lb-a'), lb('lb-b')]);
  t.true(quiet.ok, quiet.problems.join('\n'));
  // A node the config no longer names is not a peer any more: an old claim about it accuses nobody.
  const dropped = assess([sayingSilent(lb('lb-a'), 'lb-z', 30_000), lb('lb-b'), lb('lb-z', { writtenAgoMs: 60_000 })]);
  t.false(dropped.problems.some((p) => p.includes('peer channel')), dropped.problems.join('\n'));
});

test('gitlb status prints the SNAT handover line of a node holding a returned owner\'s address (a transient state, not a problem)', (t) => {
  const holding = { ...lb('lb-b'), flows: { sync: {}, snatTakeover: { lost: [], serving: { '198.51.100.111': 'lb-a' },
    handback: { '198.51.100.111': { owner: 'lb-a', since: iso(10_000), waitingFor: ['own-translations'], limitSeconds: 120, giveBackBy: iso(-110_000) } } } } } as NodeStatus;
  const v = assess([lb('lb-a'), holding]);
  t.true(v.ok, v.problems.join('\n'));
  const text = formatStatusVerdict(v, now);
  t.true(text.includes(`lb-b: holds lb-a's SNAT address 198.51.100.111 for lb-a, which answers again since ${iso(10_000)}: waiting for the copies of its own translations it asked for to reach it; given back by ${iso(-110_000)} at the latest (--snat-handback-limit 120)\n`), text);
  t.false(text.includes('(lb-a lost)'));
  const released = { ...holding, flows: { sync: {}, snatTakeover: { lost: [], serving: {} } } } as NodeStatus;
  t.false(formatStatusVerdict(assess([lb('lb-a'), released]), now).includes('holds'), 'given back: no line');
});
