// Verifying everything a node would newly apply: the commits of (base..head] (range.ts), each against the
// trust in force for it. Trust for a commit is the root (--trust) plus the repository's signers list as its
// parents hold it (for a merge: the keys all parents agree on), where a parent outside the range (verified
// history: reachable from the base) holds the base's list, not its own. So the list is monotonic: it starts as
// the last verified revision's and changes only through commits of the range, a commit that changes it is judged
// by the keys trusted before the change, a key added by a commit only counts for that commit's children, and a
// key removed before the base cannot come back through a fork from an older commit.
// The same code serves the daemon and `gitlb verify`.
import * as fs from 'node:fs';
import git from 'isomorphic-git';
import { readFileAt } from '../source/git-objects.js';
import { commitsInRange } from './range.js';
import { intersectTrust, loadTrust, unionTrust, EMPTY_TRUST, type Trust } from './trust.js';
import { verifyCommitRaw, type SignatureFormat } from './verify-commit.js';
import type { CommitVerdict } from './verdict.js';

export type VerificationMode = 'off' | 'warn' | 'enforce';

export interface VerificationPolicy {
  mode: VerificationMode;
  formats: SignatureFormat[];
  /** Repository path of the signers list that extends the root trust, or null for none. */
  signersFile: string | null;
}

export const DEFAULT_POLICY: VerificationPolicy = { mode: 'off', formats: ['ssh', 'openpgp'], signersFile: 'trust/allowed_signers' };

export interface RangeVerification {
  /** Every commit checked, parents first. */
  verdicts: CommitVerdict[];
  /** The refused ones (a subset of verdicts), plus a pseudo-verdict when the range itself could not be listed. */
  failures: CommitVerdict[];
  /** Problems in signers lists (ignored lines); informational. */
  notes: string[];
}

export interface RangeRequest {
  gitdir: string;
  head: string;
  /** The last good revision: commits reachable from it are not verified again. Null: the whole history. */
  base: string | null;
  policy: VerificationPolicy;
  root: Trust;
  now: Date;
  /** Fetches more history into a shallow cache; called with growing depths until the range is known. */
  deepen?: (extra: number) => Promise<void>;
  maxCommits?: number;
  maxDepth?: number;
}

const MAX_SIGNERS_FILE = 1024 * 1024;

export async function verifyRange(r: RangeRequest): Promise<RangeVerification> {
  const maxCommits = r.maxCommits ?? 10_000;
  const maxDepth = r.maxDepth ?? 4096;
  let walk = await commitsInRange(r.gitdir, r.head, r.base, maxCommits);
  for (let extra = 16; walk.incomplete && !walk.truncated && r.deepen && extra <= maxDepth; extra *= 2) {
    await r.deepen(extra);
    walk = await commitsInRange(r.gitdir, r.head, r.base, maxCommits);
  }
  const rangeProblem = (detail: string): RangeVerification => {
    const v: CommitVerdict = { commit: r.head, author: '(range)', subject: '', ok: false, reason: 'malformed', detail };
    return { verdicts: [v], failures: [v], notes: [] };
  };
  if (walk.truncated) return rangeProblem(`more than ${maxCommits} commits to verify`);
  if (walk.incomplete) return rangeProblem(`history of ${r.head.slice(0, 12)} is incomplete (shallow beyond ${maxDepth} commits or missing objects)`);

  const formats = new Set(r.policy.formats);
  const notes: string[] = [];
  const listCache = new Map<string, Promise<Trust>>();
  const listAt = (oid: string): Promise<Trust> => {
    let p = listCache.get(oid);
    if (!p) listCache.set(oid, (p = readSignersList(r.gitdir, oid, r.policy.signersFile, notes)));
    return p;
  };
  const inRange = new Set(walk.commits);
  // A parent the range does not hold is verified history: the list in force there is the base's.
  const parentList = (p: string): Promise<Trust> => (inRange.has(p) ? listAt(p) : r.base ? listAt(r.base) : Promise.resolve(EMPTY_TRUST));
  const verdicts: CommitVerdict[] = [];
  for (const oid of walk.commits) {
    const { object } = await git.readObject({ fs, gitdir: r.gitdir, oid, format: 'content' });
    const raw = Buffer.from(object as Uint8Array);
    const { commit } = await git.readCommit({ fs, gitdir: r.gitdir, oid });
    const repoTrust = commit.parent.length ? intersectTrust(await Promise.all(commit.parent.map(parentList))) : EMPTY_TRUST;
    verdicts.push(await verifyCommitRaw(oid, raw, unionTrust(r.root, repoTrust), { formats, now: r.now }));
  }
  return { verdicts, failures: verdicts.filter((v) => !v.ok), notes: [...new Set(notes)] };
}

/** The signers list at a revision (`path` null: none; missing or unreadable: empty, with a note). */
export async function readSignersList(gitdir: string, oid: string, path: string | null, notes: string[]): Promise<Trust> {
  if (!path) return EMPTY_TRUST;
  let blob: Uint8Array | null;
  try {
    blob = await readFileAt(gitdir, oid, path);
  } catch (err) {
    notes.push(`${path} at ${oid.slice(0, 12)}: ${(err as Error).message}`);
    return EMPTY_TRUST;
  }
  if (!blob) return EMPTY_TRUST;
  if (blob.length > MAX_SIGNERS_FILE) {
    notes.push(`${path} at ${oid.slice(0, 12)}: larger than ${MAX_SIGNERS_FILE} bytes; ignored`);
    return EMPTY_TRUST;
  }
  const t = await loadTrust(Buffer.from(blob).toString('utf8'), `${path}@${oid.slice(0, 12)}`);
  notes.push(...t.problems);
  return t;
}
