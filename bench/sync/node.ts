// One lb node of bench/sync, run inside the bench namespace (bench.ts starts two): its own data plane (pin root),
// the bench state applied, a real authenticated peer channel on 127.0.0.1 and, with --sync, the daemon's FlowSync
// (src/reconciler/flows/flow-sync.ts) exactly as `gitlb run --flow-sync` runs it.
//
//   sender:   new flows are made by the real xdp_lb through BPF_PROG_TEST_RUN (bench/xdp/snat_vary.c gives every
//             iteration a new client flow, so each one inserts a connection-table entry) at --rate per second for
//             --seconds, in 10 ms steps; with --sync it then waits until its sync has sent every entry. Prints the
//             batches it made (first flow index, count, time) and its CPU time.
//   receiver: serves the sync; for every entry it is handed notes when it arrived (by the flow's index, from its
//             source address and port), and counts what it applied. Prints those and its CPU time on 'stop' (stdin),
//             then holds its table, its FlowSync running (the safety-net scans of the whole table), until 'end':
//             prints the scans run meanwhile and the event loop's longest stall.
//
// With --sync the sender's FlowSync turns publishing on (lb_config flags: it has a peer) and reads the entries xdp_lb
// publishes into its ring; without, nothing is published. The sender's CPU with and without --sync differs by the sync
// alone (reading the ring, the first scan, sending); the receiver's is all sync.
import { createInterface } from 'node:readline';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { BpfObject } from '../../src/bpf/libbpf.js';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { FlowSync } from '../../src/reconciler/flows/flow-sync.js';
import { startPeerChannel, secretAuth } from '../../src/reconciler/peer/index.js';
import { applyTo } from '../../test/lib/converge.js';
import { loadHarness, u32, xdpContextFor } from '../xdp/measure-lib.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { SYNC_PORTS, SYNC_SECRET, flowIndex, newFlowPacket, syncBenchState } from './state.js';

const [role, pinRoot, ...rest] = process.argv.slice(2) as ['sender' | 'receiver', string, ...string[]];
const arg = (name: string, def: number) => { const i = rest.indexOf(`--${name}`); return i >= 0 ? Number(rest[i + 1]) : def; };
const sync = rest.includes('--sync');
const self = role === 'sender' ? 'lb-a' : 'lb-b';
const other = role === 'sender' ? 'lb-b' : 'lb-a';
const url = (n: string) => `http://127.0.0.1:${SYNC_PORTS[n as 'lb-a' | 'lb-b']}`;
const cpuMs = (c: NodeJS.CpuUsage) => (c.user + c.system) / 1000;
const write = (x: unknown) => process.stdout.write(`${JSON.stringify(x)}\n`);
// the event loop's longest stall while the run lasts (ms): health checks and peer channels share this loop in the
// daemon ("packets and health never wait"), so a scan must not hold it for long
const loop = monitorEventLoopDelay({ resolution: 5 });
const loopMaxMs = () => Math.round(loop.max / 1e6);

const dp = await openLbDataPlane({ pinRoot });
const state = syncBenchState(self);
await applyTo(dp, state);
const ch = await startPeerChannel({ node: self, host: '127.0.0.1', port: SYNC_PORTS[self], auth: secretAuth(SYNC_SECRET),
  peers: () => [{ node: other, url: url(other) }], log: { warn: (m) => process.stderr.write(`${m}\n`) } });
const flowSync = sync || role === 'receiver'
  ? new FlowSync({ node: self, channel: ch, peers: () => [other], object: () => dp.object(), desired: () => state,
    log: { warn: (m) => process.stderr.write(`${m}\n`) } })
  : null;

if (role === 'receiver') {
  const arrived = new Map<number, number>();
  let applied = 0;
  const receive = flowSync!.receive.bind(flowSync);
  // the channel calls this.receive: note each entry's arrival once it is in the map
  flowSync!.receive = async (from, body) => {
    const r = await receive(from, body);
    const at = Date.now();
    applied += r.applied;
    for (const e of (body as { ct: [string, string, number][] }).ct) {
      const i = flowIndex(e[0], e[2]);
      if (i !== null && !arrived.has(i)) arrived.set(i, at);
    }
    return r;
  };
  flowSync!.start(); // as in the daemon: it also reads its own table every round (and has nothing of its own to send)
  write({ ready: true });
  let cpu0 = process.cpuUsage();
  let scans0 = 0;
  for await (const line of createInterface({ input: process.stdin })) {
    if (line === 'start') { cpu0 = process.cpuUsage(); loop.reset(); loop.enable(); }
    if (line === 'stop') {
      // the run's figures; then the node holds its table (its safety-net scans go on) until 'end'
      const cpu = cpuMs(process.cpuUsage(cpu0));
      write({ cpuMs: cpu, loopMaxMs: loopMaxMs(), applied, received: flowSync!.report()[other]?.received ?? 0, refused: flowSync!.report()[other]?.refused ?? {},
        arrived: [...arrived] });
      loop.reset();
      scans0 = flowSync!.localReport().scans;
    }
    if (line === 'end') {
      await flowSync!.stop();
      loop.disable();
      const ct = dp.object()!.map('lb_conntrack').lookupBatch(4096).count;
      write({ loopMaxMs: loopMaxMs(), scans: flowSync!.localReport().scans - scans0, ct });
      break;
    }
  }
} else {
  const rate = arg('rate', 10_000);
  const seconds = arg('seconds', 5);
  const obj = dp.object()!;
  const vary = await BpfObject.load(new URL('../../build/bench/xdp_snat_vary.o', import.meta.url).pathname);
  const syn = newFlowPacket();
  loadHarness(vary, syn, obj.program('xdp_lb'));
  const prog = vary.program('xdp_snat_vary');
  const ctxIn = xdpContextFor(LAB.lbA.name)(syn.length);
  const counter = vary.map('flow_counter');
  // the harness's per-CPU counter of flows made so far (this process runs on one CPU, but sum them anyway)
  const made = () => { const v = counter.lookup(u32(0))!; let n = 0; for (let o = 0; o < v.length; o += 8) n += v.readUInt32LE(o); return n; };
  await new Promise((r) => setTimeout(r, 1500)); // the receiver's first contact (its resync of an empty table) passes
  flowSync?.start();
  await new Promise((r) => setTimeout(r, 600));
  write({ ready: true });
  const cpu0 = process.cpuUsage();
  loop.enable();
  const t0 = Date.now();
  const batches: [number, number, number][] = [];
  let generated = 0;
  while (Date.now() - t0 < seconds * 1000) {
    const due = Math.min(5000, Math.floor(((Date.now() - t0) / 1000) * rate) - generated);
    if (due > 0) {
      const first = made();
      const r = prog.testRun({ data: syn, repeat: due, ctxIn });
      if (r.retval !== 3) throw new Error(`new flow returned ${r.retval}, expected XDP_TX`);
      batches.push([first, due, Date.now()]);
      generated += due;
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  const genMs = Date.now() - t0;
  // with the sync: until every entry has been sent (bounded)
  const report = () => flowSync?.report()[other];
  while (flowSync && Date.now() - t0 < seconds * 1000 + 60_000 && ((report()?.sent ?? 0) < generated || (report()?.queued ?? 1) > 0))
    await new Promise((r) => setTimeout(r, 20));
  const cpu = cpuMs(process.cpuUsage(cpu0));
  const ct = obj.map('lb_conntrack').lookupBatch(4096).count;
  loop.disable();
  write({ loopMaxMs: loopMaxMs(), generated, t0, genMs, windowMs: Date.now() - t0, cpuMs: cpu, ct, sent: report()?.sent ?? 0, lastError: report()?.lastError, batches });
  await flowSync?.stop();
  vary.close();
}
await ch.close();
dp.close();
