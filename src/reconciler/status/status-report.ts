// Reading status back: every node's current status file (for `gitlb status`) and the audit trail of
// applied revisions from the status branch's history (for `gitlb history`).
import * as fs from 'node:fs';
import git from 'isomorphic-git';
import { firstParentLog, readCommitInfo, readFileAt } from '../source/git-objects.js';
import type { GitRemote } from '../source/git-remote.js';
import { parseStatusFile, type NodeStatus, type StatusRealState } from './status-doc.js';
import { formatTable } from '../format/text-table.js';

export async function readAllStatuses(remote: GitRemote, branch: string, onBadFile?: (problem: string) => void): Promise<NodeStatus[]> {
  const tip = await remote.fetch(branch, { depth: 1 });
  if (!tip) return [];
  return readStatusesAt(remote.gitdir, tip, onBadFile);
}

async function readStatusesAt(gitdir: string, commit: string, onBadFile?: (problem: string) => void): Promise<NodeStatus[]> {
  let entries;
  try {
    entries = (await git.readTree({ fs, gitdir, oid: commit, filepath: 'status' })).tree;
  } catch {
    return [];
  }
  const out: NodeStatus[] = [];
  for (const e of entries) {
    if (e.type !== 'blob' || !e.path.endsWith('.yaml')) continue;
    const { blob } = await git.readBlob({ fs, gitdir, oid: e.oid });
    try {
      out.push(parseStatusFile(e.path, Buffer.from(blob).toString('utf8')));
    } catch (err) {
      // One node's broken file must not hide every other node's status.
      onBadFile?.(`status/${e.path}: ${(err as Error).message}`);
    }
  }
  return out.sort((a, b) => a.node.localeCompare(b.node));
}

/**
 * Table digests of the lb nodes, per applied revision, service and health view. Only lb nodes forward by the Maglev
 * ring, so only they must agree; a backend's status lists the services it serves but its digests are not part of the
 * agreement. Digests are compared only where they must be equal: between nodes at the same applied revision (during a
 * rolling change two nodes at different revisions legitimately hold different tables; revision skew is judged
 * separately, against the behind grace) that report the same reals out of the ring (a node whose file predates a
 * health flip — it could not write to Git — or that sees a real otherwise in local mode renders another table by
 * design). Key: `digestKey(revision, service, view)`.
 */
export function lbDigestsByService(statuses: NodeStatus[]): Map<string, Set<string>> {
  const byService = new Map<string, Set<string>>();
  for (const s of statuses) {
    if (s.role === 'backend' || !Array.isArray(s.services)) continue;
    for (const svc of s.services) {
      const key = digestKey(s.appliedRevision, svc.name, healthView(svc));
      if (!byService.has(key)) byService.set(key, new Set());
      byService.get(key)!.add(svc.digest);
    }
  }
  return byService;
}

/** The key of lbDigestsByService: one service at one applied revision (null: none applied) under one health view. */
export function digestKey(revision: string | null | undefined, service: string, view = ''): string {
  return `${revision ?? '(none)'}\0${service}\0${view}`;
}

/**
 * What of a service's rendering depends on health at a given revision: the reals not healthy-and-active, as the
 * status lists them (state and healthy flag), sorted. Equal views at one revision render equal tables.
 */
export function healthView(svc: { reals?: unknown }): string {
  const reals = Array.isArray(svc.reals) ? (svc.reals as Partial<StatusRealState>[]) : [];
  return reals
    .filter((r) => r && (r.state !== 'active' || r.healthy === false))
    .map((r) => `${String(r.address)}/${String(r.state)}/${r.healthy === false ? 'down' : 'up'}`)
    .sort()
    .join(',');
}

/** True when every service is rendered with one digest by every lb node that serves it at the same revision. */
export function lbDigestsAgree(statuses: NodeStatus[]): boolean {
  return [...lbDigestsByService(statuses).values()].every((d) => d.size <= 1);
}

/** The applied revisions of the lb nodes that serve something, each with its nodes (sorted by revision). */
export function lbRevisions(statuses: NodeStatus[]): { revision: string; nodes: string[] }[] {
  const by = new Map<string, string[]>();
  for (const s of statuses) {
    if (s.role === 'backend' || !s.appliedRevision) continue;
    if (!by.has(s.appliedRevision)) by.set(s.appliedRevision, []);
    by.get(s.appliedRevision)!.push(s.node);
  }
  return [...by].map(([revision, nodes]) => ({ revision, nodes: nodes.sort() })).sort((a, b) => a.revision.localeCompare(b.revision));
}

export { formatTable };

export interface HistoryEntry {
  node: string;
  revision: string;
  at: string; // when the node applied it (appliedAt of the status file)
  statusCommit: string;
  /** Author and subject line of the applied config commit, when the config branch's history holds it. */
  author?: string;
  subject?: string;
  /** Who signed the applied config commit, as the node verified it (null: not verified); from the status file. */
  signer?: string | null;
}

/** How far back the config branch is fetched to name the author and subject of applied revisions. */
const CONFIG_LOG_DEPTH = 1000;

/**
 * Adds each applied revision's author and subject (from the config branch), so who changed what is one command.
 * Revisions the fetched history does not hold (older than CONFIG_LOG_DEPTH, or from a rewritten branch) stay bare.
 */
export async function withConfigCommits(remote: GitRemote, configBranch: string, entries: HistoryEntry[]): Promise<HistoryEntry[]> {
  if (!entries.length) return entries;
  await remote.fetch(configBranch, { depth: CONFIG_LOG_DEPTH });
  const out: HistoryEntry[] = [];
  for (const e of entries) {
    try {
      const c = await readCommitInfo(remote.gitdir, e.revision);
      out.push({ ...e, author: `${c.author.name} <${c.author.email}>`, subject: c.message.split('\n')[0]!.trim().slice(0, 120) });
    } catch {
      out.push(e);
    }
  }
  return out;
}

/**
 * Every change of a node's applied revision recorded on the status branch, by the time the node applied it, oldest
 * first (status pushes of different nodes can land out of that order; equal or unreadable times keep the branch's
 * order).
 */
export async function readHistory(remote: GitRemote, branch: string, maxCommits = 5000): Promise<HistoryEntry[]> {
  const tip = await remote.fetch(branch, { depth: maxCommits });
  if (!tip) return [];
  const log = (await firstParentLog(remote.gitdir, tip, maxCommits)).reverse();
  const lastApplied = new Map<string, string | null>();
  const out: HistoryEntry[] = [];
  for (const c of log) {
    const node = c.author.name;
    const blob = await readFileAt(remote.gitdir, c.oid, `status/${node}.yaml`);
    if (!blob) continue;
    let s;
    try {
      s = parseStatusFile(`${node}.yaml`, Buffer.from(blob).toString('utf8'));
    } catch {
      continue; // a broken status commit is not part of the audit trail
    }
    if (!s.appliedRevision || lastApplied.get(node) === s.appliedRevision) continue;
    lastApplied.set(node, s.appliedRevision);
    const ac = typeof s.appliedCommit === 'object' && s.appliedCommit !== null ? s.appliedCommit : null;
    // Other nodes' files are input: only strings, capped. Author and subject from the config branch win later.
    const field = (v: unknown) => (typeof v === 'string' ? v.slice(0, 200) : undefined);
    out.push({
      node,
      revision: s.appliedRevision,
      at: s.appliedAt ?? s.updatedAt,
      statusCommit: c.oid,
      author: field(ac?.author),
      subject: field(ac?.subject),
      signer: field(ac?.signer) ?? null,
    });
  }
  const t = (e: HistoryEntry) => {
    const ms = Date.parse(e.at);
    return Number.isFinite(ms) ? ms : -Infinity;
  };
  return out.sort((a, b) => t(a) - t(b)); // stable: ties keep the status branch's order
}

export function formatHistory(entries: HistoryEntry[]): string {
  if (!entries.length) return 'no applied revision recorded yet\n';
  return formatTable(
    ['APPLIED AT', 'NODE', 'REVISION', 'STATUS COMMIT', 'AUTHOR', 'SUBJECT', 'SIGNED BY'],
    entries.map((e) => [
      e.at,
      e.node,
      e.revision.slice(0, 12),
      e.statusCommit.slice(0, 12),
      e.author ?? '-',
      e.subject ?? '-',
      e.signer ?? '(not verified)',
    ]),
  );
}
