// Drift repair: compare the kernel with the applied revision's desired state (converge's read-only half, `diff`)
// and, on a difference, reopen the data plane and converge back to it, counting the repair and saying so in the
// status (Degraded=True/DriftRepaired until the next clean check). Runs on the revision loop's runner, under the
// data-plane lock. docs/reconciler.md, "Drift".
import type { ApplyReport } from '../../bpf/dataplane/index.js';
import { describeOp } from '../../render/ops-text.js';
import type { NodeState } from '../state/node-state.js';

export interface DriftResult {
  differences: string[];
  report?: ApplyReport;
}

/** Drift check: compare the kernel with the applied revision's desired state; repair and count differences. */
export async function checkDrift(s: NodeState): Promise<DriftResult> {
  const r = await s.dpLock.run(() => checkDriftLocked(s));
  if (r.why) s.publish(r.why);
  return { differences: r.differences, ...(r.report && { report: r.report }) };
}

async function checkDriftLocked(s: NodeState): Promise<DriftResult & { why?: string }> {
  const desired = s.appliedDesired;
  if (!desired || s.decommissioned || s.liveModel !== s.appliedModel) return { differences: [] };
  // every check reads what it can compare cheaply (settings, reals, listeners, each ring's identity) and the
  // contents of the rings due in this turn of the slow rotation (docs/reconciler.md, "Drift"); converge's memo
  // spares an idle node's check the planning (see LiveMemo)
  const { ops } = await s.converger.diff(s.dp, desired, { verifyTurn: s.counters.driftChecks++ });
  const differences = ops.map(describeOp);
  if (!differences.length) {
    const was = s.driftRepaired;
    s.driftRepaired = null;
    return { differences: [], ...(was && { why: 'no drift' }) };
  }
  if (s.o.reopenDataPlane) {
    s.dp.close();
    s.dp = await s.o.reopenDataPlane();
  }
  const done = await s.convergeTo(s.appliedModel!, desired);
  const report = done.report;
  s.countReport(report);
  const left = done.left.map(describeOp);
  if (left.length) {
    s.driftRepaired = `${left.length} differences not repaired: ${left.slice(0, 3).join('; ')}`;
    s.log.warn(`drift not repaired (${left.length} differences left): ${left.slice(0, 3).join('; ')}`);
    return { differences, report, why: `drift not repaired: ${left.length} differences` };
  }
  s.counters.driftRepairs++;
  s.driftRepaired = `repaired ${differences.length} differences: ${differences.slice(0, 3).join('; ')}`;
  s.log.warn(`drift repaired (${differences.length} differences): ${differences.slice(0, 3).join('; ')}`,
    { stage: 'drift', count: differences.length, mapWrites: report.mapWrites });
  s.servicesFrom(done.live, desired);
  return { differences, report, why: `drift repaired: ${differences.length} differences` };
}
