// `gitlb status` agreement: only lb nodes' Maglev digests must agree; backends are listed without a verdict.
import test from 'ava';
import { lbDigestsAgree } from '../../src/reconciler/status/status-report.js';
import { assessStatus, formatStatusVerdict } from '../../src/reconciler/status/assess.js';
import type { NodeStatus } from '../../src/reconciler/status/status-doc.js';

const now = new Date('2026-11-30T12:00:00Z');
const node = (name: string, role: 'lb' | 'backend', digest: string): NodeStatus =>
  ({ node: name, role, appliedRevision: 'a'.repeat(40), updatedAt: now.toISOString(), services: [{ name: 'web', digest }] }) as unknown as NodeStatus;
const assess = (statuses: NodeStatus[]) =>
  assessStatus({ statuses, head: { oid: 'a'.repeat(40), committedAt: now }, configNodes: [], now, behindGraceMs: 60_000, staleAfterMs: 60_000 });

test('a backend with another digest does not make the lb nodes disagree', (t) => {
  const statuses = [node('lb-1', 'lb', 'd1'), node('lb-2', 'lb', 'd1'), node('be-1', 'backend', 'other')];
  t.true(lbDigestsAgree(statuses));
  const v = assess(statuses);
  t.deepEqual(v.nodes.map((r) => [r.node, r.digests]), [['be-1', '-'], ['lb-1', 'agree'], ['lb-2', 'agree']]);
  t.true(v.ok);
  t.regex(formatStatusVerdict(v, now), /3 node\(s\); head a{12} \(committed 0s ago\); table digests agree across nodes/);
});

test('two lb nodes with different digests of one service differ', (t) => {
  const statuses = [node('lb-1', 'lb', 'd1'), node('lb-2', 'lb', 'd2')];
  t.false(lbDigestsAgree(statuses));
  const v = assess(statuses);
  t.deepEqual(v.nodes.map((r) => r.digests), ['differ', 'differ']);
  t.false(v.ok);
  t.regex(formatStatusVerdict(v, now), /table digests DIFFER across nodes/);
});

// A rolling change: lb nodes at different revisions hold different tables, and that is not a disagreement.
const at = (name: string, rev: string, digest: string, appliedAgoMs: number): NodeStatus =>
  ({
    node: name,
    role: 'lb',
    appliedRevision: rev,
    appliedAt: new Date(now.getTime() - appliedAgoMs).toISOString(),
    updatedAt: now.toISOString(),
    services: [{ name: 'web', digest }],
  }) as unknown as NodeStatus;
const r1 = '0c94020'.padEnd(40, '1');
const r2 = '641288a'.padEnd(40, '2');
const head = { oid: 'f'.repeat(40), committedAt: new Date(now.getTime() - 89_000) };

test('lb nodes at different revisions inside the behind grace: digests are not compared, the verdict is OK', (t) => {
  const statuses = [at('lb-1', r1, 'd1', 200_000), at('lb-2', r2, 'd2', 60_000)];
  t.true(lbDigestsAgree(statuses));
  const v = assessStatus({ statuses, head, configNodes: [], now, behindGraceMs: 120_000, staleAfterMs: 60_000 });
  t.deepEqual(v.problems, []);
  t.true(v.ok);
  t.deepEqual(v.nodes.map((n) => [n.node, n.digests, n.behind]), [['lb-1', 'agree', true], ['lb-2', 'agree', true]]);
  t.deepEqual(v.revisionSkew, { revisions: [{ revision: r1, nodes: ['lb-1'] }, { revision: r2, nodes: ['lb-2'] }], forMs: 60_000, beyondGrace: false });
  t.regex(formatStatusVerdict(v, now), /table digests agree among lb nodes at the same revision; revision skew: lb-1 at 0c9402011111; lb-2 at 641288a22222 \(for 60s, within the grace\)/);
});

test('a digest disagreement at the same revision still fails while another node is at another revision', (t) => {
  const statuses = [at('lb-1', r1, 'd1', 10_000), at('lb-2', r1, 'dX', 10_000), at('lb-3', r2, 'd2', 10_000)];
  t.false(lbDigestsAgree(statuses));
  const v = assessStatus({ statuses, head, configNodes: [], now, behindGraceMs: 120_000, staleAfterMs: 60_000 });
  t.false(v.ok);
  t.deepEqual(v.nodes.map((n) => n.digests), ['differ', 'differ', 'agree']);
  t.deepEqual(v.problems, [
    "lb-1: table digests differ from another lb node's at the same revision (0c9402011111)",
    "lb-2: table digests differ from another lb node's at the same revision (0c9402011111)",
  ]);
  t.regex(formatStatusVerdict(v, now), /table digests DIFFER among lb nodes at the same revision/);
});

test('revision skew beyond the grace is a problem of its own when no node is reported behind (no config head)', (t) => {
  const statuses = [at('lb-1', r1, 'd1', 600_000), at('lb-2', r2, 'd2', 300_000)];
  const v = assessStatus({ statuses, head: null, configNodes: [], now, behindGraceMs: 120_000, staleAfterMs: 60_000 });
  t.false(v.ok);
  t.deepEqual(v.problems, ['lb nodes serve 2 revisions for 5m (beyond the 2m grace): lb-1 at 0c9402011111; lb-2 at 641288a22222']);
  // With a head, the node behind it past the grace names the same cause once.
  const w = assessStatus({ statuses, head: { oid: r2, committedAt: new Date(now.getTime() - 700_000) }, configNodes: [], now, behindGraceMs: 120_000, staleAfterMs: 60_000 });
  t.deepEqual(w.problems, ['lb-1: behind the branch for 12m (applied 0c9402011111, head 641288a22222)']);
});

test('no lb node has written a status: the summary says there is nothing to compare, not that digests agree', (t) => {
  const v = assessStatus({
    statuses: [node('be-1', 'backend', 'x')],
    head: { oid: 'a'.repeat(40), committedAt: now },
    configNodes: [{ name: 'lb-1', role: 'lb' }, { name: 'be-1', role: 'backend' }] as never,
    now,
    behindGraceMs: 60_000,
    staleAfterMs: 60_000,
  });
  const text = formatStatusVerdict(v, now);
  t.notRegex(text, /digests agree/);
  t.regex(text, /table digests: nothing to compare \(no lb node has written a status with tables\)/);
  t.regex(formatStatusVerdict(assess([node('lb-1', 'lb', 'd1')]), now), /table digests: nothing to compare \(only lb-1 reports tables\)/);
});

test('a node taken down while the config names it: its problem is printed once, as the count says', (t) => {
  const message = 'data plane removed by gitlb down (1 links detached)';
  const down = {
    node: 'lb-1',
    role: 'lb',
    appliedRevision: null,
    updatedAt: now.toISOString(),
    services: [],
    warnings: [`data plane removed by gitlb down at ${now.toISOString()}`],
    conditions: [{ type: 'Ready', status: 'False', reason: 'Decommissioned', message, lastTransitionTime: now.toISOString() }],
  } as unknown as NodeStatus;
  const v = assessStatus({ statuses: [down], head: { oid: 'a'.repeat(40), committedAt: now }, configNodes: [{ name: 'lb-1', role: 'lb' }] as never, now, behindGraceMs: 60_000, staleAfterMs: 60_000 });
  const text = formatStatusVerdict(v, now);
  t.regex(text, /verdict: 1 problem\(s\)/);
  t.is(text.split(message).length - 1, 1, text);
});

test('a peer channel warning in a node\'s health (consensus without authentication, refused peer messages) is printed', (t) => {
  const lb1 = { ...node('lb-1', 'lb', 'd1'), health: { peers: { authentication: 'shared-secret', rejected: { 'bad-mac': 4 },
    warning: '4 peer messages refused since start (latest: bad-mac answer of lb-2 at 2026-11-30T11:59:58.000Z)' } } } as unknown as NodeStatus;
  const v = assess([lb1, node('lb-2', 'lb', 'd1')]);
  t.deepEqual(v.nodes[0]!.warnings, ['peers: 4 peer messages refused since start (latest: bad-mac answer of lb-2 at 2026-11-30T11:59:58.000Z)']);
  t.regex(formatStatusVerdict(v, now), /lb-1: warning: peers: 4 peer messages refused since start/);
  t.deepEqual(assess([node('lb-1', 'lb', 'd1')]).nodes[0]!.warnings, [], 'no warning without one');
});
