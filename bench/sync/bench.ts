// bench/sync: connection-state sync under load (docs/datapath.md "Connection-state sync"). Two lb nodes' data
// planes in a network namespace of their own (test/lib/xdp-lab.ts), each node a process of its own (node.ts) with a
// real peer channel on 127.0.0.1; lb-a's real xdp_lb makes new flows through BPF_PROG_TEST_RUN at an offered rate,
// and, with the sync, lb-a's FlowSync sends them to lb-b's, which inserts them. For every offered rate one run
// without the sync and one with it, back to back, so load on the shared machine hits both alike:
//   synced/s   entries lb-b applied per second, from the first flow made to the last entry's arrival (what the
//              sync sustained; below the offered rate when it falls behind)
//   lag        from the batch that made a flow (lb-a's map) to its arrival in lb-b's map, p50 / p99 / max
//   CPU        lb-a's CPU time with the sync minus without (same flows made), plus lb-b's (all sync), per second
//   per core   synced entries per CPU-second of sync (both ends): the rate one core could keep in sync
// Then the data-plane side (scan.ts): the XDP cost of a new flow with publishing off and on, the daemon's cost of
// reading a published entry, and the cost of the scan (resync, safety net) per entry.
//   loop max   the event loop's longest stall in each node's process during the run (monitorEventLoopDelay): the
//              daemon's health checks and peer channels share that loop; then lb-b holds its table for
//              SYNC_BENCH_HOLD_SECONDS (12) with its sync running, and its longest stall over that window (its
//              safety-net scan of the whole table falls in it) is printed beside the scans run
// SYNC_BENCH_RATES (default 5000,20000 new flows/s), SYNC_BENCH_SECONDS (5).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { setupLab, teardownLab } from '../../test/lib/xdp-lab.js';
import { FLOW_SYNC_DEFAULTS } from '../../src/reconciler/flows/flow-sync.js';

const RATES = (process.env.SYNC_BENCH_RATES ?? '5000,20000').split(',').map(Number);
const SECONDS = Number(process.env.SYNC_BENCH_SECONDS ?? 5);
/** How long the receiver holds its table after a run, its safety-net scans running (one interval and a bit). */
const HOLD_S = Number(process.env.SYNC_BENCH_HOLD_SECONDS ?? FLOW_SYNC_DEFAULTS.scanIntervalMs / 1000 + 2);
const TAG = 'syncb';
const here = (f: string) => new URL(f, import.meta.url).pathname;

interface Proc { child: ChildProcess; next: () => Promise<any> }
function start(ns: string, cpu: string, args: string[]): Proc {
  const child = spawn('taskset', ['-c', cpu, 'nsenter', `--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx', here('./node.ts'), ...args],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const next = async () => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 180_000); // bounded: a stuck node ends the bench
    try {
      const r = await lines.next();
      if (r.done) throw new Error(`bench node ${args[0]} ended without output`);
      return JSON.parse(r.value);
    } finally {
      clearTimeout(timer);
    }
  };
  return { child, next };
}

const pct = (xs: number[], p: number) => xs.length ? xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]! : NaN;

const { ns, pinRoot } = setupLab(TAG);
let failed = false;
try {
  console.log(`load average at the start: ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  console.log(`bench/sync: ${SECONDS} s of new flows per run, lb-a on CPU 1, lb-b on CPU 0; entries published by XDP (ring buffer), read every ${FLOW_SYNC_DEFAULTS.intervalMs} ms, tables scanned at (re)join and every ${FLOW_SYNC_DEFAULTS.scanIntervalMs / 1000} s; real peer channel (HMAC per message)`);
  console.log(`${'offered/s'.padStart(9)} ${'sync'.padEnd(4)} ${'made'.padStart(7)} ${'synced'.padStart(7)} ${'synced/s'.padStart(9)} ${'lag p50'.padStart(8)} ${'p99'.padStart(7)} ${'max'.padStart(7)}   ${'lb-a CPU'.padStart(9)} ${'lb-b CPU'.padStart(9)} ${'sync CPU/s'.padStart(10)} ${'per core/s'.padStart(10)} ${'loop max a/b'.padStart(13)}`);
  let run = 0;
  for (const rate of RATES) {
    let baseCpu = 0;
    for (const sync of [false, true]) {
      const dir = `${pinRoot}/run${run++}`;
      mkdirSync(`${dir}/a`, { recursive: true });
      mkdirSync(`${dir}/b`, { recursive: true });
      const receiver = sync ? start(ns, '0', ['receiver', `${dir}/b`]) : null;
      if (receiver) await receiver.next();
      const sender = start(ns, '1', ['sender', `${dir}/a`, '--rate', String(rate), '--seconds', String(SECONDS), ...(sync ? ['--sync'] : [])]);
      await sender.next(); // ready
      receiver?.child.stdin!.write('start\n');
      const a = await sender.next();
      receiver?.child.stdin!.write('stop\n');
      const b = receiver ? await receiver.next() : null;
      sender.child.stdin!.end();
      let hold: { loopMaxMs: number; scans: number; ct: number } | null = null;
      if (receiver) {
        await new Promise((r) => setTimeout(r, HOLD_S * 1000));
        receiver.child.stdin!.write('end\n');
        hold = await receiver.next();
        receiver.child.stdin!.end();
      }
      const made = a.generated as number;
      const fmtMs = (x: number) => `${Math.round(x)} ms`;
      if (!sync) {
        baseCpu = a.cpuMs;
        console.log(`${String(rate).padStart(9)} ${'off'.padEnd(4)} ${String(made).padStart(7)} ${'-'.padStart(7)} ${'-'.padStart(9)} ${'-'.padStart(8)} ${'-'.padStart(7)} ${'-'.padStart(7)}   ${fmtMs(a.cpuMs).padStart(9)} ${'-'.padStart(9)} ${'-'.padStart(10)} ${'-'.padStart(10)} ${`${a.loopMaxMs}/-`.padStart(13)}`);
        continue;
      }
      // lag: arrival at lb-b minus the end of the batch that made the flow at lb-a
      const madeAt = new Map<number, number>();
      const batches = a.batches as [number, number, number][];
      const arrived = new Map<number, number>(b.arrived as [number, number][]);
      const lags: number[] = [];
      for (const [first, count, at] of batches) for (let i = first; i < first + count; i++) { const got = arrived.get(i); if (got !== undefined) lags.push(got - at); madeAt.set(i, at); }
      lags.sort((x, y) => x - y);
      const syncCpuMs = Math.max(0, a.cpuMs - baseCpu) + b.cpuMs;
      let lastArrival = a.t0 + a.genMs;
      for (const at of arrived.values()) if (at > lastArrival) lastArrival = at;
      const sustained = b.applied / ((lastArrival - a.t0) / 1000);
      const perSecond = syncCpuMs / (a.genMs as number); // CPU-seconds of sync per second of generation
      const perCore = b.applied / (syncCpuMs / 1000);
      console.log(`${String(rate).padStart(9)} ${'on'.padEnd(4)} ${String(made).padStart(7)} ${String(b.applied).padStart(7)} ${String(Math.round(sustained)).padStart(9)} ${fmtMs(pct(lags, 50)).padStart(8)} ${fmtMs(pct(lags, 99)).padStart(7)} ${fmtMs(lags.at(-1) ?? NaN).padStart(7)}   ${fmtMs(a.cpuMs).padStart(9)} ${fmtMs(b.cpuMs).padStart(9)} ${`${(perSecond * 100).toFixed(1)}%`.padStart(10)} ${String(Math.round(perCore)).padStart(10)} ${`${a.loopMaxMs}/${b.loopMaxMs}`.padStart(13)}`);
      console.log(`          lb-b held ${hold!.ct} entries ${HOLD_S} s after the run: ${hold!.scans} safety-net scan(s), event loop max stall ${hold!.loopMaxMs} ms`);
      if (b.applied !== made || lags.length !== made) {
        failed = true;
        console.log(`          not every flow arrived: made ${made}, applied ${b.applied}, with a lag ${lags.length}, refused ${JSON.stringify(b.refused)}${a.lastError ? `, last error ${a.lastError}` : ''}`);
      }
    }
  }
  console.log('sync CPU/s: CPU time of the sync (lb-a with minus without, plus lb-b) per second of generation, in % of one core;');
  console.log('per core/s: entries synced per CPU-second of sync, i.e. the new connections/s one core keeps in sync at this load.');
  console.log("loop max a/b: each node's longest event-loop stall during the run, ms (monitorEventLoopDelay, 5 ms resolution).");
  console.log(`load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  console.log('');
  const scan = spawnSync('taskset', ['-c', '1', 'nsenter', `--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx', here('./scan.ts'), `${pinRoot}/scan`],
    { stdio: 'inherit', timeout: 600_000 });
  if (scan.status !== 0) failed = true;
} finally {
  teardownLab(TAG);
}
if (failed) process.exitCode = 1;
