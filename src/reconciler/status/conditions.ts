// Flux-style conditions of a node's status (status/<node>.yaml `conditions`). Pure.
//   Ready        True when the branch head is applied and read back; False with the reason it is not (Stopped:
//                the daemon's last write on SIGTERM).
//   Reconciling  True while a failed revision or fetch waits for its next (backed-off) attempt.
//   Stalled      True when the head cannot be applied without a new commit (validation, render, health gate).
//   Degraded     True while the node serves but not as configured (reals down, drift just repaired).
// A condition's lastTransitionTime moves only when its status changes.

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
