// Reads the nodes' status files (status/<node>.yaml on the status branch) straight from the lab Git server's
// repository, and waits until every node reports a given revision.
import { exec } from '../lab/netns.js';
import { parseStatus, statusPath, type NodeStatus } from '../reconciler/status/status-doc.js';
import { sleep } from '../lab/netns.js';

export const STATUS_BRANCH = 'gitlb-status';

/** The node's status as last pushed, or null when it has not written one yet. */
export async function readNodeStatus(bareRepo: string, node: string, branch = STATUS_BRANCH): Promise<NodeStatus | null> {
  const r = await exec(['git', '--git-dir', bareRepo, 'show', `${branch}:${statusPath(node)}`], { timeoutMs: 10_000 });
  return r.code === 0 ? parseStatus(r.stdout) : null;
}

export interface WaitResult {
  ok: boolean;
  statuses: Map<string, NodeStatus | null>;
  waitedMs: number;
}

/** Waits until every node's status shows `revision` applied (or `accept` holds), polling; bounded by timeoutMs. */
export async function waitForStatuses(
  bareRepo: string,
  nodes: string[],
  accept: (s: NodeStatus) => boolean,
  timeoutMs: number,
): Promise<WaitResult> {
  const start = Date.now();
  const statuses = new Map<string, NodeStatus | null>();
  for (;;) {
    for (const node of nodes) statuses.set(node, await readNodeStatus(bareRepo, node));
    const ok = nodes.every((n) => {
      const s = statuses.get(n);
      return s !== null && s !== undefined && accept(s);
    });
    if (ok || Date.now() - start > timeoutMs) return { ok, statuses, waitedMs: Date.now() - start };
    await sleep(500);
  }
}

export const appliedRevision = (rev: string) => (s: NodeStatus) => s.appliedRevision === rev;

/** Per service: the digest each node reports, and whether they all agree. */
export function digestTable(statuses: Map<string, NodeStatus | null>): { service: string; digests: Record<string, string>; agree: boolean }[] {
  const services = new Set<string>();
  for (const s of statuses.values()) for (const svc of s?.services ?? []) services.add(svc.name);
  return [...services].sort().map((service) => {
    const digests: Record<string, string> = {};
    for (const [node, s] of statuses) digests[node] = s?.services.find((x) => x.name === service)?.digest ?? '(none)';
    const values = Object.values(digests);
    return { service, digests, agree: values.every((d) => d === values[0] && d !== '(none)') };
  });
}

/**
 * The revision a node's daemon recorded as applied in its local state file (`<cache-dir>/state.json`, written
 * right after an apply, before the status push). A fallback when a status push lags or failed: it tells "the
 * data plane has it" apart from "the status branch says so".
 */
export async function readLocalApplied(labStateDir: string, node: string): Promise<string | null> {
  const { readFile } = await import('node:fs/promises');
  try {
    const s = JSON.parse(await readFile(`${labStateDir}/cache/${node}/state.json`, 'utf8')) as { appliedRevision?: string | null };
    return s.appliedRevision ?? null;
  } catch {
    return null;
  }
}

/** Waits until every node's daemon has applied `rev` by its own local record (bounded). */
export async function waitForLocalApplied(labStateDir: string, nodes: string[], rev: string, timeoutMs: number): Promise<{ ok: boolean; missing: string[] }> {
  const start = Date.now();
  for (;;) {
    const missing: string[] = [];
    for (const n of nodes) if ((await readLocalApplied(labStateDir, n)) !== rev) missing.push(n);
    if (missing.length === 0 || Date.now() - start > timeoutMs) return { ok: missing.length === 0, missing };
    await sleep(300);
  }
}
