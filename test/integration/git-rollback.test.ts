// Automatic revert commits over real git http-backend: exactly one of several racing nodes pushes it; the
// revert is what `git revert` would make; reverts, old history and force-pushed history are left alone.
import test from 'ava';
import { rmSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { ancestry } from '../../src/reconciler/source/git-objects.js';
import { pushAutoRevert, isRevertMessage } from '../../src/reconciler/revert/rollback.js';
import { git, servedRepo, commitFiles, tempDir } from '../reconcile-helpers.js';

const execFileP = promisify(execFile);

test('five nodes race to revert a bad tip commit: exactly one revert is pushed, equal to git revert', async (t) => {
  const repo = await servedRepo();
  const caches: string[] = [];
  try {
    const good = await commitFiles(repo.work, { 'svc.yaml': 'good: 1\n' }, 'good config');
    const bad = await commitFiles(repo.work, { 'svc.yaml': 'bad: 1\n', 'extra.yaml': 'x: 1\n' }, 'break things');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const remotes = await Promise.all(
      Array.from({ length: 5 }, async (_, i) => {
        const c = await tempDir(`rb${i}`);
        caches.push(c);
        const r = new HttpRemote(repo.url, c);
        await r.fetch('main');
        return r;
      }),
    );
    const outcomes = await Promise.all(
      remotes.map((remote, i) =>
        pushAutoRevert({ remote, branch: 'main', bad, lastGood: good, reason: 'validate: svc.yaml:1:1: error: nope', node: `lb-${i}`, now: new Date() }),
      ),
    );
    t.is(outcomes.filter((o) => o.pushed).length, 1, JSON.stringify(outcomes));
    await git(repo.work, 'pull', '-q', 'origin', 'main');
    t.is(Number(await git(repo.work, 'rev-list', '--count', 'HEAD')), 3, 'exactly one commit on top of the bad one');
    const head = await git(repo.work, 'rev-parse', 'HEAD');
    t.is(await git(repo.work, 'rev-parse', 'HEAD^'), bad);
    t.is(await git(repo.work, 'rev-parse', 'HEAD^{tree}'), await git(repo.work, 'rev-parse', `${good}^{tree}`));
    const msg = await git(repo.work, 'log', '-1', '--format=%B');
    t.regex(msg, new RegExp(`This reverts commit ${bad}`));
    t.regex(msg, /Reason: validate: svc.yaml:1:1/);
    t.true(isRevertMessage(msg));
    // Same tree as the git CLI's own revert.
    const cmp = await tempDir('cmp');
    try {
      await git(cmp, 'clone', '-q', repo.url, 'w');
      await git(`${cmp}/w`, 'reset', '-q', '--hard', bad);
      await git(`${cmp}/w`, 'revert', '--no-edit', bad);
      t.is(await git(`${cmp}/w`, 'rev-parse', 'HEAD^{tree}'), await git(repo.work, 'rev-parse', `${head}^{tree}`));
    } finally {
      rmSync(cmp, { recursive: true, force: true });
    }

    // The losers see the branch moved on: a second round pushes nothing.
    const again = await pushAutoRevert({ remote: remotes[0]!, branch: 'main', bad, lastGood: good, reason: 'x', node: 'lb-0', now: new Date() });
    t.false(again.pushed);
    // Never revert a revert.
    const rr = await pushAutoRevert({ remote: remotes[1]!, branch: 'main', bad: head, lastGood: good, reason: 'x', node: 'lb-1', now: new Date() });
    t.deepEqual(rr, { pushed: false, why: 'never revert a revert' });
  } finally {
    await repo.cleanup();
    for (const c of caches) rmSync(c, { recursive: true, force: true });
  }
});

test('no revert of history older than the last good revision, nor of a force-pushed head', async (t) => {
  const repo = await servedRepo();
  const cache = await tempDir('rb-old');
  try {
    const a = await commitFiles(repo.work, { 'a.yaml': 'a: 1\n' }, 'a');
    const b = await commitFiles(repo.work, { 'a.yaml': 'a: 2\n' }, 'b');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const remote = new HttpRemote(repo.url, cache);
    await remote.fetch('main');
    // b is the last good one; "reverting" it as if it were bad would go back past the last good revision.
    const past = await pushAutoRevert({ remote, branch: 'main', bad: b, lastGood: b, reason: 'x', node: 'n', now: new Date() });
    t.false(past.pushed);
    // Force-push: a new head that does not descend from the last good revision.
    await git(repo.work, 'reset', '-q', '--hard', a);
    const c = await commitFiles(repo.work, { 'a.yaml': 'a: 3\n' }, 'c (rewritten history)');
    await git(repo.work, 'push', '-q', '-f', 'origin', 'main');
    await remote.fetch('main');
    t.is(await ancestry(remote, 'main', b, c), 'not-descendant');
    const forced = await pushAutoRevert({ remote, branch: 'main', bad: c, lastGood: b, reason: 'x', node: 'n', now: new Date() });
    t.false(forced.pushed);
    t.regex(forced.pushed ? '' : forced.why, /never revert older history/);
    t.is(await git(repo.work, 'ls-remote', 'origin', 'refs/heads/main'), `${c}\trefs/heads/main`, 'nothing pushed');
  } finally {
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});

test('ancestry deepens a shallow cache until it can tell', async (t) => {
  const repo = await servedRepo();
  const cache = await tempDir('deep');
  try {
    const first = await commitFiles(repo.work, { 'a.yaml': 'n: 0\n' }, 'c0');
    // 30 more commits in one shell: beyond the first deepening step (16), within the second.
    await execFileP('bash', ['-c', 'for i in $(seq 1 30); do echo "n: $i" > a.yaml; git commit -qam "c$i"; done'], {
      cwd: repo.work,
      env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@example.com', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@example.com' },
    });
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const head = await git(repo.work, 'rev-parse', 'HEAD');
    const remote = new HttpRemote(repo.url, cache);
    t.is(await remote.fetch('main', { depth: 1 }), head);
    t.is(await ancestry(remote, 'main', first, head), 'descendant');
    t.is(await ancestry(remote, 'main', 'f'.repeat(40), head), 'not-descendant');
  } finally {
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});
