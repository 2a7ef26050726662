// Which commits a node would newly apply: every commit reachable from the new tip and not from the last good
// revision (merges and their side branches included), like `git rev-list head ^base`. A two-colour walk in
// committer-date order; exclusion only ever follows real parent links from `base`, so clock skew can make the
// walk verify a commit too many, never one too few. Bounded: at most `maxCommits` commits are visited.
import * as fs from 'node:fs';
import git from 'isomorphic-git';
import { readShallows } from '../source/git-objects.js';

export interface RangeWalk {
  /** Commits to verify, parents before children. */
  commits: string[];
  /** The walk met a shallow boundary or a missing object before the answer was known (deepen and walk again). */
  incomplete: boolean;
  /** More than maxCommits commits would have to be visited. */
  truncated: boolean;
}

const FROM_HEAD = 1;
const FROM_BASE = 2;

interface Node {
  oid: string;
  time: number;
  parents: string[];
  shallow: boolean; // a boundary of a shallow cache: its parents are not here
  flags: number;
}

export async function commitsInRange(gitdir: string, head: string, base: string | null, maxCommits = 10_000): Promise<RangeWalk> {
  const shallows = await readShallows(gitdir);
  const cache = {};
  const nodes = new Map<string, Node>();
  let incomplete = false;
  const load = async (oid: string): Promise<Node | null> => {
    let n = nodes.get(oid);
    if (n) return n;
    try {
      const { commit } = await git.readCommit({ fs, gitdir, oid, cache });
      const shallow = shallows.has(oid);
      n = { oid, time: commit.committer.timestamp, parents: shallow ? [] : commit.parent, shallow, flags: 0 };
    } catch {
      return null;
    }
    nodes.set(oid, n);
    return n;
  };
  // Newest first; a small sorted array is plenty for the sizes involved.
  const queue: Node[] = [];
  const enqueue = (n: Node) => {
    if (queue.includes(n)) return;
    let i = queue.findIndex((q) => q.time < n.time);
    if (i < 0) i = queue.length;
    queue.splice(i, 0, n);
  };
  const mark = async (oid: string, flags: number): Promise<boolean> => {
    const n = await load(oid);
    if (!n) return false;
    if ((n.flags | flags) !== n.flags) {
      n.flags |= flags;
      enqueue(n);
    }
    return true;
  };
  if (!(await mark(head, FROM_HEAD))) return { commits: [], incomplete: true, truncated: false };
  if (base && !(await mark(base, FROM_BASE))) incomplete = true;
  let visited = 0;
  // Stop once everything still queued is reachable from base: nothing below it can be new.
  while (queue.some((q) => !(q.flags & FROM_BASE))) {
    if (++visited > maxCommits) return { commits: [], incomplete, truncated: true };
    const n = queue.shift()!;
    if (n.shallow && !(n.flags & FROM_BASE)) incomplete = true;
    for (const p of n.parents) if (!(await mark(p, n.flags)) && !(n.flags & FROM_BASE)) incomplete = true;
  }
  const inRange = [...nodes.values()].filter((n) => n.flags === FROM_HEAD);
  return { commits: parentsFirst(inRange), incomplete, truncated: false };
}

/** Kahn's order restricted to the range: a commit comes after all its parents that are in the range. */
function parentsFirst(nodes: Node[]): string[] {
  const inRange = new Set(nodes.map((n) => n.oid));
  const pending = new Map(nodes.map((n) => [n.oid, n.parents.filter((p) => inRange.has(p)).length]));
  const children = new Map<string, string[]>();
  for (const n of nodes) for (const p of n.parents) if (inRange.has(p)) children.set(p, [...(children.get(p) ?? []), n.oid]);
  const ready = nodes.filter((n) => pending.get(n.oid) === 0).sort((a, b) => a.time - b.time).map((n) => n.oid);
  const out: string[] = [];
  while (ready.length) {
    const oid = ready.shift()!;
    out.push(oid);
    for (const c of children.get(oid) ?? []) {
      const left = pending.get(c)! - 1;
      pending.set(c, left);
      if (left === 0) ready.push(c);
    }
  }
  return out;
}
