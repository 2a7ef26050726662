// The subject line of a status commit that records a health flip (docs/reconciler.md, status branch): coalesced
// reasons are cut between parts, never mid-word, and the parts left out are counted.
import test from 'ava';
import { statusCommitMessage, subjectReason, type NodeStatus } from '../../src/reconciler/status/status-doc.js';

const rev = '8aaaa6a57e20b32e7c6966276d436dca477257be';
const attempt = { revision: rev, result: 'applied', at: '2026-12-01T17:11:36.866Z' } as NodeStatus['lastAttempt'];
const status = { node: 'lb-1', appliedRevision: rev, lastAttempt: attempt, services: [] } as unknown as NodeStatus;

test('a long coalesced health reason keeps whole parts and counts the rest', (t) => {
  // what the demo's lb-1 wrote at its first health checks: three writes coalesced, one with two events
  const why = 'web/198.51.100.23 unknown -> up; web/198.51.100.21 unknown -> up, web/198.51.100.22 unknown -> up; ' +
    'dns/198.51.100.22 unknown -> up';
  const subject = statusCommitMessage(status, why, status).split('\n')[0]!;
  t.is(subject, 'status(lb-1): web/198.51.100.23 unknown -> up (+3 more), serving 8aaaa6a57e20');
  t.true(statusCommitMessage(status, why, status).includes(`trigger: ${why}\n`), 'the body keeps the whole reason');
});

test('a short reason is the subject as it is; one long part is cut with an ellipsis', (t) => {
  t.is(subjectReason('web/198.51.100.23 up -> down'), 'web/198.51.100.23 up -> down');
  const exactly60 = 'x'.repeat(60);
  t.is(subjectReason(exactly60), exactly60);
  const long = 'drift repaired on a map whose name is long enough to be cut somewhere';
  t.is(subjectReason(long), `${long.slice(0, 57)}...`);
  t.true(subjectReason(long).length <= 60);
});

test('an attempt not recorded before is announced as such, whatever the reason', (t) => {
  t.is(statusCommitMessage(status, 'web/198.51.100.23 unknown -> up; x', null).split('\n')[0], 'status(lb-1): applied 8aaaa6a57e20');
});
