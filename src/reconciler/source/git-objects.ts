// Reading and writing Git objects with isomorphic-git: config files of a revision, ancestry on shallow
// caches, and commits that replace one file (status) or restore a parent's tree (revert).
import * as fs from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import git, { type TreeEntry } from 'isomorphic-git';
import type { GitRemote } from './git-remote.js';
import { type ConfigFile, isConfigPath } from '../../render/config/index.js';
import { LIMITS } from '../../render/config/limits.js';
import { GitlbError } from '../../errors.js';

export type RevisionFile = ConfigFile;

/** Git's file mode of a symbolic link: the blob holds the target's name. */
const SYMLINK_MODE = '120000';

export interface CommitInfo {
  oid: string;
  tree: string;
  parents: string[];
  message: string;
  author: { name: string; email: string; timestamp: number };
  /** Committer time, seconds (a rebase or merge moves it; the author time stays). */
  committedAt: number;
}

/** Directory nesting followed in a revision's tree; deeper trees are not config and are not walked. */
const MAX_TREE_DEPTH = 16;

/**
 * The config files of a revision: the same selection as readConfigDir (isConfigPath: YAML, no status/, no hidden
 * parts), sorted by path. A hostile revision costs bounded work: the walk stops one file past the file-count cap
 * and once the total passes the size cap, and each file is cut one byte past the per-file cap, so parseConfig
 * still sees — and reports — every limit that was exceeded.
 */
/**
 * Blobs by object id. Ids name their content, so an entry is never stale: a revision usually changes a few files
 * of many, and reading (inflating) the others again was most of a reconcile at 1,000 services. Bounded in bytes;
 * the oldest go first. Callers only read the bytes.
 */
const blobCache = new Map<string, Uint8Array>();
let blobCacheBytes = 0;
const BLOB_CACHE_BYTES = 2 * LIMITS.maxTotalBytes;

async function readBlobCached(gitdir: string, oid: string, cache: object): Promise<Uint8Array> {
  const hit = blobCache.get(oid);
  if (hit) return hit;
  const { blob } = await git.readBlob({ fs, gitdir, oid, cache });
  blobCache.set(oid, blob);
  blobCacheBytes += blob.length;
  for (const [k, v] of blobCache) {
    if (blobCacheBytes <= BLOB_CACHE_BYTES) break;
    blobCache.delete(k);
    blobCacheBytes -= v.length;
  }
  return blob;
}

/** An object the cache lacks (isomorphic-git's NotFoundError) as GitObjectMissing, same message; others as they are. */
function missingObject(err: unknown): unknown {
  return (err as { code?: string } | null)?.code === 'NotFoundError'
    ? new GitlbError('GitObjectMissing', (err as Error).message, { cause: err })
    : err;
}

/** The config files of revision `oid` (below `configPath`). Throws GitObjectMissing when the cache lacks an object. */
export async function readRevisionFiles(gitdir: string, oid: string, configPath = ''): Promise<RevisionFile[]> {
  try {
    return await readRevision(gitdir, oid, configPath);
  } catch (err) {
    throw missingObject(err);
  }
}

async function readRevision(gitdir: string, oid: string, configPath: string): Promise<RevisionFile[]> {
  const out: RevisionFile[] = [];
  const cache = {};
  let totalBytes = 0;
  const full = () => out.length > LIMITS.maxFiles || totalBytes > LIMITS.maxTotalBytes;
  async function walkTree(treeOid: string, prefix: string, depth: number): Promise<void> {
    const { tree } = await git.readTree({ fs, gitdir, oid: treeOid, cache });
    for (const entry of tree) {
      if (full()) return;
      const path = prefix ? `${prefix}/${entry.path}` : entry.path;
      if (entry.type === 'tree') {
        if (entry.path.startsWith('.') || (!prefix && entry.path === 'status') || depth >= MAX_TREE_DEPTH) continue;
        await walkTree(entry.oid, path, depth + 1);
      } else if (entry.type === 'blob' && isConfigPath(path)) {
        const blob = await readBlobCached(gitdir, entry.oid, cache);
        if (entry.mode === SYMLINK_MODE) {
          out.push({ path, content: new Uint8Array(), symlinkTarget: new TextDecoder().decode(blob.subarray(0, 4096)) });
          continue;
        }
        const content = blob.length > LIMITS.maxFileBytes + 1 ? blob.subarray(0, LIMITS.maxFileBytes + 1) : blob;
        totalBytes += content.length;
        out.push({ path, content });
      }
    }
  }
  const { commit } = await git.readCommit({ fs, gitdir, oid, cache });
  await walkTree(await subtree(gitdir, commit.tree, configPath, oid, cache), '', 0);
  return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** The tree at `path` (a normalised config path, '' for the root) below `root`; names the path when absent. */
async function subtree(gitdir: string, root: string, path: string, commit: string, cache: object): Promise<string> {
  let tree = root;
  for (const part of path ? path.split('/') : []) {
    const entry = (await git.readTree({ fs, gitdir, oid: tree, cache })).tree.find((e) => e.path === part);
    if (!entry || entry.type !== 'tree')
      throw new GitlbError('ConfigInvalid', `config path '${path}' is not a directory in revision ${commit.slice(0, 12)}`, { field: '--path' });
    tree = entry.oid;
  }
  return tree;
}

export async function readCommitInfo(gitdir: string, oid: string): Promise<CommitInfo> {
  const { commit } = await git.readCommit({ fs, gitdir, oid });
  return {
    oid,
    tree: commit.tree,
    parents: commit.parent,
    message: commit.message,
    author: { name: commit.author.name, email: commit.author.email, timestamp: commit.author.timestamp },
    committedAt: commit.committer.timestamp,
  };
}

export async function readShallows(gitdir: string): Promise<Set<string>> {
  try {
    return new Set((await readFile(join(gitdir, 'shallow'), 'utf8')).split('\n').filter(Boolean));
  } catch {
    return new Set();
  }
}

export type Ancestry = 'descendant' | 'not-descendant' | 'unknown';

/**
 * Is `head` equal to or a descendant of `ancestor`? Breadth-first over parents; a walk that reaches a shallow
 * boundary (or a missing object) without finding it cannot tell, and says 'unknown'.
 */
export async function ancestryLocal(gitdir: string, ancestor: string, head: string, maxCommits = 100_000): Promise<Ancestry> {
  if (ancestor === head) return 'descendant';
  const shallows = await readShallows(gitdir);
  const cache = {};
  const queue = [head];
  const seen = new Set(queue);
  let incomplete = false;
  for (let n = 0; queue.length && n < maxCommits; n++) {
    const oid = queue.shift()!;
    let parents: string[];
    try {
      parents = (await git.readCommit({ fs, gitdir, oid, cache })).commit.parent;
    } catch {
      incomplete = true;
      continue;
    }
    if (parents.includes(ancestor)) return 'descendant';
    if (shallows.has(oid)) {
      incomplete = true;
      continue;
    }
    for (const p of parents) if (!seen.has(p)) (seen.add(p), queue.push(p));
  }
  return incomplete || queue.length ? 'unknown' : 'not-descendant';
}

/** Ancestry, deepening a shallow cache as needed (doubling, up to `maxDepth` commits). */
export async function ancestry(
  remote: GitRemote,
  branch: string,
  ancestor: string,
  head: string,
  maxDepth = 4096,
): Promise<Ancestry> {
  let result = await ancestryLocal(remote.gitdir, ancestor, head);
  for (let extra = 16; result === 'unknown' && extra <= maxDepth; extra *= 2) {
    await remote.deepen(branch, extra);
    result = await ancestryLocal(remote.gitdir, ancestor, head);
  }
  return result;
}

/** A tree equal to `baseTree` (or empty) with `path` set to `content`; returns the new tree's oid. */
export async function treeWithFile(gitdir: string, baseTree: string | null, path: string, content: Uint8Array): Promise<string> {
  const blob = await git.writeBlob({ fs, gitdir, blob: content });
  async function put(treeOid: string | null, parts: string[]): Promise<string> {
    const entries: TreeEntry[] = treeOid ? (await git.readTree({ fs, gitdir, oid: treeOid })).tree : [];
    const [name, ...rest] = parts;
    const existing = entries.find((e) => e.path === name);
    const kept = entries.filter((e) => e.path !== name);
    if (rest.length === 0) kept.push({ mode: '100644', path: name!, oid: blob, type: 'blob' });
    else {
      const sub = await put(existing && existing.type === 'tree' ? existing.oid : null, rest);
      kept.push({ mode: '040000', path: name!, oid: sub, type: 'tree' });
    }
    return git.writeTree({ fs, gitdir, tree: kept });
  }
  return put(baseTree, path.split('/'));
}

/** The blob at `path` in a commit, or null. */
export async function readFileAt(gitdir: string, commit: string, path: string): Promise<Uint8Array | null> {
  try {
    const { blob } = await git.readBlob({ fs, gitdir, oid: commit, filepath: path });
    return blob;
  } catch (err) {
    if ((err as { code?: string }).code === 'NotFoundError') return null;
    throw err;
  }
}

export interface Signature {
  name: string;
  email: string;
  timestamp: number; // seconds
  timezoneOffset: number;
}

/** Signs a commit payload (the object without gpgsig); returns the armored signature (verify/signing-key.ts). */
export interface PayloadSigner {
  sign(payload: Uint8Array): Promise<string>;
}

export async function writeCommitObject(
  gitdir: string,
  c: { tree: string; parents: string[]; message: string; author: Signature },
  signer?: PayloadSigner,
): Promise<string> {
  const oid = await git.writeCommit({
    fs,
    gitdir,
    commit: { tree: c.tree, parent: c.parents, message: c.message, author: c.author, committer: c.author },
  });
  if (!signer) return oid;
  // Sign exactly the bytes git would: the unsigned object; the signature goes in as a gpgsig header.
  const { object } = await git.readObject({ fs, gitdir, oid, format: 'content' });
  const unsigned = Buffer.from(object as Uint8Array);
  const headerEnd = unsigned.indexOf('\n\n');
  const at = headerEnd < 0 ? unsigned.length : headerEnd + 1;
  const armored = await signer.sign(unsigned);
  const header = `gpgsig ${armored.replace(/\n+$/, '').split('\n').join('\n ')}\n`;
  const signed = Buffer.concat([unsigned.subarray(0, at), Buffer.from(header, 'utf8'), unsigned.subarray(at)]);
  return git.writeObject({ fs, gitdir, type: 'commit', object: signed, format: 'content' });
}

/** Commits of `branch` newest first, following first parents, as far as the cache holds them. */
export async function firstParentLog(gitdir: string, head: string, max = 10_000): Promise<CommitInfo[]> {
  const out: CommitInfo[] = [];
  let oid: string | undefined = head;
  while (oid && out.length < max) {
    let info: CommitInfo;
    try {
      info = await readCommitInfo(gitdir, oid);
    } catch {
      break; // shallow boundary
    }
    out.push(info);
    oid = info.parents[0];
  }
  return out;
}
