// Runs inside the SNAT bench namespace (see snat-bench.ts). Method as bench/xdp/measure.ts: BPF_PROG_TEST_RUN
// with `repeat`, kernel-measured average ns per run, median of several runs; paths that rewrite the packet go
// through a harness that restores it before every iteration (bench/xdp/restore.c), new translations through
// one that also gives every iteration a new client flow (bench/xdp/snat_vary.c). Each path is checked: the
// action of the measured iterations and a counter that must move by exactly `repeat`.
import { BpfObject } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { SNAT_MAPS, listSnat } from '../../src/bpf/dataplane/snat.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import type { BpfProgram } from '../../src/bpf/libbpf.js';
import { loadHarness, measurer, median, runChecked, xdpContextFor, loadavg } from './measure-lib.js';
import { BENCH_CLIENT, BENCH_IPIP_VIP, BENCH_VIP, benchRealMac, BENCH_REALS, benchState } from './snat-measure-state.js';
import { applyTo } from '../../test/lib/converge.js';

const pinRoot = process.argv[2]!;
const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 1_000_000);
const NEW_REPEAT = Number(process.env.XDP_BENCH_NEW_REPEAT ?? 20_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 5);

const dp = await openLbDataPlane({ pinRoot });
await applyTo(dp, benchState());
const obj = dp.object()!;
const lb = obj.program('xdp_lb');
const empty = await BpfObject.load(new URL('../../build/bench/xdp_empty.o', import.meta.url).pathname);
const restoreObj = await BpfObject.load(new URL('../../build/bench/xdp_restore.o', import.meta.url).pathname);
const varyObj = await BpfObject.load(new URL('../../build/bench/xdp_snat_vary.o', import.meta.url).pathname);
const ctxFor = xdpContextFor(LAB.lbA.name);
const fromClient = (dst: string, flags: number, sport = 40000) =>
  frame({ dst: LAB.lbA.mac, src: LAB.clientMac }, ipPacket({ src: BENCH_CLIENT, dst, l4: { tcp: { sport, dport: 80, flags } } }));

const counter = async (name: string) => ((await dp.counters())[name] as number | undefined) ?? 0;
function clearNat(): void {
  for (const name of [SNAT_MAPS.rev, SNAT_MAPS.fwd]) {
    const m = obj.map(name);
    for (const k of m.keys()) m.delete(k);
  }
}

const { measure } = measurer({ runs: RUNS, ctxFor, counter });
const harness = loadHarness;

// prime one translation; its reply is the reverse-path packet
const ack = fromClient(BENCH_VIP, TCP_FLAGS.ACK);
const primed = lb.testRun({ data: ack, ctxIn: ctxFor(ack.length) });
if (primed.retval !== 3) throw new Error(`priming returned ${primed.retval}`);
const t = listSnat(obj).find((x) => x.rev.clientPort === 40000)!;
const realIdx = BENCH_REALS.indexOf(t.key.real);
const reply = frame({ dst: LAB.lbA.mac, src: benchRealMac(realIdx) },
  ipPacket({ src: t.key.real, dst: LAB.lbA.v4, l4: { tcp: { sport: t.key.realPort, dport: t.key.snatPort, flags: TCP_FLAGS.ACK } } }));
const notVip = fromClient('203.0.113.99', TCP_FLAGS.ACK);

harness(varyObj, notVip, empty.program('xdp_empty'));
const varyFloor = await measure(varyObj.program('xdp_snat_vary'), notVip, 2, NEW_REPEAT);

// The per-packet paths, alternating run by run (floor, dsr-ipip hit, SNAT forward hit, SNAT reply), so load on the
// shared machine hits them alike; the dsr-ipip connection-table hit is the DSR path's figure of the same run.
const ipipAck = fromClient(BENCH_IPIP_VIP, TCP_FLAGS.ACK);
lb.testRun({ data: ipipAck, ctxIn: ctxFor(ipipAck.length) }); // its connection-table entry
interface Alt { name: string; data: Buffer; target: BpfProgram; action: number; counters: string[]; runs: number[] }
const alts: Alt[] = [
  { name: 'harness floor (restore + empty program)', data: notVip, target: empty.program('xdp_empty'), action: 2, counters: [], runs: [] },
  { name: 'dsr-ipip, connection-table hit (comparison)', data: ipipAck, target: lb, action: 3, counters: ['ct_hit'], runs: [] },
  { name: 'snat forward, translation hit', data: ack, target: lb, action: 3, counters: ['snat_hit'], runs: [] },
  { name: 'snat reverse, reply translated to the client', data: reply, target: lb, action: 3, counters: ['snat_reply'], runs: [] },
];
let failed = false;
try {
  for (let r = 0; r < RUNS; r++) {
    for (const a of alts) {
      harness(restoreObj, a.data, a.target);
      a.runs.push(await runChecked(restoreObj.program('xdp_restore'), a.data, ctxFor(a.data.length), a.action, REPEAT, counter, a.counters));
    }
  }
} catch (e) {
  failed = true;
  console.log(`alternating runs FAILED: ${(e as Error).message}`);
}
const floorNs = median(alts[0]!.runs);

console.log(`XDP LB SNAT, kernel-measured ns/packet: BPF_PROG_TEST_RUN, median of ${RUNS} runs, on CPU 1; load average ${loadavg()}`);
console.log(`harness floors: restore ${floorNs} ns; restore + new flow ${varyFloor.ns} ns (runs ${varyFloor.runs.join(' ')})`);
console.log(`${'path'.padEnd(52)} ${'repeat'.padStart(8)} ${'ns/pkt'.padStart(7)} ${'minus floor'.padStart(12)}   runs (ns)`);
for (const a of alts.slice(1)) {
  if (a.runs.length < RUNS) continue;
  const ns = median(a.runs);
  console.log(`${a.name.padEnd(52)} ${String(REPEAT).padStart(8)} ${String(ns).padStart(7)} ${String(ns - floorNs).padStart(12)}   ${a.runs.join(' ')}`);
}
const paths: Array<{ name: string; run: () => Promise<{ ns: number; runs: number[] }>; floor: number; repeat: number }> = [
  { name: 'non-VIP pass with SNAT configured (direct)', floor: 0, repeat: REPEAT,
    run: () => measure(lb, notVip, 2, REPEAT, 'pass_not_vip') },
  { name: 'snat forward, new translation (port + 2 inserts)', floor: varyFloor.ns, repeat: NEW_REPEAT,
    run: () => { harness(varyObj, fromClient(BENCH_VIP, TCP_FLAGS.SYN), lb);
      return measure(varyObj.program('xdp_snat_vary'), fromClient(BENCH_VIP, TCP_FLAGS.SYN), 3, NEW_REPEAT, 'snat_new', clearNat); } },
];
for (const p of paths) {
  try {
    const r = await p.run();
    console.log(`${p.name.padEnd(52)} ${String(p.repeat).padStart(8)} ${String(r.ns).padStart(7)} ${(p.floor ? String(r.ns - p.floor) : '-').padStart(12)}   ${r.runs.join(' ')}`);
  } catch (e) {
    failed = true;
    console.log(`${p.name.padEnd(52)} FAILED: ${(e as Error).message}`);
  }
}
restoreObj.close();
varyObj.close();
empty.close();
dp.close();
if (failed) process.exitCode = 1;
