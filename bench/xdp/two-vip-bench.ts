// The data plane of the per-feature XDP benches (capture.ts, real-stats.ts): one dsr-l2 VIP on one real and one
// dsr-ipip VIP over the bench's 100-real ring, applied under `pinRoot`, with the max_entries of every pinned map so
// another build of xdp_lb can be loaded over exactly the same maps and measured beside it.
import { BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { makeState } from '../../test/lib/lb-state.js';
import { applyTo } from '../../test/lib/converge.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import { BENCH_REAL_COUNT, benchReal, benchRing } from './bench-reals.js';
import { pinnedMapSizes, xdpContextFor } from './measure-lib.js';

/** A measured case: the frame, the harness that replays it (restore: the same frame; vary: a new flow each time),
 * and the counters every iteration must move. */
export interface TwoVipCase { name: string; data: Buffer; harness: BpfObject; counters: string[] }

export async function twoVipBench(pinRoot: string): Promise<{
  dp: Awaited<ReturnType<typeof openLbDataPlane>>; program: BpfProgram; mapMaxEntries: Record<string, number>;
  /** The harness floor (an empty XDP program) and the two harnesses. */
  empty: BpfObject; restoreObj: BpfObject; varyObj: BpfObject;
  ctxFor: (len: number) => Buffer; counter: (name: string) => Promise<number>; cases: TwoVipCase[];
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
  const mapMaxEntries = pinnedMapSizes(pinRoot);
  const program = dp.object()!.program('xdp_lb');
  const load = (name: string) => BpfObject.load(new URL(`../../build/bench/${name}.o`, import.meta.url).pathname);
  const [empty, restoreObj, varyObj] = [await load('xdp_empty'), await load('xdp_restore'), await load('xdp_snat_vary')];
  const ctxFor = xdpContextFor(LAB.lbA.name);
  const eth = { dst: LAB.lbA.mac, src: LAB.clientMac };
  const pkt = (dst: string, flags: number) => frame(eth, ipPacket({ src: '192.0.2.1', dst, l4: { tcp: { sport: 40000, dport: 80, flags } } }));
  const counter = async (name: string) => (await dp.counters())[name] as number;
  const cases: TwoVipCase[] = [
    { name: 'dsr-l2 connection-table hit', data: pkt('203.0.113.10', TCP_FLAGS.ACK), harness: restoreObj, counters: ['ct_hit', 'tx'] },
    { name: 'dsr-ipip connection-table hit', data: pkt('203.0.113.11', TCP_FLAGS.ACK), harness: restoreObj, counters: ['ct_hit', 'tx'] },
    { name: 'dsr-ipip SYN, new flow every packet', data: pkt('203.0.113.11', TCP_FLAGS.SYN), harness: varyObj, counters: ['ct_miss', 'tx'] },
  ];
  // the hit cases find their flow in the connection table
  for (const c of cases) program.testRun({ data: c.data, ctxIn: ctxFor(c.data.length) });
  return { dp, program, mapMaxEntries, empty, restoreObj, varyObj, ctxFor, counter, cases };
}
