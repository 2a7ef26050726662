// bench/xdp/snat-variants-run: runs inside the SNAT bench namespace (snat-bench.ts with
// SNAT_BENCH_MEASURE=snat-variants.ts): the SNAT per-packet paths of xdp_lb as built and of other builds of it
// (argv: object paths), loaded over the same pinned maps and measured alternately in one run on the same harness
// and packets: what one change costs or saves.
import { basename, join } from 'node:path';
import { BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { listSnat } from '../../src/bpf/dataplane/snat.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import { applyTo } from '../../test/lib/converge.js';
import { median, pinnedMapSizes, runChecked, loadHarness, xdpContextFor, loadBuildOver, loadavg } from './measure-lib.js';
import { BENCH_CLIENT, BENCH_IPIP_VIP, BENCH_VIP, benchRealMac, BENCH_REALS, benchState } from './snat-measure-state.js';

const pinRoot = process.argv[2]!;
const variantPaths = process.argv.slice(3);
const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 1_000_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 7);

const dp = await openLbDataPlane({ pinRoot });
await applyTo(dp, benchState());
const mapMaxEntries = pinnedMapSizes(pinRoot);
const obj = dp.object()!;
const builds: Array<{ name: string; prog: BpfProgram }> = [{ name: 'as built', prog: obj.program('xdp_lb') }];
for (const p of variantPaths) {
  // a scratch map of another layout (nothing in it outlives a packet) is the build's own; a state map of another
  // layout would leave the build an empty table, which the path checks below refuse
  const v = await loadBuildOver(p, pinRoot, mapMaxEntries);
  builds.push({ name: basename(p, '.o'), prog: v.program('xdp_lb') });
}
const load = (name: string) => BpfObject.load(new URL(`../../build/bench/${name}.o`, import.meta.url).pathname);
const empty = await load('xdp_empty');
const restoreObj = await load('xdp_restore');
const ctxFor = xdpContextFor(LAB.lbA.name);
const counter = async (name: string) => ((await dp.counters())[name] as number | undefined) ?? 0;
const fromClient = (dst: string) =>
  frame({ dst: LAB.lbA.mac, src: LAB.clientMac }, ipPacket({ src: BENCH_CLIENT, dst, l4: { tcp: { sport: 40000, dport: 80, flags: TCP_FLAGS.ACK } } }));
const ack = fromClient(BENCH_VIP);
const ipipAck = fromClient(BENCH_IPIP_VIP);
for (const d of [ack, ipipAck]) {
  const r = builds[0]!.prog.testRun({ data: d, ctxIn: ctxFor(d.length) });
  if (r.retval !== 3) throw new Error(`priming returned ${r.retval}`);
}
const t = listSnat(obj).find((x) => x.rev.clientPort === 40000)!;
const reply = frame({ dst: LAB.lbA.mac, src: benchRealMac(BENCH_REALS.indexOf(t.key.real)) },
  ipPacket({ src: t.key.real, dst: LAB.lbA.v4, l4: { tcp: { sport: t.key.realPort, dport: t.key.snatPort, flags: TCP_FLAGS.ACK } } }));
const cases = [
  { name: 'dsr-ipip connection-table hit', data: ipipAck, counters: ['ct_hit'] },
  { name: 'snat forward, translation hit', data: ack, counters: ['snat_hit'] },
  { name: 'snat reverse, reply translated', data: reply, counters: ['snat_reply'] },
];
const load0 = loadavg();
console.log(`SNAT variants: BPF_PROG_TEST_RUN repeat=${REPEAT}, ${RUNS} alternating runs, medians net of the floor, CPU 1; load ${load0}`);
console.log(`${'case'.padEnd(32)} ${'floor'.padStart(6)} ${builds.map((b) => b.name.slice(0, 14).padStart(15)).join('')}`);
const harness = restoreObj.programs()[0]!;
let failed = false;
for (const c of cases) {
  try {
    const floor: number[] = [];
    const runs = builds.map(() => [] as number[]);
    const ctx = ctxFor(c.data.length);
    for (let r = 0; r < RUNS; r++) {
      loadHarness(restoreObj, c.data, empty.program('xdp_empty'));
      floor.push(await runChecked(harness, c.data, ctx, 2, REPEAT, counter, []));
      for (const [i, b] of builds.entries()) {
        loadHarness(restoreObj, c.data, b.prog);
        runs[i]!.push(await runChecked(harness, c.data, ctx, 3, REPEAT, counter, c.counters));
      }
    }
    const f = median(floor);
    console.log(`${c.name.padEnd(32)} ${String(f).padStart(6)} ${runs.map((x) => String(median(x) - f).padStart(15)).join('')}`);
    console.log(`   runs: floor ${floor.join(' ')} | ${runs.map((x, i) => `${builds[i]!.name}: ${x.join(' ')}`).join(' | ')}`);
  } catch (e) {
    failed = true;
    console.log(`${c.name.padEnd(32)} FAILED: ${(e as Error).message}`);
  }
}
console.log(`load at the end: ${loadavg()}`);
dp.close();
process.exitCode = failed ? 1 : 0;
