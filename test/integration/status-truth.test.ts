// `gitlb status` tells the truth: each exit reason (failed, behind beyond the grace period, stale, digests differ,
// no status) against a real Git server (git http-backend), with the status files on the status branch.
import test from 'ava';
import { join } from 'node:path';
import { mkdir, writeFile } from 'node:fs/promises';
import { gitlbInProcess as gitlb } from '../helpers/cli-repo.js';
import { servedRepo, commitFiles, configFiles, git, nodeStatus, type ServedRepo } from '../reconcile-helpers.js';
import { serialiseStatus, type NodeStatus } from '../../src/reconciler/status/status-doc.js';

const ago = (ms: number) => new Date(Date.now() - ms).toISOString();

const status = (node: string, applied: string, o: Parameters<typeof nodeStatus>[2] = {}) => nodeStatus(node, applied, { reals: ['198.51.100.10', '198.51.100.11'], ...o });

/** Replaces the status branch with these files (one commit, force-pushed as a node would never do; fine here). */
async function publish(repo: ServedRepo, statuses: NodeStatus[]): Promise<void> {
  const dir = join(repo.root, 'status-work');
  await git(repo.root, 'init', '-q', '-b', 'gitlb-status', dir).catch(() => '');
  await git(dir, 'rm', '-rq', '--ignore-unmatch', '.');
  await mkdir(join(dir, 'status'), { recursive: true });
  for (const s of statuses) await writeFile(join(dir, 'status', `${s.node}.yaml`), serialiseStatus(s));
  await git(dir, 'add', '-A');
  await git(dir, 'commit', '-q', '--allow-empty', '-m', 'status');
  await git(dir, 'push', '-qf', repo.url, 'gitlb-status');
}

test('gitlb status exits 1 for each reason, 0 when every node serves the head, fresh and agreeing', async (t) => {
  const repo = await servedRepo();
  try {
    const head = await commitFiles(repo.work, configFiles(['lb-1', 'lb-2'], ['198.51.100.10', '198.51.100.11']), 'config');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const st = (...args: string[]) => gitlb(['status', '--repo', repo.url, ...args]);

    await publish(repo, [status('lb-1', head), status('lb-2', head, { warnings: ['force-push: history of main was rewritten'] })]);
    const ok = await st();
    t.is(ok.code, 0, ok.stdout + ok.stderr);
    t.regex(ok.stdout, /NODE\s+ROLE\s+XDP\s+APPLIED\s+BRANCH\s+UPDATED\s+DIGESTS\s+READY\s+UNHEALTHY\s+LAST ERROR/);
    t.regex(ok.stdout, new RegExp(`lb-1\\s+lb\\s+\\S+\\s+${head.slice(0, 12)}\\s+head\\s+\\d+s ago\\s+agree\\s+-\\s+0`));
    t.regex(ok.stdout, /lb-2: warning: force-push/);
    t.regex(ok.stdout, /verdict: OK/);

    // Degraded: a real down on lb-2 is a problem (README: exit 1 on any problem), unless --ignore-degraded.
    await publish(repo, [status('lb-1', head, { down: '198.51.100.11' }), status('lb-2', head, { down: '198.51.100.11' })]);
    const degraded = await st();
    t.is(degraded.code, 1, degraded.stdout);
    t.regex(degraded.stdout, /lb-2: unhealthy reals: web\/198\.51\.100\.11/);
    t.regex(degraded.stdout, /lb-2: degraded: unhealthy: web\/198\.51\.100\.11/);
    const ignored = await st('--ignore-degraded');
    t.is(ignored.code, 0, ignored.stdout);
    t.regex(ignored.stdout, /verdict: OK/);

    // lb-1 cannot reach Git: its file predates the flip lb-2 saw 3 minutes ago (consensus mode). Matching kernel
    // tables are not called different, and lb-1 is named as the node that cannot reach Git.
    const since = ago(180_000);
    const health = (down: boolean) => ({ publishedAt: ago(0), mode: 'consensus', observations: down ? { web: { '198.51.100.11': { up: false, since } } } : {} });
    await publish(repo, [
      status('lb-1', head, { updatedAt: ago(600_000), health: health(false) }),
      status('lb-2', head, { down: '198.51.100.11', digest: 'c'.repeat(64), health: health(true) }),
    ]);
    const cut = await st('--ignore-degraded');
    t.is(cut.code, 1, cut.stdout);
    t.notRegex(cut.stdout, /DIFFER|differ/);
    t.regex(cut.stdout, /lb-1\s+lb\s+\S+\s+\w{12}\s+head\s+10m ago\s+not compared/);
    t.regex(cut.stdout, /table digests: nothing comparable; not compared \(other reals down at the same revision\): lb-1, lb-2/);
    t.regex(cut.stdout, /lb-1: has not written its status since lb-2 saw web\/198\.51\.100\.11 down 3m ago \(its file is 10m old\): lb-1 cannot reach Git/);

    // Failed: the last attempt failed (the node keeps serving the head it applied before).
    const failedAt = { revision: head, result: 'failed' as const, stage: 'apply' as const, reason: 'map update: E2BIG', at: ago(0) };
    await publish(repo, [status('lb-1', head), status('lb-2', head, { lastAttempt: failedAt, lastFailure: failedAt })]);
    const failed = await st();
    t.is(failed.code, 1);
    t.regex(failed.stdout, /lb-2: last attempt failed at apply \(\w{12}\): map update: E2BIG/);

    // Stale: a status file older than the threshold; a longer threshold accepts it.
    await publish(repo, [status('lb-1', head), status('lb-2', head, { updatedAt: ago(3_600_000) })]);
    const stale = await st();
    t.is(stale.code, 1);
    t.regex(stale.stdout, /lb-2\s+lb\s+\S+\s+\w{12}\s+head\s+STALE 60m ago/);
    t.regex(stale.stdout, /lb-2: stale: last update 60m ago \(threshold 15m\)/);
    t.is((await st('--stale-after', '2h')).code, 0);

    // Digests differ between the lb nodes.
    await publish(repo, [status('lb-1', head), status('lb-2', head, { digest: 'b'.repeat(64) })]);
    const differ = await st();
    t.is(differ.code, 1);
    t.regex(differ.stdout, /lb-1\s+lb\s+\S+\s+\w{12}\s+head\s+\d+s ago\s+differ/);
    t.regex(differ.stdout, /table digests DIFFER across nodes/);

    // No status at all from a node the config names.
    await publish(repo, [status('lb-1', head)]);
    const missing = await st();
    t.is(missing.code, 1);
    t.regex(missing.stdout, /lb-2: no status written/);

    // Behind: the branch moved on and lb-2 still serves the old head; within the grace period that is fine.
    await publish(repo, [status('lb-1', head), status('lb-2', head)]);
    const next = await commitFiles(repo.work, { 'services/web.yaml': configFiles(['lb-1'], ['198.51.100.10'])['services/web.yaml']! }, 'one real');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    await publish(repo, [status('lb-1', next), status('lb-2', head)]);
    const within = await st();
    t.is(within.code, 0, within.stdout);
    t.regex(within.stdout, new RegExp(`lb-2\\s+lb\\s+\\S+\\s+${head.slice(0, 12)}\\s+behind \\d+s`));
    const behind = await st('--behind-grace', '0s', '--format', 'json');
    t.is(behind.code, 1);
    const v = JSON.parse(behind.stdout);
    t.false(v.ok);
    t.is(v.head, next);
    t.deepEqual(v.nodes.map((n: { node: string; behind: boolean }) => [n.node, n.behind]), [['lb-1', false], ['lb-2', true]]);
    t.regex(v.problems.join('\n'), new RegExp(`lb-2: behind the branch for \\d+s \\(applied ${head.slice(0, 12)}, head ${next.slice(0, 12)}\\)`));
    t.is(v.nodes[1].status.appliedRevision, head, 'the raw status is in the JSON too');
  } finally {
    await repo.cleanup();
  }
});

// A node taken down on purpose (`gitlb down --repo`) serves nothing: while the config still names it, `gitlb status`
// shows it DOWN and exits 1 even inside the behind-grace period; once the config no longer names it, that is fine.
test.serial('gitlb status reports a node recorded by gitlb down as down while the config names it', async (t) => {
  const repo = await servedRepo();
  const pins = join(repo.root, 'no-pins');
  try {
    const head = await commitFiles(repo.work, configFiles(['lb-1', 'lb-2'], ['198.51.100.10']), 'config');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    await publish(repo, [status('lb-1', head, { reals: ['198.51.100.10'] }), status('lb-2', head, { reals: ['198.51.100.10'] })]);
    const down = await gitlb(['down', '--node', 'lb-2', '--pin-root', pins, '--cache-dir', join(repo.root, 'cache'), '--repo', repo.url]);
    t.is(down.code, 0, down.stdout + down.stderr);
    const st = await gitlb(['status', '--repo', repo.url]);
    t.is(st.code, 1, st.stdout);
    t.regex(st.stdout, /lb-2\s+lb\s+\S+\s+\(none\)\s+DOWN/);
    t.regex(st.stdout, /lb-2: down \(gitlb down\): .*the config still names it/);
    t.notRegex(st.stdout, /lb-2: behind/, 'one reason, not two');

    // Removed from the config: down is where it should be; lb-1 applies the new head.
    const next = await commitFiles(repo.work, { 'nodes/lb-2.yaml': null }, 'remove lb-2');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    await publish(repo, [status('lb-1', next, { reals: ['198.51.100.10'] })]);
    const down2 = await gitlb(['down', '--node', 'lb-2', '--pin-root', pins, '--cache-dir', join(repo.root, 'cache'), '--repo', repo.url]);
    t.is(down2.code, 0, down2.stdout + down2.stderr);
    const gone = await gitlb(['status', '--repo', repo.url]);
    t.is(gone.code, 0, gone.stdout);
    t.regex(gone.stdout, /lb-2\s+lb\s+\S+\s+\(none\)\s+DOWN/);
  } finally {
    await repo.cleanup();
  }
});

// Status files are written by other nodes (and quote config text in failure reasons): printing them must not let
// terminal control sequences through to the operator's terminal.
test.serial('gitlb status prints control characters from status files escaped, not raw', async (t) => {
  const repo = await servedRepo();
  try {
    const head = await commitFiles(repo.work, configFiles(['lb-1'], ['198.51.100.10']), 'config');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const evil = 'bad \x1b]0;owned\x07\x1b[2J\x9b31m name';
    const failedAt = { revision: head, result: 'failed' as const, stage: 'apply' as const, reason: evil, at: ago(0) };
    await publish(repo, [status('lb-1', head, { reals: ['198.51.100.10'], warnings: [evil], lastAttempt: failedAt, lastFailure: failedAt })]);
    const st = await gitlb(['status', '--repo', repo.url]);
    t.is(st.code, 1);
    t.regex(st.stdout, /lb-1: warning: bad \\x1b\]0;owned\\x07\\x1b\[2J\\x9b31m name/);
    t.notRegex(st.stdout, /[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
  } finally {
    await repo.cleanup();
  }
});
