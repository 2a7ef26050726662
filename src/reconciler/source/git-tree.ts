// Reads the config files of a revision straight from Git objects (isomorphic-git), without a checkout — what
// `gitlb plan --base REV --head REV` compares. Revisions: a ref (`main`, `origin/main`, `refs/heads/x`, `HEAD`, a
// tag), a full or abbreviated commit id, each optionally followed by `~N` / `^N` / `~` / `^` suffixes.
import * as fs from 'node:fs';
import { join, resolve } from 'node:path';
import git from 'isomorphic-git';
import { readRevisionFiles } from './git-objects.js';

export interface ConfigFile {
  path: string; // repo-relative, '/' separators
  content: Uint8Array;
}

/**
 * The git directory of a working tree (`DIR/.git`), of a working tree whose `.git` is a `gitdir:` file (a submodule,
 * `git init --separate-git-dir`), or of a bare repository (`DIR`). A linked worktree (`git worktree add`) is
 * refused: its HEAD lives apart from the refs and objects (`commondir`), which isomorphic-git does not follow, and
 * reading the common directory alone would silently take the main working tree's HEAD for this one's.
 */
export function gitdirOf(repoDir: string): string {
  const dotGit = join(repoDir, '.git');
  let st: fs.Stats | undefined;
  try {
    st = fs.statSync(dotGit);
  } catch {
    // not a working tree: fall through to "bare"
  }
  if (st?.isDirectory()) return dotGit;
  if (st?.isFile()) {
    const m = /^gitdir:\s*(.+?)\s*$/m.exec(fs.readFileSync(dotGit, 'utf8'));
    if (!m) throw new Error(`${repoDir}: .git is a file without a 'gitdir:' line`);
    const gitdir = resolve(repoDir, m[1]!);
    if (fs.existsSync(join(gitdir, 'commondir'))) {
      throw new Error(`${repoDir} is a linked worktree (git worktree), which is not supported: give the main working tree or a bare clone, and a branch or commit id as the revision`);
    }
    return gitdir;
  }
  if (fs.existsSync(join(repoDir, 'HEAD')) && fs.existsSync(join(repoDir, 'objects'))) return repoDir;
  throw new Error(`${repoDir}: not a Git repository (no .git directory, not a bare repository)`);
}

/** Peels annotated tags until a commit is reached. */
async function peelToCommit(gitdir: string, oid: string, rev: string): Promise<string> {
  for (let depth = 0; depth < 10; depth++) {
    const { type, object } = await git.readObject({ fs, gitdir, oid, format: 'parsed' });
    if (type === 'commit') return oid;
    if (type === 'tag') {
      oid = (object as { object: string }).object;
      continue;
    }
    throw new Error(`revision '${rev}' names a ${type}, not a commit`);
  }
  throw new Error(`revision '${rev}': tag chain too deep`);
}

async function resolveBase(gitdir: string, name: string, rev: string): Promise<string> {
  const candidates = [name, `refs/heads/${name}`, `refs/tags/${name}`, `refs/remotes/${name}`];
  for (const ref of candidates) {
    try {
      return await git.resolveRef({ fs, gitdir, ref });
    } catch {
      // try the next spelling
    }
  }
  if (/^[0-9a-f]{4,40}$/i.test(name)) {
    try {
      return await git.expandOid({ fs, gitdir, oid: name.toLowerCase() });
    } catch (err) {
      if ((err as { code?: string }).code === 'AmbiguousError') throw new Error(`revision '${rev}' is ambiguous`);
    }
  }
  throw new Error(`unknown revision '${rev}'`);
}

/** Resolves a revision expression to a commit id. */
export async function resolveRevision(gitdir: string, rev: string): Promise<string> {
  const m = /^(.*?)((?:[~^]\d*)*)$/.exec(rev.trim());
  const name = m?.[1] ?? '';
  if (!name) throw new Error(`invalid revision '${rev}'`);
  let oid = await peelToCommit(gitdir, await resolveBase(gitdir, name, rev), rev);
  for (const step of (m?.[2] ?? '').match(/[~^]\d*/g) ?? []) {
    const count = step.length > 1 ? Number(step.slice(1)) : 1;
    if (step[0] === '~') {
      for (let k = 0; k < count; k++) oid = await nthParent(gitdir, oid, 1, rev);
    } else if (count > 0) {
      oid = await nthParent(gitdir, oid, count, rev);
    }
  }
  return oid;
}

async function nthParent(gitdir: string, oid: string, n: number, rev: string): Promise<string> {
  const { commit } = await git.readCommit({ fs, gitdir, oid });
  const parent = commit.parent[n - 1];
  if (!parent) throw new Error(`revision '${rev}': commit ${oid.slice(0, 12)} has no parent #${n}`);
  return parent;
}

/**
 * The config files (YAML, outside status/ and .git/) of revision `rev` of the repository at `repoDir` (a working
 * tree or a bare repository), read from Git objects; the working tree is never touched. Sorted by path.
 */
export async function readConfigAtRevision(repoDir: string, rev: string, configPath = ''): Promise<ConfigFile[]> {
  const gitdir = gitdirOf(repoDir);
  const oid = await resolveRevision(gitdir, rev);
  return readRevisionFiles(gitdir, oid, configPath);
}
