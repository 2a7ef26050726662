// Runs inside the bench namespace (see bench.ts). BPF_PROG_TEST_RUN with repeat = 1e6 (kernel-measured
// average ns per run), median of several runs. The program under test is reached through bench/xdp/restore.c,
// which puts the original packet back before every iteration (so encapsulating paths see a fresh packet each
// time) and tail-calls it; the harness floor is the same harness tail-calling an empty XDP program. The action
// of the measured iterations is checked through the LB's own counters: every iteration must have taken the
// path being measured. For paths that leave the packet re-runnable as is (non-VIP, dsr-l2) the direct
// figure without the harness is printed too.
import { BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { makeState } from '../../test/lib/lb-state.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import { loadHarness, measurer, xdpContextFor } from './measure-lib.js';

const pinRoot = process.argv[2]!;
const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 1_000_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 5);
const ring = (id: number) => Array.from({ length: 65537 }, () => id);
const state = makeState({
  reals: { 1: '198.51.100.11', 2: '198.51.100.12' }, addresses: ['198.51.100.1'], hashSeed: 1, conntrackMaxEntries: 65536,
  services: [
    { id: 1, vip: '203.0.113.10', forwarding: 'dsr-l2', ring: ring(1) },
    { id: 2, vip: '203.0.113.11', forwarding: 'dsr-ipip', ring: ring(2) },
    { id: 3, vip: '203.0.113.12', forwarding: 'dsr-ipopt', ring: ring(1), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] },
  ],
});

const dp = await openLbDataPlane({ pinRoot });
await dp.apply(state);
const lb = dp.object()!.program('xdp_lb');
const empty = await BpfObject.load(new URL('../../build/bench/xdp_empty.o', import.meta.url).pathname);
const harness = await BpfObject.load(new URL('../../build/bench/xdp_restore.o', import.meta.url).pathname);
const restore = harness.program('xdp_restore');
const ctxFor = xdpContextFor(LAB.lbA.name);
const eth = { dst: LAB.lbA.mac, src: LAB.clientMac };
const pkt = (dst: string, flags: number) => frame(eth, ipPacket({ src: '192.0.2.1', dst, l4: { tcp: { sport: 40000, dport: 80, flags } } }));

interface Path { name: string; data: Buffer; action: number; counter: string; direct: boolean; katran: string }
const paths: Path[] = [
  { name: 'non-VIP pass', data: pkt('203.0.113.99', TCP_FLAGS.ACK), action: 2, counter: 'pass_not_vip', direct: true, katran: '73' },
  { name: 'dsr-l2 connection-table hit', data: pkt('203.0.113.10', TCP_FLAGS.ACK), action: 3, counter: 'ct_hit', direct: true, katran: '140-160' },
  { name: 'dsr-l2 SYN (ring + ct insert)', data: pkt('203.0.113.10', TCP_FLAGS.SYN), action: 3, counter: 'ct_miss', direct: true, katran: '~300' },
  { name: 'dsr-ipip connection-table hit + encap', data: pkt('203.0.113.11', TCP_FLAGS.ACK), action: 3, counter: 'ct_hit', direct: false, katran: '140-160' },
  { name: 'dsr-ipip SYN (ring + ct insert + encap)', data: pkt('203.0.113.11', TCP_FLAGS.SYN), action: 3, counter: 'ct_miss', direct: false, katran: '~300' },
  { name: 'dsr-ipopt SYN (ring + ct insert + option)', data: pkt('203.0.113.12', TCP_FLAGS.SYN), action: 3, counter: 'ct_miss', direct: false, katran: '~300' },
];

const counter = async (name: string) => (await dp.counters())[name] as number;
const bench = measurer({ runs: RUNS, ctxFor, counter });
const measure = (prog: BpfProgram, data: Buffer, action: number, counterName?: string) =>
  bench.measure(prog, data, action, REPEAT, counterName);
const harnessFor = (data: Buffer, target: BpfProgram) => loadHarness(harness, data, target);

// prime the connection table for the hit paths
for (const p of paths) lb.testRun({ data: p.data, ctxIn: ctxFor(p.data.length) });

harnessFor(paths[0]!.data, empty.program('xdp_empty'));
const floor = await measure(restore, paths[0]!.data, 2);
const bare = await measure(empty.program('xdp_empty'), paths[0]!.data, 2);

console.log(`XDP LB, kernel-measured ns/packet: BPF_PROG_TEST_RUN repeat=${REPEAT}, median of ${RUNS} runs, on CPU 1`);
console.log(`harness floor: ${floor.ns} ns (restore + tail call to an empty program; runs ${floor.runs.join(' ')}); empty program alone: ${bare.ns} ns`);
console.log(`${'path'.padEnd(42)} ${'ns/pkt'.padStart(7)} ${'minus floor'.padStart(12)} ${'direct'.padStart(7)}   runs (ns)                 Katran`);
let failed = false;
for (const p of paths) {
  try {
    harnessFor(p.data, lb);
    const h = await measure(restore, p.data, p.action, p.counter);
    const d = p.direct ? String((await measure(lb, p.data, p.action, p.counter)).ns) : '-';
    console.log(`${p.name.padEnd(42)} ${String(h.ns).padStart(7)} ${String(h.ns - floor.ns).padStart(12)} ${d.padStart(7)}   ${h.runs.join(' ').padEnd(25)} ${p.katran}`);
  } catch (e) {
    failed = true;
    console.log(`${p.name.padEnd(42)} FAILED: ${(e as Error).message}`);
  }
}
console.log('Katran reference (same machine, packet restored every iteration, ~26 ns floor included):');
console.log('  ~140-160 ns connection-table hit, ~300 ns SYN inserting into its table, 73 ns non-VIP.');
harness.close();
empty.close();
dp.close();
if (failed) process.exitCode = 1;
