// The reconcile loop's verification step: which policy is in force, which commits a new tip brings, and
// whether they may be applied. The policy is the last good revision's (a commit cannot switch verification off
// for itself); before anything was applied it is `enforce` when the node has a --trust root, else off.
import type { ConfigModel } from '../../render/model.js';
import type { GitRemote } from '../source/git-remote.js';
import { readCommitInfo } from '../source/git-objects.js';
import { DEFAULT_POLICY, verifyRange, type VerificationPolicy } from './verify-range.js';
import { EMPTY_TRUST, type Trust } from './trust.js';
import { describeVerdict, type CommitVerdict } from './verdict.js';
import type { AppliedCommit, StatusVerification } from '../status/status-doc.js';

export interface RevisionCheck {
  refused: boolean;
  /** One line naming the first refused commit, its author and the reason (status condition, failure reason). */
  reason: string;
  firstFailure: CommitVerdict | null;
  warnings: string[];
  status: StatusVerification;
  commit: AppliedCommit;
}

export function policyFor(lastGood: ConfigModel | null, hasRoot: boolean): VerificationPolicy {
  const v = lastGood?.cluster.spec.verification;
  if (v) return { mode: v.mode, formats: v.formats, signersFile: v.signersFile };
  return { ...DEFAULT_POLICY, mode: hasRoot ? 'enforce' : 'off' };
}

const MAX_LISTED = 5;

export async function checkRevision(o: {
  remote: GitRemote;
  branch: string;
  head: string;
  base: string | null;
  lastGood: ConfigModel | null;
  root: Trust | null;
  now: Date;
}): Promise<RevisionCheck> {
  const policy = policyFor(o.lastGood, o.root !== null);
  const info = await readCommitInfo(o.remote.gitdir, o.head);
  const commit: AppliedCommit = {
    author: `${info.author.name} <${info.author.email}>`,
    subject: (info.message.split('\n')[0] ?? '').slice(0, 200),
    signer: null,
  };
  const status: StatusVerification = { mode: policy.mode, revision: o.head, result: 'off', commits: 0, failures: [] };
  if (policy.mode === 'off') return { refused: false, reason: '', firstFailure: null, warnings: [], status, commit };

  const r = await verifyRange({
    gitdir: o.remote.gitdir,
    head: o.head,
    base: o.base,
    policy,
    root: o.root ?? EMPTY_TRUST,
    now: o.now,
    deepen: (extra) => o.remote.deepen(o.branch, extra),
  });
  status.commits = r.verdicts.length;
  status.failures = r.failures.slice(0, MAX_LISTED).map((f) => ({ commit: f.commit, author: f.author, reason: f.reason!, detail: f.detail ?? '' }));
  commit.signer = r.verdicts.find((v) => v.commit === o.head && v.ok)?.signer ?? null;
  const first = r.failures[0] ?? null;
  const more = r.failures.length > 1 ? ` (and ${r.failures.length - 1} more unverified commits)` : '';
  const reason = first ? `${describeVerdict(first)}${more}` : '';
  const notes = r.notes.map((n) => `signers list: ${n}`);
  if (!first) {
    status.result = 'verified';
    return { refused: false, reason, firstFailure: null, warnings: notes, status, commit };
  }
  if (policy.mode === 'warn') {
    status.result = 'warned';
    return { refused: false, reason, firstFailure: first, warnings: [`verification (warn): ${reason}`, ...notes], status, commit };
  }
  status.result = 'refused';
  return { refused: true, reason, firstFailure: first, warnings: notes, status, commit };
}
