// `gitlb status` agreement: only lb nodes' Maglev digests must agree; backends are listed without a verdict.
import test from 'ava';
import { formatStatusTable, lbDigestsAgree, statusRows } from '../src/reconciler/status/status-report.js';
import type { NodeStatus } from '../src/reconciler/status/status-doc.js';

const node = (name: string, role: 'lb' | 'backend', digest: string): NodeStatus =>
  ({ node: name, role, appliedRevision: 'a'.repeat(40), services: [{ name: 'web', digest }] }) as unknown as NodeStatus;

test('a backend with another digest does not make the lb nodes disagree', (t) => {
  const statuses = [node('lb-1', 'lb', 'd1'), node('lb-2', 'lb', 'd1'), node('be-1', 'backend', 'other')];
  t.true(lbDigestsAgree(statuses));
  t.deepEqual(statusRows(statuses).map((r) => [r.node, r.digests]), [['lb-1', 'agree'], ['lb-2', 'agree'], ['be-1', '-']]);
  t.regex(formatStatusTable(statuses), /3 node\(s\); table digests agree across nodes/);
});

test('two lb nodes with different digests of one service differ', (t) => {
  const statuses = [node('lb-1', 'lb', 'd1'), node('lb-2', 'lb', 'd2')];
  t.false(lbDigestsAgree(statuses));
  t.deepEqual(statusRows(statuses).map((r) => r.digests), ['differ', 'differ']);
  t.regex(formatStatusTable(statuses), /table digests DIFFER across nodes/);
});
