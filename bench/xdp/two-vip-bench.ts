// The data plane of the per-feature XDP benches (capture.ts, real-stats.ts): one dsr-l2 VIP on one real and one
// dsr-ipip VIP over the bench's 100-real ring, applied under `pinRoot`, with the max_entries of every pinned map so
// another build of xdp_lb can be loaded over exactly the same maps and measured beside it.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, type BpfProgram } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { makeState } from '../../test/lib/lb-state.js';
import { applyTo } from '../../test/lib/converge.js';
import { BENCH_REAL_COUNT, benchReal, benchRing } from './bench-reals.js';

export async function twoVipBench(pinRoot: string): Promise<{
  dp: Awaited<ReturnType<typeof openLbDataPlane>>; program: BpfProgram; mapMaxEntries: Record<string, number>;
}> {
  const reals = Object.fromEntries(Array.from({ length: BENCH_REAL_COUNT }, (_, i) => [i + 1, benchReal(i)]));
  const state = makeState({
    reals, addresses: ['198.51.100.1'], hashSeed: 1, conntrackMaxEntries: 65536,
    services: [
      { id: 1, vip: '203.0.113.10', forwarding: 'dsr-l2', ring: new Uint32Array(65537).fill(1) },
      { id: 2, vip: '203.0.113.11', forwarding: 'dsr-ipip', ring: benchRing() },
    ],
  });
  const dp = await openLbDataPlane({ pinRoot });
  await applyTo(dp, state);
  const mapMaxEntries: Record<string, number> = {};
  for (const name of readdirSync(pinRoot)) {
    try {
      const m = BpfMap.open(join(pinRoot, name));
      mapMaxEntries[name] = m.maxEntries;
      m.close();
    } catch {
      /* a link or program pin, not a map */
    }
  }
  return { dp, program: dp.object()!.program('xdp_lb'), mapMaxEntries };
}
