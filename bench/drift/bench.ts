// See ./run. Prints figures; quote medians (the machine is shared).
import { rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { startDaemon, type Daemon } from '../../src/reconciler/daemon.js';
import { intervalMs } from '../../src/reconciler/triggers/schedule.js';
import { git, servedRepo, commitFiles, tempDir, clusterYaml, lbNodeYaml, serviceYaml } from '../../test/reconcile-helpers.js';
import { scaleFiles, SCALE } from '../scale/config.js';

const PIN_BASE = `/sys/fs/bpf/gitlb-bench-drift-${process.pid}`;
/** The daemon's default drift schedule (daemon.ts: `o.drift ?? '60'`). */
const DEFAULT_DRIFT = '60';
const quiet = { info: () => {}, warn: (m: string) => console.log(`    [warn] ${m}`) };
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

interface Shape { name: string; files: Record<string, string>; checks: number; timeoutMs: number }

const shapes: Record<string, Shape> = {
  small: { name: '1 service x 2 reals (table 16381, the default)', checks: 200, timeoutMs: 60_000, files: {
    'cluster.yaml': clusterYaml({ tableSize: 16381 }),
    'nodes/lb-1.yaml': lbNodeYaml('lb-1'),
    'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.1', '198.51.100.2']),
  } },
  scale: { name: `${SCALE.services} services x ${SCALE.reals} reals (table ${SCALE.tableSize})`, checks: 60, timeoutMs: 900_000,
    files: scaleFiles() },
};

/** One drift job as the daemon's schedule runs it: trigger, then wait for the runner to be idle. CPU in µs. */
async function driftJob(d: Daemon): Promise<{ cpuUs: number; wallMs: number }> {
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  d.runner.trigger('drift', 'bench');
  await d.idle();
  const c = process.cpuUsage(c0);
  return { cpuUs: c.user + c.system, wallMs: performance.now() - t0 };
}

async function measure(shape: Shape, key: string): Promise<void> {
  const repo = await servedRepo();
  const cache = await tempDir(`bench-drift-${key}`);
  const dp = await openLbDataPlane({ pinRoot: join(PIN_BASE, key) });
  let d: Daemon | undefined;
  try {
    const rev = await commitFiles(repo.work, shape.files, 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    // the drift schedule itself never fires during the bench: the bench triggers each check
    d = await startDaemon({ repo: repo.url, branch: 'main', node: 'lb-1', dataPlane: dp, cacheDir: cache, log: quiet,
      drift: '24h', writeStatus: false });
    const end = Date.now() + shape.timeoutMs;
    while (d.reconciler.appliedRevision !== rev) {
      if (Date.now() > end) throw new Error(`not applied within ${shape.timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 20));
    }
    await d.idle();
    const repairsBefore = d.reconciler.counters.driftRepairs;
    const writesBefore = d.reconciler.counters.mapWrites;
    // warm-up: the first checks after an apply may read rings the data plane has not seen yet
    for (let i = 0; i < 3; i++) await driftJob(d);
    const cpu: number[] = [];
    const wall: number[] = [];
    for (let i = 0; i < shape.checks; i++) {
      const r = await driftJob(d);
      cpu.push(r.cpuUs / 1000);
      wall.push(r.wallMs);
    }
    // the reads without the rotation's ring contents: what finds every other kind of drift at the next check
    const ident: number[] = [];
    for (let i = 0; i < 20; i++) {
      const c0 = process.cpuUsage();
      await d.reconciler.dataPlane.readLive();
      const c = process.cpuUsage(c0);
      ident.push((c.user + c.system) / 1000);
    }
    const repairs = d.reconciler.counters.driftRepairs - repairsBefore;
    const writes = d.reconciler.counters.mapWrites - writesBefore;
    const perMin = 60_000 / intervalMs(DEFAULT_DRIFT)!;
    const sum = cpu.reduce((a, b) => a + b, 0);
    console.log(`  ${shape.name}: ${shape.checks} drift checks, ${repairs} repairs, ${writes} map writes (must be 0 and 0)`);
    console.log(`    CPU per check: median ${median(cpu).toFixed(2)} ms (min ${Math.min(...cpu).toFixed(2)}, max ${Math.max(...cpu).toFixed(2)}, mean ${(sum / cpu.length).toFixed(2)}); wall median ${median(wall).toFixed(2)} ms`);
    console.log(`    readLive() without a rotation turn (settings, reals, listeners, ring identities): CPU median ${median(ident).toFixed(2)} ms`);
    console.log(`    at the default interval (${DEFAULT_DRIFT} s, ${perMin} check/min): ${(median(cpu) * perMin / 1000).toFixed(4)} CPU-s per minute (median), ${(sum / cpu.length * perMin / 1000).toFixed(4)} (mean)`);
  } finally {
    await d?.stop();
    d?.reconciler.dataPlane.close();
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
    rmSync(join(PIN_BASE, key), { recursive: true, force: true });
  }
}

try {
  const only = process.argv[2];
  console.log(`drift check cost, real pinned maps, daemon drift job (load average ${loadavg().map((x) => x.toFixed(1)).join(' ')} on this shared machine)`);
  for (const [key, shape] of Object.entries(shapes)) if (!only || only === key) await measure(shape, key);
} finally {
  rmSync(PIN_BASE, { recursive: true, force: true });
}
