// Automatic rollback: push a `git revert` of a bad revision to the config branch.
// Only the safe case is handled: the bad revision is the branch tip, has exactly one parent, and
// descends from the node's last good revision. The revert commit then has the bad commit as parent and
// the tree of the bad commit's parent, which is exactly what `git revert` produces for a tip commit.
// Pushes are compare-and-swap on the tip, so when several nodes try at once exactly one wins; the others
// see the branch moved and stand down.
import { ancestry, readCommitInfo, writeCommitObject, type PayloadSigner } from '../source/git-objects.js';
import type { GitRemote } from '../source/git-remote.js';

export const REVERT_TRAILER = 'Gitlb-Revert-Of';

export type RevertOutcome =
  | { pushed: true; commit: string }
  | { pushed: false; why: string };

/** Does this commit message describe a revert (made by git or by gitlb)? */
export function isRevertMessage(message: string): boolean {
  return /^Revert "/.test(message) || /\nThis reverts commit [0-9a-f]{7,40}/.test(message) || message.includes(`\n${REVERT_TRAILER}: `);
}

export function revertMessage(bad: { oid: string; message: string }, reason: string, node: string): string {
  const subject = bad.message.split('\n')[0] ?? '';
  const why = reason.replace(/\s+/g, ' ').trim().slice(0, 500);
  return [
    `Revert "${subject}"`,
    '',
    `This reverts commit ${bad.oid}.`,
    '',
    `gitlb rolled back ${bad.oid.slice(0, 12)} automatically (Cluster.spec.rollback.policy: auto).`,
    `Reason: ${why}`,
    '',
    `${REVERT_TRAILER}: ${bad.oid}`,
    `Gitlb-Node: ${node}`,
    '',
  ].join('\n');
}

export interface RevertRequest {
  remote: GitRemote;
  branch: string;
  bad: string;
  lastGood: string | null;
  reason: string;
  node: string;
  now: Date;
  /** Signs the revert commit (the node's --signing-key), so other nodes can verify it. */
  signer?: PayloadSigner;
}

export async function pushAutoRevert(r: RevertRequest): Promise<RevertOutcome> {
  if (!r.lastGood) return { pushed: false, why: 'no last good revision to return to' };
  if (r.bad === r.lastGood) return { pushed: false, why: 'the revision is the last good one' };
  const tip = await r.remote.fetch(r.branch);
  if (tip !== r.bad) return { pushed: false, why: `the branch moved on (tip ${tip?.slice(0, 12) ?? 'none'}); nothing to revert` };
  const bad = await readCommitInfo(r.remote.gitdir, r.bad);
  if (isRevertMessage(bad.message)) return { pushed: false, why: 'never revert a revert' };
  if (bad.parents.length !== 1) return { pushed: false, why: `${bad.parents.length} parents: only single-parent commits are reverted automatically` };
  const rel = await ancestry(r.remote, r.branch, r.lastGood, r.bad);
  if (rel !== 'descendant')
    return { pushed: false, why: `does not descend from the last good revision ${r.lastGood.slice(0, 12)} (${rel}): never revert older history` };
  let parent;
  try {
    parent = await readCommitInfo(r.remote.gitdir, bad.parents[0]!);
  } catch {
    await r.remote.deepen(r.branch, 1); // a shallow cache may hold the tip only
    parent = await readCommitInfo(r.remote.gitdir, bad.parents[0]!);
  }
  const commit = await writeCommitObject(r.remote.gitdir, {
    tree: parent.tree,
    parents: [r.bad],
    message: revertMessage(bad, r.reason, r.node),
    author: { name: `gitlb ${r.node}`, email: `${r.node}@gitlb.invalid`, timestamp: Math.floor(r.now.getTime() / 1000), timezoneOffset: 0 },
  }, r.signer);
  if (await r.remote.push(r.branch, commit, r.bad)) return { pushed: true, commit };
  const after = await r.remote.fetch(r.branch);
  return { pushed: false, why: `another writer moved the branch first (tip ${after?.slice(0, 12) ?? 'none'})` };
}
