// The reconcile loop's verification step: which policy is in force, whether the new tip continues the verified
// history, which commits it brings, and whether they may be applied (docs/security.md, "Config branch and local
// state"). The base is the node's own last verified revision (its local state) or --trust-from, never anything
// read from the status branch. The policy in force is the last verified revision's (a commit cannot switch
// verification off for itself); before anything was verified it is `enforce` when the node has a --trust root,
// else off. Under enforce a tip that does not descend from the last verified revision is a rewind: refused
// (NonFastForward) unless the operator named it with --allow-rewind-to, and even then it must verify and may not
// lower the policy.
import * as fs from 'node:fs';
import git from 'isomorphic-git';
import { parseConfig } from '../../render/config/index.js';
import type { GitRemote } from '../source/git-remote.js';
import { ancestry, readCommitInfo, readRevisionFiles, type Ancestry } from '../source/git-objects.js';
import { DEFAULT_POLICY, readSignersList, verifyRange, type VerificationPolicy, type VerificationMode } from './verify-range.js';
import { EMPTY_TRUST, trustAdded, type Trust } from './trust.js';
import { describeVerdict, type CommitVerdict } from './verdict.js';
import type { AppliedCommit, StatusVerification } from '../status/status-doc.js';

/** A revision's `Cluster.spec.verification` (null: the config has none). */
export type RecordedPolicy = VerificationPolicy | null;

export interface RevisionCheck {
  refused: boolean;
  /** Why a refused tip is refused: a commit did not verify, or the tip does not continue the verified history. */
  refusal: 'VerificationFailed' | 'NonFastForward' | null;
  /** One line naming the first refused commit, its author and the reason (status condition, failure reason). */
  reason: string;
  firstFailure: CommitVerdict | null;
  warnings: string[];
  status: StatusVerification;
  commit: AppliedCommit;
  /** The tip does not descend from the last verified revision (force-push, rewrite, rewind). */
  rewound: boolean;
}

export function policyFor(recorded: RecordedPolicy | undefined, hasRoot: boolean): VerificationPolicy {
  if (recorded) return { mode: recorded.mode, formats: recorded.formats, signersFile: recorded.signersFile };
  return { ...DEFAULT_POLICY, mode: hasRoot ? 'enforce' : 'off' };
}

const MODE_RANK: Record<VerificationMode, number> = { off: 0, warn: 1, enforce: 2 };

/** How `next` is weaker than `current` (a lower mode, a format `current` refuses, another signers list), or null. */
export function policyLowering(current: VerificationPolicy, next: VerificationPolicy): string | null {
  if (MODE_RANK[next.mode] < MODE_RANK[current.mode]) return `mode ${current.mode} -> ${next.mode}`;
  const added = next.formats.filter((f) => !current.formats.includes(f));
  if (added.length) return `formats [${current.formats.join(', ')}] -> [${next.formats.join(', ')}]`;
  if (next.signersFile !== current.signersFile) return `signersFile ${current.signersFile ?? '(none)'} -> ${next.signersFile ?? '(none)'}`;
  return null;
}

const MAX_LISTED = 5;
const MAX_DEPTH = 4096;

/** `--allow-rewind-to` in the cache, deepening it until it is there; null when it is not there or not a full id
 *  (an abbreviated one is refused: a tip matching a short prefix is easy to grind). */
async function resolveRewindTarget(remote: GitRemote, branch: string, head: string, id: string): Promise<string | null> {
  if (!/^[0-9a-f]{40}$/.test(id)) return null;
  if (head === id) return head;
  for (let extra = 16; ; extra *= 2) {
    try {
      return await git.expandOid({ fs, gitdir: remote.gitdir, oid: id });
    } catch {
      // not (yet) in the shallow cache
    }
    if (extra > MAX_DEPTH) return null;
    await remote.deepen(branch, extra);
  }
}

export async function checkRevision(o: {
  remote: GitRemote;
  branch: string;
  head: string;
  /** The node's own last verified (and applied) revision, from its local state; null: none. */
  verified: string | null;
  /** --trust-from: the base while nothing was verified. */
  trustFrom: string | null;
  /** The policy in force: policyFor(the last verified revision's policy, --trust given). */
  policy: VerificationPolicy;
  /** --allow-rewind-to: the full id of a commit the operator allows a rewind to. */
  allowRewindTo: string | null;
  /** Subdirectory of the config (--path), to read a rewind target's policy. */
  configPath?: string;
  root: Trust | null;
  now: Date;
}): Promise<RevisionCheck> {
  const { policy, remote, branch, head } = o;
  const info = await readCommitInfo(remote.gitdir, head);
  const commit: AppliedCommit = {
    author: `${info.author.name} <${info.author.email}>`,
    subject: (info.message.split('\n')[0] ?? '').slice(0, 200),
    signer: null,
  };
  const status: StatusVerification = { mode: policy.mode, revision: head, result: 'off', commits: 0, failures: [] };
  const warnings: string[] = [];
  const refuse = (refusal: 'VerificationFailed' | 'NonFastForward', reason: string, rewound: boolean, firstFailure: CommitVerdict | null = null): RevisionCheck => {
    status.result = 'refused';
    return { refused: true, refusal, reason, firstFailure, warnings, status, commit, rewound };
  };

  // Does the tip continue the verified history? (Network errors propagate: transient, retried like a fetch.)
  let rel: Ancestry = 'descendant';
  if (o.verified && head !== o.verified) rel = await ancestry(remote, branch, o.verified, head, MAX_DEPTH);
  const rewound = rel === 'not-descendant';
  let rewindAllowed = false;
  if (rel !== 'descendant') {
    const what = rewound
      ? `${head.slice(0, 12)} does not descend from the last verified revision ${o.verified!.slice(0, 12)}`
      : `could not establish that ${head.slice(0, 12)} descends from the last verified revision ${o.verified!.slice(0, 12)} (not within ${MAX_DEPTH} commits)`;
    if (policy.mode === 'enforce') {
      const target = o.allowRewindTo ? await resolveRewindTarget(remote, branch, head, o.allowRewindTo) : null;
      rewindAllowed = target !== null && (target === head || (await ancestry(remote, branch, target, head, MAX_DEPTH)) === 'descendant');
      if (!rewindAllowed) {
        const hint = o.allowRewindTo
          ? `it is not --allow-rewind-to ${o.allowRewindTo} nor one of its descendants`
          : `a rewind is applied only when allowed with gitlb run --allow-rewind-to <commit>; roll back with git revert (a new commit) instead`;
        return refuse('NonFastForward', `${what} (history of '${branch}' was rewritten): ${hint}`, rewound);
      }
      warnings.push(`rewind allowed by --allow-rewind-to ${o.allowRewindTo}: ${what}`);
    } else if (rewound) warnings.push(`force-push: ${what}; history of '${branch}' was rewritten`);
    else warnings.push(what);
  }

  if (policy.mode !== 'off') {
    const base = o.verified ?? o.trustFrom;
    const r = await verifyRange({
      gitdir: remote.gitdir,
      head,
      base,
      policy,
      root: o.root ?? EMPTY_TRUST,
      now: o.now,
      deepen: (extra) => remote.deepen(branch, extra),
    });
    status.commits = r.verdicts.length;
    status.failures = r.failures.slice(0, MAX_LISTED).map((f) => ({ commit: f.commit, author: f.author, reason: f.reason!, detail: f.detail ?? '' }));
    commit.signer = r.verdicts.find((v) => v.commit === head && v.ok)?.signer ?? null;
    warnings.push(...r.notes.map((n) => `signers list: ${n}`));
    const first = r.failures[0] ?? null;
    if (first) {
      const more = r.failures.length > 1 ? ` (and ${r.failures.length - 1} more unverified commits)` : '';
      // A node with no verified revision and no --trust-from checks the whole history, down to the root commit.
      const fromRoot = base === null ? '; verified from the root commit: this node has no local state and no --trust-from (gitlb run --trust-from <commit> trusts the history up to a commit)' : '';
      const reason = `${describeVerdict(first)}${more}${fromRoot}`;
      if (policy.mode === 'enforce') return refuse('VerificationFailed', reason, rewound, first);
      status.result = 'warned';
      warnings.unshift(`verification (warn): ${reason}`);
      return { refused: false, refusal: null, reason, firstFailure: first, warnings, status, commit, rewound };
    }
    status.result = 'verified';
  }

  // An allowed rewind verifies, but it may not weaken the policy: only a verified descendant may.
  if (rewindAllowed) {
    const next = await policyAtRevision(remote.gitdir, head, o.configPath);
    const lowered = next === undefined ? null : policyLowering(policy, policyFor(next, o.root !== null));
    if (lowered) return refuse('NonFastForward', `rewind to ${head.slice(0, 12)} would lower the verification policy (${lowered}): only a verified commit descending from ${o.verified!.slice(0, 12)} may`, rewound);
    // After the rewind the tip is the base, and its signers list the one in force: it may not trust a key the
    // last verified revision's list does not (a revoked signer would be back). Unreadable there counts as empty.
    const added = trustAdded(
      await readSignersList(remote.gitdir, o.verified!, policy.signersFile, []),
      await readSignersList(remote.gitdir, head, policy.signersFile, []),
    );
    if (added.length) {
      const listed = added.slice(0, MAX_LISTED).join(', ') + (added.length > MAX_LISTED ? ` and ${added.length - MAX_LISTED} more` : '');
      return refuse('NonFastForward', `rewind to ${head.slice(0, 12)} would trust signers the last verified revision ${o.verified!.slice(0, 12)} does not (${policy.signersFile}: ${listed}): only a verified commit descending from it may add a signer`, rewound);
    }
  }
  return { refused: false, refusal: null, reason: '', firstFailure: null, warnings, status, commit, rewound };
}

/** A revision's recorded policy; undefined when its config does not validate (validation refuses it later). */
async function policyAtRevision(gitdir: string, oid: string, configPath?: string): Promise<RecordedPolicy | undefined> {
  try {
    const model = parseConfig(await readRevisionFiles(gitdir, oid, configPath)).model;
    return model ? (model.cluster.spec.verification ?? null) : undefined;
  } catch {
    return undefined;
  }
}
