// Flux-style conditions of a node's status (status/<node>.yaml `conditions`), and the status policy: which
// conditions each event of a node sets (NodeConditions: the daemon's loops, decommission; downStatus: `gitlb down`).
// Pure: the time comes in.
//   Ready        True when the branch head is applied and read back; False with the reason it is not (Stopped:
//                the daemon's last write on SIGTERM).
//   Reconciling  True while a failed revision or fetch waits for its next (backed-off) attempt.
//   Stalled      True when the head cannot be applied without a new commit (validation, render, health gate).
//   Degraded     True while the node serves but not as configured (reals down, drift just repaired).
// A condition's lastTransitionTime moves only when its status changes.
import { emptyCounters, type FailureStage, type NodeStatus } from './status-doc.js';
import { conditionOf, type RevisionErrorCode } from '../../errors.js';

export type ConditionType = 'Ready' | 'Reconciling' | 'Stalled' | 'Degraded';
export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** The fixed set of reasons; docs/reconciler.md explains each. */
export const CONDITION_REASONS = [
  'Succeeded',
  'Progressing',
  'FetchFailed',
  'VerificationFailed',
  'NonFastForward',
  'ValidationFailed',
  'RenderFailed',
  'ApplyFailed',
  'ReadbackMismatch',
  'HealthGateFailed',
  'DriftRepaired',
  'RealsUnhealthy',
  'Healthy',
  'Decommissioned',
  'Stopped',
] as const;
export type ConditionReason = (typeof CONDITION_REASONS)[number];

export interface Condition {
  type: ConditionType;
  status: ConditionStatus;
  reason: ConditionReason;
  message: string;
  lastTransitionTime: string; // ISO-8601 UTC
}

const ORDER: ConditionType[] = ['Ready', 'Reconciling', 'Stalled', 'Degraded'];

/** Returns `list` with `type` set; keeps lastTransitionTime when the status did not change. */
export function setCondition(
  list: readonly Condition[],
  c: { type: ConditionType; status: ConditionStatus; reason: ConditionReason; message: string },
  now: string,
): Condition[] {
  const prev = list.find((x) => x.type === c.type);
  const next: Condition = {
    ...c,
    message: c.message.length > 500 ? `${c.message.slice(0, 497)}...` : c.message,
    lastTransitionTime: prev && prev.status === c.status ? prev.lastTransitionTime : now,
  };
  const out = list.filter((x) => x.type !== c.type);
  out.push(next);
  return out.sort((a, b) => ORDER.indexOf(a.type) - ORDER.indexOf(b.type));
}

export function getCondition(list: readonly Condition[] | undefined, type: ConditionType): Condition | undefined {
  return list?.find((c) => c.type === type);
}

/** A revision that failed: why, and whether (and when) it is tried again. */
export interface RevisionFailure {
  stage: FailureStage;
  reason: string;
  retryable: boolean;
  attempts: number;
  retryAt: number; // epoch ms; Infinity when not retryable
  /** Its code (src/errors.ts): it decided `retryable`, and names the condition reason. */
  code: RevisionErrorCode;
}

/** What Degraded is judged from: the services as last read back, a drift repair, a decommission. */
export interface ServingFacts {
  decommissioned: boolean;
  /** Set by a drift check that repaired something (or could not); null after a clean one. */
  driftRepaired: string | null;
  services: readonly { name: string; reals: readonly { address: string; state: string; healthy: boolean }[] }[];
}

/**
 * The conditions of a running node's status: Ready/Reconciling/Stalled as the last outcome set them, Degraded from
 * what the node serves when the status is taken. The one place that decides them for the daemon.
 */
export class NodeConditions {
  private list: Condition[] = [];

  constructor(private readonly clock: () => Date) {}

  private set(type: ConditionType, status: ConditionStatus, reason: ConditionReason, message: string): void {
    this.list = setCondition(this.list, { type, status, reason, message }, this.clock().toISOString());
  }

  /** `revision` is applied (or served, when a fetch recovers onto it: `msg` says so). */
  succeeded(revision: string, msg = `applied ${revision.slice(0, 12)}`): void {
    this.set('Ready', 'True', 'Succeeded', msg);
    this.set('Reconciling', 'False', 'Succeeded', msg);
    this.set('Stalled', 'False', 'Succeeded', msg);
  }

  /** A fetch failed; `retry` says when it is tried again. */
  fetchFailed(reason: string, attempts: number, retry: string): void {
    this.set('Ready', 'False', 'FetchFailed', reason);
    this.set('Reconciling', 'True', 'FetchFailed', `attempt ${attempts} failed; ${retry}`);
  }

  /** Ready/Reconciling/Stalled for a head that failed (also re-stated when a fetch recovers onto it). */
  revisionFailed(head: string, f: RevisionFailure): void {
    const reason = conditionOf(f.code);
    this.set('Ready', 'False', reason, `${head.slice(0, 12)} failed at ${f.stage}: ${f.reason}`);
    if (f.retryable) {
      const inS = Math.max(0, Math.round((f.retryAt - this.clock().getTime()) / 1000));
      this.set('Reconciling', 'True', reason, `retrying in ${inS} s (attempt ${f.attempts})`);
      this.set('Stalled', 'False', reason, 'the failure is transient');
    } else {
      this.set('Reconciling', 'False', reason, 'waiting for a new commit');
      this.set('Stalled', 'True', reason, `${head.slice(0, 12)} cannot be applied: ${f.reason}`);
    }
  }

  /** The config no longer names the node and its data plane was removed: every condition says so. */
  decommissioned(msg: string): void {
    for (const type of ORDER) this.set(type, 'False', 'Decommissioned', msg);
  }

  /** The daemon is stopping: nothing reconciles any more (`serving`: what the pinned data plane keeps forwarding). */
  stopped(why: string, serving: string): void {
    this.set('Ready', 'False', 'Stopped', `gitlb run stopped (${why}); the pinned data plane keeps forwarding ${serving}, nothing reconciles it`);
    this.set('Reconciling', 'False', 'Stopped', 'stopped');
  }

  /** Ready/Reconciling/Stalled as last set by an outcome; Degraded from what the node serves right now. */
  current(now: string, facts: ServingFacts): Condition[] {
    if (!this.list.some((c) => c.type === 'Ready'))
      this.list = setCondition(this.list, { type: 'Ready', status: 'Unknown', reason: 'Progressing', message: 'no reconcile finished yet' }, now);
    if (!facts.decommissioned) {
      const down = facts.services.flatMap((s) => s.reals.filter((r) => r.state === 'active' && !r.healthy).map((r) => `${s.name}/${r.address}`));
      const degraded = facts.driftRepaired
        ? { status: 'True' as const, reason: 'DriftRepaired' as const, message: facts.driftRepaired }
        : down.length
          ? { status: 'True' as const, reason: 'RealsUnhealthy' as const, message: `unhealthy: ${down.slice(0, 10).join(', ')}${down.length > 10 ? ` (+${down.length - 10})` : ''}` }
          : { status: 'False' as const, reason: 'Healthy' as const, message: 'every active real is healthy' };
      this.list = setCondition(this.list, { type: 'Degraded', ...degraded }, now);
    }
    return this.list.map((c) => ({ ...c }));
  }
}

/**
 * The node's status after `gitlb down` (src/cli/commands/down.ts): nothing served, Ready=False/Decommissioned with
 * `what` was done, the other conditions and the previous fields kept.
 */
export function downStatus(prev: NodeStatus | undefined, node: string, branch: string, what: string, now: string): NodeStatus {
  const conditions = setCondition(prev?.conditions ?? [], { type: 'Ready', status: 'False', reason: 'Decommissioned', message: what }, now);
  return {
    apiVersion: 'gitlb/v1',
    kind: 'NodeStatus',
    node,
    role: prev?.role ?? 'lb',
    branch: prev?.branch ?? branch,
    appliedRevision: null,
    appliedAt: null,
    lastAttempt: prev?.appliedRevision ? { revision: prev.appliedRevision, result: 'decommissioned', reason: what, at: now } : null,
    lastFailure: prev?.lastFailure ?? null,
    warnings: [`data plane removed by gitlb down at ${now}`],
    services: [],
    conditions,
    counters: prev?.counters ?? emptyCounters(),
    startedAt: prev?.startedAt ?? now,
    updatedAt: now,
  };
}
