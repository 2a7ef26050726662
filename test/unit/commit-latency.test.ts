// gitlb_commit_to_applied_seconds counts from the commit's time only for a commit newer than the one applied before
// it; a rewind (force-push rollback, reset to an older commit) counts from when the node first fetched it.
import test from 'ava';
import { commitLatencyStart } from '../../src/reconciler/metrics/control.js';

const seenAtMs = 1_800_000_000_000;

test('a new commit counts from its committer time (push and poll included)', (t) => {
  t.is(commitLatencyStart({ commitTime: 1_799_999_990, previousCommitTime: 1_799_999_000, seenAtMs }), 1_799_999_990);
  t.is(commitLatencyStart({ commitTime: 1_799_999_990, previousCommitTime: null, seenAtMs }), 1_799_999_990, 'first apply of the process');
});

test('a rewind to an older commit counts from when the node first saw it at the tip, not from 430 s ago', (t) => {
  const old = seenAtMs / 1000 - 430;
  t.is(commitLatencyStart({ commitTime: old, previousCommitTime: old + 300, seenAtMs }), seenAtMs / 1000);
  t.is(commitLatencyStart({ commitTime: old, previousCommitTime: old, seenAtMs }), seenAtMs / 1000, 'the same commit time is no newer');
});
