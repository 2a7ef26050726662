// Decommission by config: a revision that validates but no longer names this node removes its data plane (the
// composition root's teardown: VIPs, pins, attachments), writes a final status (every condition Decommissioned)
// and is never reverted: every other node applies the same revision. A later revision naming the node again
// reopens the data plane (recommission) and applies normally. `gitlb down` (./node-down.ts) is the manual way.
// docs/reconciler.md, "Decommission".
import { GitlbError } from '../../errors.js';
import type { ConfigModel } from '../../render/model.js';
import { errorText, type NodeState } from '../state/node-state.js';

/** Tears the data plane down and records the decommission; false when `head` was already decommissioned. */
export async function decommission(s: NodeState, head: string, model: ConfigModel): Promise<boolean> {
  if (s.decommissioned === head) return false;
  s.log.warn(`revision ${head.slice(0, 12)} no longer names node '${s.o.node}': decommissioning`);
  await s.dpLock.run(async () => {
    s.dp.close();
    if (s.o.teardown) {
      try {
        await s.o.teardown();
      } catch (err) {
        s.log.warn(`decommission teardown incomplete: ${errorText(err)}`);
      }
    }
    s.liveModel = null;
    s.kernel = null;
  });
  s.decommissionedRole = s.appliedDesired?.role ?? s.role(s.appliedModel);
  s.decommissioned = head;
  s.adopting = false;
  s.applied = head;
  s.appliedAt = s.clock().toISOString();
  s.appliedModel = model;
  s.appliedDesired = null;
  s.lastServices = [];
  s.warnings = [];
  s.lastAttempt = s.attempt(head, 'decommissioned');
  s.conditions.decommissioned(`node '${s.o.node}' is not named by ${head.slice(0, 12)}; data plane removed`);
  return true;
}

/** A later revision names this node again: reopen the data plane so the apply that follows rebuilds it. */
export async function recommission(s: NodeState): Promise<void> {
  s.log.info(`node '${s.o.node}' is named again: rebuilding its data plane`);
  if (!s.o.reopenDataPlane) throw new GitlbError('DataPlaneRefused', 'cannot rebuild the data plane after a decommission in this process; restart gitlb run');
  s.dp = await s.o.reopenDataPlane();
  s.decommissioned = null;
  s.decommissionedRole = null;
  s.applied = null;
  s.appliedModel = null;
}
