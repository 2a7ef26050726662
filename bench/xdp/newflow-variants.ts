// bench/xdp/newflow-variants-run: runs inside the XDP bench namespace (bench.ts with XDP_BENCH_MEASURE): the SYN paths
// (a new flow every packet, IPIP and GUE; a SYN on an existing flow) of xdp_lb as built and of other builds of it
// (argv: object paths, e.g. xdp_lb.c with a -D of a throw-away experiment), loaded over the same pinned maps, with
// Katran beside them when bench/xdp/run's KATRAN_OBJ/KATRAN_GUE_OBJ are set; every run measures the floor, each
// build and Katran one after the other on the same harness and packets: what one change to the new-flow path costs.
import { basename } from 'node:path';
import { BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import { applyTo } from '../../test/lib/converge.js';
import { median, pinnedMapSizes, runChecked, loadHarness, xdpContextFor, loadBuildOver, loadavg } from './measure-lib.js';
import { loadKatran, type KatranPeer } from './katran.js';
import { BENCH_REAL_COUNT, benchReal } from './bench-reals.js';
import { CT_ENTRIES, benchState, ring } from './measure-state.js';
import { createRing, readRing, ringIdentities, ringsArePacked } from '../../src/bpf/dataplane/rings.js';
import { encodeU32 } from '../../src/bpf/dataplane/codec.js';
import { setWordSlotRings } from '../../test/lib/old-rings.js';

const pinRoot = process.argv[2]!;
const variantPaths = process.argv.slice(3);
const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 1_000_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 9);

const dp = await openLbDataPlane({ pinRoot });
await applyTo(dp, benchState());
const mapMaxEntries = pinnedMapSizes(pinRoot);
const builds: Array<{ name: string; prog: BpfProgram }> = [{ name: 'as built', prog: dp.object()!.program('xdp_lb') }];
// the rings as built, read back (slots + 1) for builds of another ring layout (e.g. the word-per-element layout
// before rings of blocks, lb_maps.h): loading such a build replaces the lb_rings pin with an empty one of its
// layout (and a later build of this layout then finds that one and replaces it again); the same rings are filled
// into each empty one, in its layout, so every build picks the same reals
const builtRings = ringIdentities(dp.object()!.map('lb_rings')).map(([id]) => {
  const inner = dp.object()!.map('lb_rings').openInner(encodeU32(id))!;
  try { return { id, ring: readRing(inner) }; } finally { inner.close(); }
});
for (const p of variantPaths) {
  const v = await loadBuildOver(p, pinRoot, mapMaxEntries);
  const rings = v.map('lb_rings');
  if (ringIdentities(rings).length === 0) {
    if (!ringsArePacked(rings)) setWordSlotRings(rings, builtRings);
    else for (const { id, ring: r } of builtRings) {
      const inner = createRing(id, r);
      rings.setInner(encodeU32(id), inner);
      inner.close();
    }
  }
  builds.push({ name: basename(p, '.o'), prog: v.program('xdp_lb') });
}
const load = (name: string) => BpfObject.load(new URL(`../../build/bench/${name}.o`, import.meta.url).pathname);
const empty = await load('xdp_empty');
const restoreObj = await load('xdp_restore');
const varyObj = await load('xdp_snat_vary');
const katranSetup = { port: 80, reals: Array.from({ length: BENCH_REAL_COUNT }, (_, i) => benchReal(i)), ring, routerMac: LAB.gwMac, lruSize: CT_ENTRIES };
const katran: KatranPeer | null = process.env.KATRAN_OBJ ? await loadKatran(process.env.KATRAN_OBJ, { ...katranSetup, vip: '203.0.113.11' }) : null;
const katranGue: KatranPeer | null = process.env.KATRAN_GUE_OBJ
  ? await loadKatran(process.env.KATRAN_GUE_OBJ, { ...katranSetup, vip: '203.0.113.13', encapSource: '198.51.100.1' })
  : null;
const ctxFor = xdpContextFor(LAB.lbA.name);
const counter = async (name: string) => ((await dp.counters())[name] as number | undefined) ?? 0;
const pkt = (dst: string) => frame({ dst: LAB.lbA.mac, src: LAB.clientMac },
  ipPacket({ src: '192.0.2.1', dst, l4: { tcp: { sport: 40000, dport: 80, flags: TCP_FLAGS.SYN } } }));
const cases = [
  { name: 'SYN, new flow every packet, IPIP', data: pkt('203.0.113.11'), harness: varyObj, peer: katran },
  { name: 'SYN, new flow every packet, GUE', data: pkt('203.0.113.13'), harness: varyObj, peer: katranGue },
  { name: 'SYN on an existing flow, IPIP', data: pkt('203.0.113.11'), harness: restoreObj, peer: katran },
].filter((c) => !process.env.XDP_BENCH_ONLY || c.name.toLowerCase().includes(process.env.XDP_BENCH_ONLY.toLowerCase()));
console.log(`SYN-path variants: BPF_PROG_TEST_RUN repeat=${REPEAT}, ${RUNS} alternating runs, medians net of the floor, CPU 1; load ${loadavg()}`);
console.log(`${'case'.padEnd(34)} ${'floor'.padStart(6)}${builds.map((b) => b.name.slice(0, 14).padStart(15)).join('')}${katran || katranGue ? 'Katran'.padStart(8) : ''}`);
const harnessProg = (o: BpfObject) => o.programs()[0]!;
let failed = false;
for (const c of cases) {
  try {
    const floor: number[] = [];
    const runs = builds.map(() => [] as number[]);
    const peer: number[] = [];
    const ctx = ctxFor(c.data.length);
    for (let r = 0; r < RUNS; r++) {
      loadHarness(c.harness, c.data, empty.program('xdp_empty'));
      floor.push(await runChecked(harnessProg(c.harness), c.data, ctx, 2, REPEAT, counter, []));
      for (const [i, b] of builds.entries()) {
        loadHarness(c.harness, c.data, b.prog);
        runs[i]!.push(await runChecked(harnessProg(c.harness), c.data, ctx, 3, REPEAT, counter, ['ct_miss', 'tx'])
          .catch((e: Error) => { throw new Error(`${b.name}: ${e.message}`); }));
      }
      if (c.peer) {
        const k = c.peer;
        loadHarness(c.harness, c.data, k.prog);
        peer.push(await runChecked(harnessProg(c.harness), c.data, ctx, 3, REPEAT, (n) => k.counter(n), ['ct_miss', 'tx']));
      }
    }
    const f = median(floor);
    const kNet = peer.length ? median(peer) - f : 0;
    const cell = (x: number[]) => {
      const net = median(x) - f;
      return `${net}${kNet ? ` (${(net / kNet).toFixed(2)})` : ''}`.padStart(15);
    };
    console.log(`${c.name.padEnd(34)} ${String(f).padStart(6)}${runs.map(cell).join('')}${kNet ? String(kNet).padStart(8) : ''}`);
    // each build against the one as built within the same round (both net of that round's floor): under load the
    // medians of whole columns drift with what else runs, a round's pair far less
    if (builds.length > 1) {
      const paired = runs.slice(1).map((x, i) => {
        const ratios = x.map((v, r) => (v - floor[r]!) / (runs[0]![r]! - floor[r]!)).sort((a, b) => a - b);
        const q = (p: number) => ratios[Math.min(ratios.length - 1, Math.floor(p * ratios.length))]!.toFixed(3);
        return `${builds[i + 1]!.name} ${q(0.5)} [${q(0.25)}-${q(0.75)}]`;
      });
      console.log(`${''.padEnd(34)} per round / as built: ${paired.join(', ')}`);
    }
  } catch (e) {
    failed = true;
    console.log(`${c.name.padEnd(34)} FAILED: ${(e as Error).message}`);
  }
}
// program sizes of each build (translated / JITed bytes of the whole program: main and every subprogram)
const kib = (b: number) => (b / 1024).toFixed(1);
for (const b of builds) {
  const i = b.prog.info();
  console.log(`program size: ${b.name}: ${kib(i.xlatedBytes)} KiB translated, ${kib(i.jitedBytes)} KiB JITed`);
}
console.log(`load at the end: ${loadavg()}`);
katran?.close();
katranGue?.close();
dp.close();
process.exitCode = failed ? 1 : 0;
