// Tests, runners and benchmarks drive a data plane the way the reconciler does: through converge
// (src/reconciler/converge.ts), the planner's only runtime caller. These two name what the old adapter methods did.
import { converge, diff } from '../../src/reconciler/converge.js';
import type { ApplyReport, DataPlane, LiveSource } from '../../src/bpf/dataplane/types.js';
import type { Op } from '../../src/render/ops.js';
import { describeOp } from '../../src/render/ops-text.js';
import type { DesiredState } from '../../src/render/state.js';

/** The ops converge would execute to take `source` to `desired` (validated; nothing written). */
export async function planOf(source: LiveSource, desired: DesiredState): Promise<Op[]> {
  return (await diff(source, desired)).ops;
}

/** Converges `dp` to `desired` and returns the execute's report; throws when the read-back still finds work. */
export async function applyTo(dp: DataPlane, desired: DesiredState): Promise<ApplyReport> {
  const done = await converge(dp, desired);
  if (done.left.length) throw new Error(`not converged: ${done.left.length} ops left, ${done.left.slice(0, 3).map(describeOp).join('; ')}`);
  return done.report;
}
