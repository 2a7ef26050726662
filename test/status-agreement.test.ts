// `gitlb status` agreement: only lb nodes' Maglev digests must agree; backends are listed without a verdict.
import test from 'ava';
import { lbDigestsAgree } from '../src/reconciler/status/status-report.js';
import { assessStatus, formatStatusVerdict } from '../src/reconciler/status/assess.js';
import type { NodeStatus } from '../src/reconciler/status/status-doc.js';

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
