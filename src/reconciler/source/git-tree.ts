// Reads the config files of a revision straight from Git objects (isomorphic-git), without a checkout — what
// `gitlb plan --base REV --head REV` compares. Revisions: a ref (`main`, `origin/main`, `refs/heads/x`, `HEAD`, a
// tag), a full or abbreviated commit id, each optionally followed by `~N` / `^N` / `~` / `^` suffixes.
import * as fs from 'node:fs';
import { join, resolve } from 'node:path';
import git from 'isomorphic-git';
import { readRevisionFiles } from './git-objects.js';
import { GitlbError } from '../../errors.js';

export interface ConfigFile {
  path: string; // repo-relative, '/' separators
  content: Uint8Array;
}

/** Where a repository's Git data lives: objects and shared refs (`gitdir`), and this working tree's own HEAD. */
export interface GitDirs {
  gitdir: string;
  /** The directory holding this working tree's HEAD: `gitdir`, except in a linked worktree (`git worktree add`). */
  headDir: string;
}

/**
 * The git directories of a working tree (`DIR/.git`), of a working tree whose `.git` is a `gitdir:` file (a
 * submodule, `git init --separate-git-dir`, a linked worktree), or of a bare repository (`DIR`). A linked worktree
 * keeps its HEAD in its own directory and everything else in the common one (its `commondir` file), which
 * isomorphic-git does not follow: `gitdir` is then the common directory and `headDir` the worktree's, and HEAD is
 * resolved from there (resolveRevision), so `HEAD` means this working tree's HEAD, not the main one's.
 */
export function gitDirsOf(repoDir: string): GitDirs {
  const dotGit = join(repoDir, '.git');
  let st: fs.Stats | undefined;
  try {
    st = fs.statSync(dotGit);
  } catch {
    // not a working tree: fall through to "bare"
  }
  if (st?.isDirectory()) return { gitdir: dotGit, headDir: dotGit };
  if (st?.isFile()) {
    const m = /^gitdir:\s*(.+?)\s*$/m.exec(fs.readFileSync(dotGit, 'utf8'));
    if (!m) throw new GitlbError('InvalidOption', `${repoDir}: .git is a file without a 'gitdir:' line`);
    const gitdir = resolve(repoDir, m[1]!);
    const commondirFile = join(gitdir, 'commondir');
    if (fs.existsSync(commondirFile)) {
      const common = resolve(gitdir, fs.readFileSync(commondirFile, 'utf8').trim());
      if (!fs.existsSync(join(common, 'objects'))) throw new GitlbError('InvalidOption', `${repoDir}: linked worktree whose common directory ${common} has no objects`);
      return { gitdir: common, headDir: gitdir };
    }
    return { gitdir, headDir: gitdir };
  }
  if (fs.existsSync(join(repoDir, 'HEAD')) && fs.existsSync(join(repoDir, 'objects'))) return { gitdir: repoDir, headDir: repoDir };
  throw new GitlbError('InvalidOption', `${repoDir}: not a Git repository (no .git directory, not a bare repository)`);
}

/** The directory of objects and refs of the repository at `repoDir` (see gitDirsOf). */
export function gitdirOf(repoDir: string): string {
  return gitDirsOf(repoDir).gitdir;
}

/** A linked worktree's HEAD: the commit it names directly, or the ref it points at resolved in the common directory. */
async function worktreeHead(dirs: GitDirs, rev: string): Promise<string> {
  const head = fs.readFileSync(join(dirs.headDir, 'HEAD'), 'utf8').trim();
  const ref = /^ref:\s*(\S+)$/.exec(head);
  if (!ref) {
    if (/^[0-9a-f]{40}$/.test(head)) return head;
    throw new GitlbError('InvalidOption', `revision '${rev}': cannot read HEAD of the worktree (${dirs.headDir}/HEAD)`);
  }
  try {
    return await git.resolveRef({ fs, gitdir: dirs.gitdir, ref: ref[1]! });
  } catch {
    throw new GitlbError('InvalidOption', `revision '${rev}': HEAD of the worktree names ${ref[1]}, which has no commit yet`);
  }
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
    throw new GitlbError('InvalidOption', `revision '${rev}' names a ${type}, not a commit`);
  }
  throw new GitlbError('InvalidOption', `revision '${rev}': tag chain too deep`);
}

async function resolveBase(dirs: GitDirs, name: string, rev: string): Promise<string> {
  const gitdir = dirs.gitdir;
  if (name === 'HEAD' && dirs.headDir !== gitdir) return worktreeHead(dirs, rev);
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
      if ((err as { code?: string }).code === 'AmbiguousError') throw new GitlbError('InvalidOption', `revision '${rev}' is ambiguous`);
    }
  }
  throw new GitlbError('InvalidOption', `unknown revision '${rev}'`);
}

/** Resolves a revision expression to a commit id (`dirs`: a git directory, or both of a linked worktree). */
export async function resolveRevision(dirs: string | GitDirs, rev: string): Promise<string> {
  if (typeof dirs === 'string') dirs = { gitdir: dirs, headDir: dirs };
  const gitdir = dirs.gitdir;
  const m = /^(.*?)((?:[~^]\d*)*)$/.exec(rev.trim());
  const name = m?.[1] ?? '';
  if (!name) throw new GitlbError('InvalidOption', `invalid revision '${rev}'`);
  let oid = await peelToCommit(gitdir, await resolveBase(dirs, name, rev), rev);
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
  if (!parent) throw new GitlbError('InvalidOption', `revision '${rev}': commit ${oid.slice(0, 12)} has no parent #${n}`);
  return parent;
}

/**
 * The config files (YAML, outside status/ and .git/) of revision `rev` of the repository at `repoDir` (a working
 * tree or a bare repository), read from Git objects; the working tree is never touched. Sorted by path.
 */
export async function readConfigAtRevision(repoDir: string, rev: string, configPath = ''): Promise<ConfigFile[]> {
  const dirs = gitDirsOf(repoDir);
  const oid = await resolveRevision(dirs, rev);
  return readRevisionFiles(dirs.gitdir, oid, configPath);
}
