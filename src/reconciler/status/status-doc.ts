// The per-node status document written to `status/<node>.yaml` on the status branch
// (schema: schemas/status.schema.json). Pure: building and serialising, no I/O.
import { stringify, parse } from 'yaml';
import type { Condition } from './conditions.js';
import type { StatusXdp } from './xdp-report.js';

export type AttemptResult = 'applied' | 'unchanged' | 'failed' | 'superseded' | 'decommissioned';
export type FailureStage = 'fetch' | 'verify' | 'validate' | 'render' | 'apply' | 'readback' | 'health' | 'status';

export interface StatusAttempt {
  revision: string;
  result: AttemptResult;
  stage?: FailureStage; // set when result = failed
  reason?: string;
  at: string; // ISO-8601 UTC
}

export interface StatusRealState {
  address: string;
  weight: number;
  state: 'active' | 'drain' | 'disabled';
  healthy: boolean;
  entries: number;
}

/** How many reals a service has, by state, and how many its health checks report down. */
export interface StatusRealCounts {
  total: number;
  active: number;
  drain: number;
  disabled: number;
  unhealthy: number;
}

export interface StatusService {
  name: string;
  id: number;
  tableSize: number;
  digest: string;
  /** Absent in files written before the counts existed (then `reals` lists every real). */
  realCounts?: StatusRealCounts;
  /** The reals that need a look: unhealthy, draining or disabled. Healthy active reals are only counted, so the
   * document (written after every apply) grows with what is wrong, not with the size of the config. */
  reals: StatusRealState[];
}

/** The status entry of one rendered service; `digest` as read back from the kernel. */
export function statusService(s: { name: string; id: number; tableSize: number; reals: readonly StatusRealState[] }, digest: string): StatusService {
  const realCounts: StatusRealCounts = { total: s.reals.length, active: 0, drain: 0, disabled: 0, unhealthy: 0 };
  const reals: StatusRealState[] = [];
  for (const r of s.reals) {
    realCounts[r.state]++;
    if (!r.healthy) realCounts.unhealthy++;
    if (r.healthy && r.state === 'active') continue;
    reals.push({ address: r.address, weight: r.weight, state: r.state, healthy: r.healthy, entries: r.entries });
  }
  return { name: s.name, id: s.id, tableSize: s.tableSize, digest, realCounts, reals };
}

export interface StatusCounters {
  reconciles: number;
  applies: number;
  failures: number;
  mapWrites: number;
  mapDeletes: number;
  ringSwitches: number;
  driftChecks: number;
  driftRepairs: number;
  forcePushes: number;
  rollbacksPushed: number;
  statusPushRetries: number;
}

/** The latest commit-signature verification (docs/verification.md). */
export interface StatusVerification {
  mode: 'off' | 'warn' | 'enforce';
  revision: string;
  result: 'verified' | 'refused' | 'warned' | 'off';
  commits: number; // commits checked
  failures: { commit: string; author: string; reason: string; detail: string }[]; // the first few
}

/** Author, subject and verified signer of the applied config commit (for `gitlb history`). */
export interface AppliedCommit {
  author: string;
  subject: string;
  signer: string | null;
}

export interface NodeStatus {
  apiVersion: 'gitlb/v1';
  kind: 'NodeStatus';
  node: string;
  role: 'lb' | 'backend';
  branch: string;
  appliedRevision: string | null;
  appliedAt: string | null;
  lastAttempt: StatusAttempt | null;
  lastFailure: StatusAttempt | null;
  warnings: string[];
  services: StatusService[];
  /** Flux-style Ready / Reconciling / Stalled / Degraded (src/reconciler/status/conditions.ts). */
  conditions?: Condition[];
  counters: StatusCounters;
  startedAt: string;
  updatedAt: string;
  /** Health checker observations and decisions (src/reconciler/health/status.ts), lb nodes only. */
  health?: unknown;
  /** lb nodes with BGP: per VIP `announced` or `withdrawn: <reason>`, and BIRD's last reload (docs/bgp.md). */
  bgp?: StatusBgp;
  /** lb nodes with --flow-sync: sync health per peer, SNAT addresses taken over, a drained node's remaining traffic
   * (src/reconciler/flows/flows-report.ts). */
  flows?: unknown;
  verification?: StatusVerification;
  appliedCommit?: AppliedCommit;
  /** The last time fetching the config branch failed in a row: first failure, the fetch that ended it, failed
   * attempts, the last error. Written once the node can reach Git again (it cannot write while it cannot). */
  fetchOutage?: FetchOutage;
  /** lb nodes on an interface: the XDP attach mode in use and whether native fell back (src/reconciler/status/xdp-report.ts). */
  xdp?: StatusXdp;
}

export interface FetchOutage {
  since: string;
  until: string;
  attempts: number;
  reason: string;
}

/** Optional fields: other nodes' files are input and are read defensively. */
export interface StatusBgp {
  vips?: { vip: string; services?: string[]; state: string }[];
  bird?: { configFile?: string; reloadedAt?: string | null; error?: string };
}

export function emptyCounters(): StatusCounters {
  return {
    reconciles: 0,
    applies: 0,
    failures: 0,
    mapWrites: 0,
    mapDeletes: 0,
    ringSwitches: 0,
    driftChecks: 0,
    driftRepairs: 0,
    forcePushes: 0,
    rollbacksPushed: 0,
    statusPushRetries: 0,
  };
}

export function statusPath(node: string): string {
  return `status/${node}.yaml`;
}

export function serialiseStatus(s: NodeStatus): string {
  return `# gitlb node status, written by the node itself; schema: schemas/status.schema.json\n${stringify(s, { lineWidth: 0, aliasDuplicateObjects: false })}`;
}

/** Status files are small; anything bigger is not ours and is refused before parsing. */
export const MAX_STATUS_BYTES = 1024 * 1024;

/**
 * Parses a status file written by some node. Other nodes' files are input like any other: size-capped, no YAML
 * aliases, and checked for the fields readers rely on, so one broken or hostile file cannot break `gitlb status`,
 * history or the health consensus. Throws an Error naming the problem.
 */
export function parseStatus(text: string): NodeStatus {
  if (text.length > MAX_STATUS_BYTES) throw new Error(`status file is larger than ${MAX_STATUS_BYTES} bytes`);
  // Aliases are bounded (an alias bomb expands exponentially); our own writer emits none.
  const doc = parse(text, { maxAliasCount: 100, uniqueKeys: true }) as unknown;
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new Error('status file is not a mapping');
  const d = doc as Record<string, unknown>;
  if (typeof d['node'] !== 'string' || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(d['node'])) throw new Error('status.node is not a node name');
  if (d['services'] !== undefined && !Array.isArray(d['services'])) throw new Error('status.services is not a list');
  if (d['appliedRevision'] !== undefined && d['appliedRevision'] !== null && typeof d['appliedRevision'] !== 'string')
    throw new Error('status.appliedRevision is not a string');
  return { ...d, services: (d['services'] as NodeStatus['services'] | undefined) ?? [] } as NodeStatus;
}

/** Parses `status/<file>`: the node a file speaks for is its file name, and the content must agree. */
export function parseStatusFile(fileName: string, text: string): NodeStatus {
  const s = parseStatus(text);
  const expected = fileName.replace(/\.yaml$/, '');
  if (s.node !== expected) throw new Error(`status/${fileName} claims to be node '${s.node}'`);
  return s;
}

/**
 * What a status commit should say in its subject line, e.g. `status(lb-1): applied 1a2b3c4d5e6f` or
 * `status(lb-1): failed 9f8e7d6c5b4a at validate` when it records that attempt, and
 * `status(lb-1): health change, serving 1a2b3c4d5e6f` when it records something else: `previous` is the node's file
 * the commit replaces, and an attempt it already records is not announced again (a heartbeat, a health flip or a
 * fetch failure applied nothing).
 */
export function statusCommitMessage(s: NodeStatus, why: string, previous: NodeStatus | null = null): string {
  const a = s.lastAttempt;
  const serving = `serving ${s.appliedRevision ? s.appliedRevision.slice(0, 12) : 'nothing'}`;
  const recorded = a && previous?.lastAttempt && sameAttempt(a, previous.lastAttempt);
  const head = !a
    ? `started${s.appliedRevision ? `, ${serving}` : ''}`
    : recorded
      ? `${subjectReason(why)}, ${serving}`
      : `${a.result} ${a.revision.slice(0, 12)}${a.stage ? ` at ${a.stage}` : ''}`;
  const body = [
    `node: ${s.node}`,
    `applied: ${s.appliedRevision ?? '(none)'}`,
    ...(a?.reason ? [`reason: ${oneLine(a.reason)}`] : []),
    `trigger: ${why}`,
  ];
  return `status(${s.node}): ${head}\n\n${body.join('\n')}\n`;
}

function sameAttempt(a: StatusAttempt, b: StatusAttempt): boolean {
  return a.revision === b.revision && a.result === b.result && a.at === b.at && a.stage === b.stage;
}

/**
 * The reason in a subject line, at most `max` characters. Reasons are coalesced (`web/10.0.0.1 unknown -> up;
 * dns/10.0.0.2 unknown -> up, ...`): a long one keeps its first parts whole and counts the rest, so a subject never
 * ends mid-word; the body's `trigger:` line has the whole reason.
 */
export function subjectReason(why: string, max = 60): string {
  const line = why.replace(/\s+/g, ' ').trim();
  if (line.length <= max) return line;
  const cuts = [...line.matchAll(/[;,] /g)].map((m) => m.index);
  for (let i = cuts.length - 1; i >= 0; i--) {
    const kept = `${line.slice(0, cuts[i])} (+${cuts.length - i} more)`;
    if (kept.length <= max) return kept;
  }
  return `${line.slice(0, max - 3)}...`;
}

function oneLine(s: string): string {
  const line = s.replace(/\s+/g, ' ').trim();
  return line.length > 200 ? `${line.slice(0, 197)}...` : line;
}
