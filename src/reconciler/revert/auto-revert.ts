// Auto-revert: the policy (which failed revisions a node may revert) and the act (push a `git revert` of the branch
// tip through ./rollback.ts). Only a revision whose own content is bad (validate, render, health gate) is reverted,
// only by lb nodes (backends would race them with less information: they run no health gate), only under
// `Cluster.spec.rollback.policy: auto`, and never a revert. docs/reconciler.md.
import type { ConfigModel } from '../../render/model.js';
import { readCommitInfo } from '../source/git-objects.js';
import type { FailureStage } from '../status/status-doc.js';
import { errorText, type NodeState } from '../state/node-state.js';
import { isRevertMessage, pushAutoRevert, type RevertOutcome } from './rollback.js';
import { reactionTo, type ErrorCode } from '../../errors.js';


/** The policy in force: the last good config's, or the failing revision's when nothing was applied yet. */
function rollbackPolicy(s: NodeState, failingModel: ConfigModel | null): 'auto' | 'manual' {
  return (s.appliedModel ?? failingModel)?.cluster.spec.rollback.policy ?? 'manual';
}

/**
 * Whether this node answers a revision that failed with `code` with an automatic revert: only when the code says the
 * revision's own content is at fault (class input: ConfigInvalid, RenderFailed, HealthGateFailed; src/errors.ts).
 */
export function shouldAutoRevert(s: NodeState, code: ErrorCode, model: ConfigModel | null): boolean {
  return reactionTo(code).revert && s.role(model) === 'lb' && rollbackPolicy(s, model) === 'auto';
}

/** Pushes a revert of `head` (the branch tip) unless it is itself a revert; counted and logged either way. */
export async function autoRevert(s: NodeState, head: string, stage: FailureStage, reason: string): Promise<RevertOutcome> {
  let outcome: RevertOutcome;
  try {
    const info = await readCommitInfo(s.o.remote.gitdir, head);
    if (isRevertMessage(info.message)) outcome = { pushed: false, why: 'never revert a revert' };
    else
      outcome = await pushAutoRevert({
        remote: s.o.remote,
        branch: s.o.branch,
        bad: head,
        lastGood: s.applied,
        reason: `${stage}: ${reason}`,
        node: s.o.node,
        now: s.clock(),
        signer: s.o.signer,
      });
  } catch (err) {
    outcome = { pushed: false, why: `revert failed: ${errorText(err)}` };
  }
  if (outcome.pushed) {
    s.counters.rollbacksPushed++;
    s.log.warn(`pushed automatic revert ${outcome.commit.slice(0, 12)} of ${head.slice(0, 12)}`);
  } else s.log.info(`no automatic revert of ${head.slice(0, 12)}: ${outcome.why}`);
  return outcome;
}
