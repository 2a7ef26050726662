// bench/xdp/snat-cross-cpu-run: runs inside the SNAT bench namespace (snat-bench.ts with
// SNAT_BENCH_MEASURE=snat-cross-cpu.ts). One translation's two directions at once on two CPUs, as a flow's client
// packets and its real's replies may be handled by a real NIC's queues: the forward translation hit on CPU 0 and the
// reply on CPU 1, each in its own process through its own restore harness, over the same pinned maps, so whatever
// one direction writes into the shared reverse entry the other direction's CPU must fetch again. For the program as
// built and each other build given (argv), alternating; ns per packet of each side while the other runs.
import { spawn } from 'node:child_process';
import { basename, join } from 'node:path';
import { BpfObject } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { listSnat } from '../../src/bpf/dataplane/snat.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import { applyTo } from '../../test/lib/converge.js';
import { median, runChecked, loadHarness, xdpContextFor, loadBuildOver, loadavg } from './measure-lib.js';
import { BENCH_CLIENT, BENCH_VIP, benchRealMac, BENCH_REALS, benchState } from './snat-measure-state.js';

const REPEAT = Number(process.env.XDP_BENCH_REPEAT ?? 2_000_000);
const RUNS = Number(process.env.XDP_BENCH_RUNS ?? 5);

/** One side: RUNS runs of REPEAT iterations of `frameHex` through `objPath`'s xdp_lb; prints the ns of each run. */
async function child(pinRoot: string, objPath: string, frameHex: string, counterName: string): Promise<void> {
  const dp = await openLbDataPlane({ pinRoot });
  const obj = await loadBuildOver(objPath, pinRoot);
  const restoreObj = await BpfObject.load(new URL('../../build/bench/xdp_restore.o', import.meta.url).pathname);
  const data = Buffer.from(frameHex, 'hex');
  loadHarness(restoreObj, data, obj.program('xdp_lb'));
  const ctx = xdpContextFor(LAB.lbA.name)(data.length);
  const counter = async (n: string) => ((await dp.counters())[n] as number | undefined) ?? 0;
  // loaded: wait for the parent's go (one line on stdin), so both sides run at the same time
  process.stderr.write('ready\n');
  await new Promise<void>((res) => process.stdin.once('data', () => res()));
  process.stdin.pause();
  const ns: number[] = [];
  for (let r = 0; r < RUNS; r++) ns.push(await runChecked(restoreObj.programs()[0]!, data, ctx, 3, REPEAT, counter, [counterName]));
  process.stdout.write(JSON.stringify(ns));
  obj.close();
  restoreObj.close();
  dp.close();
}

/** Both sides, started together once both have loaded (each says `ready` on stderr, then waits for a line). */
function sides(specs: Array<{ cpu: number; args: string[] }>): Promise<number[][]> {
  let ready = 0;
  const children = specs.map(({ cpu, args }) => spawn('taskset', ['-c', String(cpu), process.execPath, '--import', 'tsx',
    new URL(import.meta.url).pathname, 'child', ...args], { stdio: ['pipe', 'pipe', 'pipe'] }));
  return Promise.all(children.map((c, i) => new Promise<number[]>((resolve, reject) => {
    let out = '';
    let err = '';
    c.stdout.on('data', (d) => { out += d; });
    c.stderr.on('data', (d) => {
      err += d;
      if (String(d).includes('ready') && ++ready === children.length) for (const x of children) x.stdin.end('go\n');
    });
    c.on('close', (code) => (code === 0 ? resolve(JSON.parse(out) as number[]) : reject(new Error(`side on CPU ${specs[i]!.cpu} exited ${code}: ${err}`))));
  })));
}

async function main(pinRoot: string, variants: string[]): Promise<void> {
  const dp = await openLbDataPlane({ pinRoot });
  await applyTo(dp, benchState());
  const obj = dp.object()!;
  const ctxFor = xdpContextFor(LAB.lbA.name);
  const ack = frame({ dst: LAB.lbA.mac, src: LAB.clientMac },
    ipPacket({ src: BENCH_CLIENT, dst: BENCH_VIP, l4: { tcp: { sport: 40000, dport: 80, flags: TCP_FLAGS.ACK } } }));
  if (obj.program('xdp_lb').testRun({ data: ack, ctxIn: ctxFor(ack.length) }).retval !== 3) throw new Error('priming failed');
  const t = listSnat(obj).find((x) => x.rev.clientPort === 40000)!;
  const reply = frame({ dst: LAB.lbA.mac, src: benchRealMac(BENCH_REALS.indexOf(t.key.real)) },
    ipPacket({ src: t.key.real, dst: LAB.lbA.v4, l4: { tcp: { sport: t.key.realPort, dport: t.key.snatPort, flags: TCP_FLAGS.ACK } } }));
  const builds = [new URL('../../build/bpf/xdp_lb.o', import.meta.url).pathname, ...variants];
  console.log(`SNAT, one translation's two directions at once: forward hits on CPU 0, replies on CPU 1, BPF_PROG_TEST_RUN ` +
    `repeat=${REPEAT}, ${RUNS} runs per side, medians (ns/packet, harness floor included); load ${loadavg()}`);
  for (let round = 0; round < 2; round++) {
    for (const b of builds) {
      const [fwd, rep] = await sides([{ cpu: 0, args: [pinRoot, b, ack.toString('hex'), 'snat_hit'] },
        { cpu: 1, args: [pinRoot, b, reply.toString('hex'), 'snat_reply'] }]) as [number[], number[]];
      console.log(`${(b === builds[0] ? 'as built' : basename(b, '.o')).padEnd(20)} forward ${String(median(fwd)).padStart(4)}  reply ${String(median(rep)).padStart(4)}` +
        `   runs: ${fwd.join(' ')} | ${rep.join(' ')}`);
    }
  }
  console.log(`load at the end: ${loadavg()}`);
  dp.close();
}

if (process.argv[2] === 'child') await child(process.argv[3]!, process.argv[4]!, process.argv[5]!, process.argv[6]!);
else await main(process.argv[2]!, process.argv.slice(3));
