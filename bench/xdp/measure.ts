// Runs inside the bench namespace (see bench.ts). BPF_PROG_TEST_RUN with repeat = 1e6 (kernel-measured
// average ns per run), median of several runs. The program under test is reached through a harness that puts
// the original packet back before every iteration (bench/xdp/restore.c; bench/xdp/snat_vary.c also gives every
// iteration a new client flow), so encapsulating paths see a fresh packet each time; the harness floor is the
// same harness tail-calling an empty XDP program. The path of the measured iterations is checked through each
// program's own counters: every iteration must have taken the path being measured.
//
// With KATRAN_OBJ (built by bench/xdp/run from KATRAN_SRC) Katran's balancer runs beside gitlb on the same
// harness and packets: for each run the floor, gitlb and Katran are measured one after the other (alternating,
// so load on the shared machine hits all three alike), and the medians net of the floor are compared. The GUE
// cases run against KATRAN_GUE_OBJ, Katran built with GUE_ENCAP (its encapsulation is a build-time choice).
import { BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import { loadHarness, measurer, median, runChecked, xdpContextFor, loadavg } from './measure-lib.js';
import { loadKatran, type KatranPeer } from './katran.js';
import { BENCH_REAL_COUNT, benchReal } from './bench-reals.js';
import { CT_ENTRIES, benchState, ring } from './measure-state.js';
import { applyTo } from '../../test/lib/converge.js';

const pinRoot = process.argv[2]!;
const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 1_000_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 7);
const KATRAN_OBJ = process.env.KATRAN_OBJ;
const KATRAN_GUE_OBJ = process.env.KATRAN_GUE_OBJ;
const dp = await openLbDataPlane({ pinRoot });
await applyTo(dp, benchState());
const lb = dp.object()!.program('xdp_lb');
const empty = await BpfObject.load(new URL('../../build/bench/xdp_empty.o', import.meta.url).pathname);
const restoreObj = await BpfObject.load(new URL('../../build/bench/xdp_restore.o', import.meta.url).pathname);
const varyObj = await BpfObject.load(new URL('../../build/bench/xdp_snat_vary.o', import.meta.url).pathname);
const katranSetup = { port: 80, reals: Array.from({ length: BENCH_REAL_COUNT }, (_, i) => benchReal(i)), ring, routerMac: LAB.gwMac, lruSize: CT_ENTRIES };
const katran: KatranPeer | null = KATRAN_OBJ ? await loadKatran(KATRAN_OBJ, { ...katranSetup, vip: '203.0.113.11' }) : null;
// Katran's GUE build: the same reals and ring, the outer source gitlb's lb node uses (its address)
const katranGue: KatranPeer | null = KATRAN_GUE_OBJ
  ? await loadKatran(KATRAN_GUE_OBJ, { ...katranSetup, vip: '203.0.113.13', encapSource: '198.51.100.1' })
  : null;
const ctxFor = xdpContextFor(LAB.lbA.name);
const eth = { dst: LAB.lbA.mac, src: LAB.clientMac };
const pkt = (dst: string, flags: number) => frame(eth, ipPacket({ src: '192.0.2.1', dst, l4: { tcp: { sport: 40000, dport: 80, flags } } }));
const gitlbCounter = async (name: string) => (await dp.counters())[name] as number;

interface Side { prog: BpfProgram; counters: string[]; counter: (n: string) => Promise<number> | number }
interface PeerCase { name: string; data: Buffer; action: number; harness: BpfObject; gitlb: string[]; katran: string[]; gue?: true }
const peerCases: PeerCase[] = [
  { name: 'non-VIP packet', data: pkt('203.0.113.99', TCP_FLAGS.ACK), action: 2, harness: restoreObj,
    gitlb: ['pass_not_vip'], katran: ['pass'] },
  { name: 'VIP, connection-table hit, IPIP', data: pkt('203.0.113.11', TCP_FLAGS.ACK), action: 3, harness: restoreObj,
    gitlb: ['ct_hit', 'tx'], katran: ['ct_hit', 'tx'] },
  // the same 5-tuple's SYN again and again: both programs skip the table lookup for a SYN, pick from the ring and
  // overwrite the flow's entry
  { name: 'VIP SYN on an existing flow, IPIP', data: pkt('203.0.113.11', TCP_FLAGS.SYN), action: 3, harness: restoreObj,
    gitlb: ['ct_miss', 'tx'], katran: ['ct_miss', 'tx'] },
  { name: 'VIP SYN, new flow every packet, IPIP', data: pkt('203.0.113.11', TCP_FLAGS.SYN), action: 3, harness: varyObj,
    gitlb: ['ct_miss', 'tx'], katran: ['ct_miss', 'tx'] },
  // dsr-gue: outer IPv4 + UDP to 6080 (gitlb: UDP checksum 0; Katran's gue_encap_v4 computes one from the inner's)
  { name: 'VIP, connection-table hit, GUE', data: pkt('203.0.113.13', TCP_FLAGS.ACK), action: 3, harness: restoreObj,
    gitlb: ['ct_hit', 'tx'], katran: ['ct_hit', 'tx'], gue: true },
  { name: 'VIP SYN, new flow every packet, GUE', data: pkt('203.0.113.13', TCP_FLAGS.SYN), action: 3, harness: varyObj,
    gitlb: ['ct_miss', 'tx'], katran: ['ct_miss', 'tx'], gue: true },
];
const peerOf = (c: PeerCase) => (c.gue ? katranGue : katran);
const harnessProg = (o: BpfObject) => o.programs()[0]!;
// XDP_BENCH_ONLY=<text>: only the peer cases whose name contains it (case-insensitive), and not the other modes
const ONLY = process.env.XDP_BENCH_ONLY?.toLowerCase();
const cases = ONLY ? peerCases.filter((c) => c.name.toLowerCase().includes(ONLY)) : peerCases;

/** Alternating runs: floor, gitlb, Katran; medians of each and of the net figures. */
async function measureCase(c: PeerCase): Promise<{ floor: number[]; gitlb: number[]; katran: number[] }> {
  const katran = peerOf(c);
  // prime both connection tables for a hit case right before it (on this CPU: Katran's tables are per CPU): a
  // new-flow case before it fills the table with millions of flows and evicts an entry primed earlier
  lb.testRun({ data: c.data, ctxIn: ctxFor(c.data.length) });
  katran?.prog.testRun({ data: c.data, ctxIn: ctxFor(c.data.length) });
  const sides: Array<['floor' | 'gitlb' | 'katran', Side]> = [
    ['floor', { prog: empty.program('xdp_empty'), counters: [], counter: () => 0 }],
    ['gitlb', { prog: lb, counters: c.gitlb, counter: gitlbCounter }],
  ];
  if (katran) sides.push(['katran', { prog: katran.prog, counters: c.katran, counter: (n) => katran.counter(n) }]);
  const out = { floor: [] as number[], gitlb: [] as number[], katran: [] as number[] };
  const ctx = ctxFor(c.data.length);
  for (let r = 0; r < RUNS; r++) {
    for (const [key, side] of sides) {
      loadHarness(c.harness, c.data, side.prog);
      const action = key === 'floor' ? 2 : c.action;
      out[key].push(await runChecked(harnessProg(c.harness), c.data, ctx, action, REPEAT, side.counter, side.counters));
    }
  }
  return out;
}


console.log(`XDP LB, kernel-measured ns/packet: BPF_PROG_TEST_RUN repeat=${REPEAT}, ${RUNS} alternating runs, medians, on CPU 1; load ${loadavg()}`);
console.log(`${'case'.padEnd(38)} ${'floor'.padStart(6)} ${'gitlb'.padStart(7)}${katran ? ` ${'Katran'.padStart(7)} ${'gitlb/Katran'.padStart(12)}` : ''}   (ns net of the floor; raw runs below)`);
let failed = false;
for (const c of cases) {
  try {
    const r = await measureCase(c);
    const floor = median(r.floor);
    const g = median(r.gitlb) - floor;
    const peer = peerOf(c) !== null;
    const k = peer ? median(r.katran) - floor : 0;
    console.log(`${c.name.padEnd(38)} ${String(floor).padStart(6)} ${String(g).padStart(7)}${peer ? ` ${String(k).padStart(7)} ${(g / k).toFixed(2).padStart(12)}` : ''}`);
    console.log(`${''.padEnd(38)} runs: floor ${r.floor.join(' ')} | gitlb ${r.gitlb.join(' ')}${katran ? ` | Katran ${r.katran.join(' ')}` : ''}`);
  } catch (e) {
    failed = true;
    console.log(`${c.name.padEnd(38)} FAILED: ${(e as Error).message}`);
  }
}
// Program sizes: the translated (verifier output) and JITed bytes each program asks the instruction cache to hold.
// The hot function (the program's main function: every path measured above runs in it without a call) beside the
// whole program: the main function and every BPF-to-BPF subprogram it can call (neither program tail-calls).
const kib = (b: number) => (b / 1024).toFixed(1);
const size = (p: BpfProgram) => {
  const i = p.info();
  const main = i.funcs[0] ?? { xlatedBytes: i.xlatedBytes, jitedBytes: i.jitedBytes };
  const subs = Math.max(0, i.funcs.length - 1);
  return `hot function ${kib(main.xlatedBytes)} KiB translated, ${kib(main.jitedBytes)} KiB JITed; ` +
    `everything it can call (main + ${subs} subprogram${subs === 1 ? '' : 's'}) ${kib(i.xlatedBytes)} KiB translated, ${kib(i.jitedBytes)} KiB JITed`;
};
console.log(`load at the end of the peer cases: ${loadavg()}`);
console.log(`program size: gitlb xdp_lb: ${size(lb)}`);
if (katran) console.log(`              Katran balancer: ${size(katran.prog)}`);
if (katranGue) console.log(`              Katran balancer (GUE_ENCAP): ${size(katranGue.prog)}`);
if (!katran) console.log('(no Katran column: set KATRAN_SRC to a checkout of Katran\'s repository to run it beside gitlb)');
else console.log('Katran: balancer.bpf.c from KATRAN_SRC, its build flags, new-connection rate guard off (MAX_CONN_RATE raised) so both insert every SYN;');
if (katran) console.log('        maps as KatranLb fills them: per-CPU LRU tables (65536 entries in total, as gitlb\'s table), 100 IPIP reals, one VIP.');
if (katranGue) console.log('        GUE cases: Katran built with -DGUE_ENCAP (GUE to 6080, its outer source in pckt_srcs), the same reals and ring.');

// gitlb's other forwarding modes (no peer)
const { measure } = measurer({ runs: RUNS, ctxFor, counter: gitlbCounter });
const others = ONLY ? [] : [
  { name: 'dsr-l2 connection-table hit', data: pkt('203.0.113.10', TCP_FLAGS.ACK), counter: ['ct_hit', 'tx'] },
  { name: 'dsr-l2 SYN (ring + ct insert)', data: pkt('203.0.113.10', TCP_FLAGS.SYN), counter: ['ct_miss', 'tx'] },
  { name: 'dsr-ipopt SYN (ring + ct insert + option)', data: pkt('203.0.113.12', TCP_FLAGS.SYN), counter: ['ct_miss', 'tx'] },
];
for (const p of others) lb.testRun({ data: p.data, ctxIn: ctxFor(p.data.length) });
if (others.length) {
  loadHarness(restoreObj, others[0]!.data, empty.program('xdp_empty'));
  const floor = await measure(harnessProg(restoreObj), others[0]!.data, 2, REPEAT);
  console.log(`\ngitlb's other modes (restore harness, floor ${floor.ns} ns)`);
  for (const p of others) {
    try {
      loadHarness(restoreObj, p.data, lb);
      const h = await measure(harnessProg(restoreObj), p.data, 3, REPEAT, p.counter);
      console.log(`${p.name.padEnd(42)} ${String(h.ns - floor.ns).padStart(7)} ns net   runs ${h.runs.join(' ')}`);
    } catch (e) {
      failed = true;
      console.log(`${p.name.padEnd(42)} FAILED: ${(e as Error).message}`);
    }
  }
}
katran?.close();
katranGue?.close();
restoreObj.close();
varyObj.close();
empty.close();
dp.close();
if (failed) process.exitCode = 1;
