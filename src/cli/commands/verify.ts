// `gitlb verify`: checks the signatures of a range of commits offline, with the same code the daemon runs
// before applying a revision (for CI on pull requests: `gitlb verify --range origin/main..HEAD --trust F`).
import * as fs from 'node:fs';
import git from 'isomorphic-git';
import { commandGitTimeoutOption, defineCommand, formatOption, gitTimeoutMs, UsageError } from '../command.js';
import { isUrl, openRemote, type GitRemote } from '../../reconciler/source/git-remote.js';
import { loadCredentials } from '../../reconciler/source/credentials.js';
import { ancestry, readRevisionFiles } from '../../reconciler/source/git-objects.js';
import { parseConfig } from '../../render/config/index.js';
import { loadTrustFile } from '../../reconciler/verify/load.js';
import { policyFor } from '../../reconciler/verify/revision-check.js';
import { verifyRange } from '../../reconciler/verify/verify-range.js';
import { describeVerdict } from '../../reconciler/verify/verdict.js';
import { makeTempDir, removeTempDir } from '../../reconciler/temp/temp-dirs.js';

async function resolveName(gitdir: string, rev: string): Promise<string> {
  try {
    return await git.resolveRef({ fs, gitdir, ref: rev });
  } catch {
    if (/^[0-9a-f]{4,40}$/.test(rev)) {
      try {
        return await git.expandOid({ fs, gitdir, oid: rev });
      } catch {
        /* fall through */
      }
    }
    throw new UsageError(`cannot resolve revision '${rev}'`);
  }
}

/** A fetched cache is shallow: deepen (doubling, up to 4096 commits) until `oid` is there. */
async function deepenUntilPresent(remote: GitRemote, branch: string, oid: string): Promise<void> {
  const present = () => git.readCommit({ fs, gitdir: remote.gitdir, oid }).then(() => true, () => false);
  for (let extra = 16; !(await present()) && extra <= 4096; extra *= 2) await remote.deepen(branch, extra);
  if (!(await present())) throw new Error(`${oid.slice(0, 12)} is not in the history of '${branch}' (searched 4096 commits)`);
}

/** A name or id with git's `~N` / `^N` suffixes (HEAD~2, main^2). */
async function resolveRev(gitdir: string, rev: string, deepen?: () => Promise<void>): Promise<string> {
  const m = /^(.*?)((?:[~^]\d*)*)$/.exec(rev)!;
  let oid = await resolveName(gitdir, m[1]!);
  for (const [, op, n] of m[2]!.matchAll(/([~^])(\d*)/g)) {
    const count = n === '' ? 1 : Number(n);
    for (let i = 0; i < (op === '~' ? count : 1); i++) {
      const { commit } = await git.readCommit({ fs, gitdir, oid }).catch(async () => {
        await deepen?.(); // a shallow cache may not hold the parents yet
        return git.readCommit({ fs, gitdir, oid });
      });
      const parent = commit.parent[op === '^' ? Math.max(count, 1) - 1 : 0];
      if (!parent || (op === '^' && count === 0)) {
        if (op === '^' && count === 0) break;
        throw new UsageError(`revision '${rev}': ${oid.slice(0, 12)} has no such parent`);
      }
      oid = parent;
    }
  }
  return oid;
}

interface VerifyOptions {
  repo: string;
  range?: string;
  trust?: string;
  branch: string;
  credentialsFile?: string;
  json: boolean;
  format: 'text' | 'json';
  /** Seconds (`--git-timeout`): the deadline of each fetch and deepen of a URL. */
  gitTimeout: number;
}

export const command = defineCommand<VerifyOptions>({
  name: 'verify',
  summary: 'verify the signatures of a range of commits, as gitlb run does before applying (for CI)',
  description: `Verifies the signature of every commit reachable from HEAD and not from BASE (merges included), exactly
as gitlb run does before applying HEAD: trusted signers are the --trust file plus the repository's signers list as
each commit's parents hold it, where a parent outside the range holds BASE's list (BASE is the starting list, also
for a HEAD that forks from before BASE); accepted formats and the signers list path come from BASE's
Cluster.spec.verification (defaults: ssh and openpgp, trust/allowed_signers). Without BASE the whole history of
HEAD is checked. The range is always judged as in enforce mode (docs/verification.md).`,
  exitStatus: 'Exit status: 0 every commit verified, 1 a commit refused (or the range cannot be read), 2 usage error.',
  define: (cmd) =>
    cmd
      .option('--repo <url|dir>', 'repository; a URL is fetched into a temporary cache', '.')
      .option('--range <[base..]head>', 'commits to check: names or ids, with ~N / ^N (default: HEAD of the directory, or --branch of a URL)')
      .option('--trust <file>', 'root of trust: SSH allowed_signers lines and/or armored OpenPGP public keys')
      .option('--branch <name>', 'with a URL: the branch to fetch', 'main')
      .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
      .addOption(commandGitTimeoutOption())
      .option('--json', 'same as --format json', false)
      .addOption(formatOption(['text', 'json'], 'text', 'text, or JSON {policy, verdicts, failures, notes}')),
  async run(values) {
    const repo = values.repo;
    const range = values.range ?? (isUrl(repo) ? values.branch : 'HEAD');
    const parts = range.split('..');
    if (parts.length > 2 || parts.some((p) => p === '')) throw new UsageError(`--range '${range}': expected HEAD or BASE..HEAD`);
    const trust = values.trust ? await loadTrustFile(values.trust) : null;
    const cache = isUrl(repo) ? await makeTempDir('gitlb-verify-') : null;
    try {
      let remote: GitRemote;
      try {
        remote = openRemote(repo, { cacheDir: cache ?? '', credentials: loadCredentials({ file: values.credentialsFile }), timeoutMs: gitTimeoutMs(values.gitTimeout) });
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      const fetched = cache ? await remote.fetch(values.branch, { depth: 1 }) : null;
      if (cache && !fetched) throw new UsageError(`branch '${values.branch}' not found`);
      // In a fetched cache the branch is a remote-tracking ref: its name means the fetched head.
      const resolve = (rev: string) => (fetched && rev === values.branch ? Promise.resolve(fetched) : resolveRev(remote.gitdir, rev, () => remote.deepen(values.branch, 64)));
      const [baseRev, headRev] = parts.length === 2 ? [parts[0]!, parts[1]!] : [null, parts[0]!];
      const head = await resolve(headRev);
      const base = baseRev ? await resolve(baseRev) : null;
      if (base && cache) await deepenUntilPresent(remote, values.branch, base);
      const baseModel = base ? parseConfig(await readRevisionFiles(remote.gitdir, base)).model : null;
      const policy = { ...policyFor(baseModel?.cluster.spec.verification ?? null, true), mode: 'enforce' as const };
      const r = await verifyRange({
        gitdir: remote.gitdir,
        head,
        base,
        policy,
        root: trust ?? { ssh: [], pgp: [], problems: [] },
        now: new Date(),
        deepen: (extra) => remote.deepen(values.branch, extra),
      });
      // A HEAD that forks from before BASE is judged from BASE's signers list all the same (the fork point is not
      // verified history of HEAD); a node that applied BASE would also refuse it as a rewind under enforce.
      const descends = base ? (await ancestry(remote, values.branch, base, head)) === 'descendant' : true;
      const rewind = descends
        ? null
        : `${head.slice(0, 12)} does not descend from ${base!.slice(0, 12)}: its commits are judged from ${base!.slice(0, 12)}'s signers list; ` +
          `pushed as the branch itself (not merged), a node that applied ${base!.slice(0, 12)} refuses it under enforce (NonFastForward) unless gitlb run --allow-rewind-to allows it`;
      if (values.json || values.format === 'json') process.stdout.write(JSON.stringify({ policy, descendsFromBase: descends, ...r }, null, 2) + '\n');
      else {
        if (rewind) process.stdout.write(`note: ${rewind}\n`);
        for (const v of r.verdicts) process.stdout.write(`${v.ok ? 'ok    ' : 'REFUSED'} ${describeVerdict(v)}${v.subject ? ` — ${v.subject}` : ''}\n`);
        for (const n of r.notes) process.stdout.write(`note: signers list: ${n}\n`);
        process.stdout.write(
          r.failures.length
            ? `${r.failures.length} of ${r.verdicts.length} commit(s) refused\n`
            : `${r.verdicts.length} commit(s) verified${r.verdicts.length ? '' : ' (nothing new in the range)'}\n`,
        );
      }
      return r.failures.length ? 1 : 0;
    } finally {
      if (cache) await removeTempDir(cache);
    }
  },
});
