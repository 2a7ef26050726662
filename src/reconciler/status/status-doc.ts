// The per-node status document written to `status/<node>.yaml` on the status branch
// (schema: schemas/status.schema.json). Pure: building and serialising, no I/O.
import { stringify, parse } from 'yaml';

export type AttemptResult = 'applied' | 'unchanged' | 'failed' | 'superseded';
export type FailureStage = 'fetch' | 'validate' | 'render' | 'apply' | 'readback' | 'health' | 'status';

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

export interface StatusService {
  name: string;
  id: number;
  tableSize: number;
  digest: string;
  reals: StatusRealState[];
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
  counters: StatusCounters;
  startedAt: string;
  updatedAt: string;
  /** Health checker observations and decisions (src/reconciler/health/status.ts), lb nodes only. */
  health?: unknown;
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
  return `# gitlb node status, written by the node itself; schema: schemas/status.schema.json\n${stringify(s, { lineWidth: 0 })}`;
}

export function parseStatus(text: string): NodeStatus {
  return parse(text) as NodeStatus;
}

/**
 * What a status commit should say in its subject line, e.g.
 * `status(lb-1): applied 1a2b3c4d5e6f` or `status(lb-1): failed 9f8e7d6c5b4a at validate`.
 */
export function statusCommitMessage(s: NodeStatus, why: string): string {
  const a = s.lastAttempt;
  const head = a
    ? `${a.result} ${a.revision.slice(0, 12)}${a.stage ? ` at ${a.stage}` : ''}`
    : `started${s.appliedRevision ? `, serving ${s.appliedRevision.slice(0, 12)}` : ''}`;
  const body = [
    `node: ${s.node}`,
    `applied: ${s.appliedRevision ?? '(none)'}`,
    ...(a?.reason ? [`reason: ${oneLine(a.reason)}`] : []),
    `trigger: ${why}`,
  ];
  return `status(${s.node}): ${head}\n\n${body.join('\n')}\n`;
}

function oneLine(s: string): string {
  const line = s.replace(/\s+/g, ' ').trim();
  return line.length > 200 ? `${line.slice(0, 197)}...` : line;
}
