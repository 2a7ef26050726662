// One packet through a loaded lb data plane's xdp_lb (BPF_PROG_TEST_RUN), and what its counters say about it.
import type { LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { encodeU32 } from '../../src/bpf/dataplane/codec.js';

type Counters = Awaited<ReturnType<LbDataPlaneHandle['counters']>>;
type Traffic = { packets?: number; newFlows?: number };

/**
 * Runs `data` through xdp_lb and returns the counters that moved: each global counter by its increase, and each
 * per-service / per-real entry (`service:<id>`, `real:<id>`) by its new flows, or 1 when only its packets moved.
 */
export async function runMoved(dp: LbDataPlaneHandle, data: Buffer): Promise<Record<string, number>> {
  const before: Counters = await dp.counters();
  dp.object()!.program('xdp_lb').testRun({ data, ctxIn: Buffer.concat([Buffer.alloc(4), encodeU32(data.length), Buffer.alloc(16)]) });
  const after: Counters = await dp.counters();
  const moved: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) {
    const was = before[k];
    if (typeof v === 'number') {
      if (v !== was) moved[k] = v - ((was as number | undefined) ?? 0);
      continue;
    }
    const now = v as Traffic;
    const old = (was ?? {}) as Traffic;
    const flows = (now.newFlows ?? 0) - (old.newFlows ?? 0);
    if (flows) moved[k] = flows;
    else if ((now.packets ?? 0) !== (old.packets ?? 0)) moved[k] = 1;
  }
  return moved;
}
