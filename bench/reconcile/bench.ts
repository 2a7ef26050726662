// See ./run. Prints figures; quote medians (the machine is shared).
import { rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { startDaemon, type Daemon } from '../../src/reconciler/daemon.js';
import { githubSignature } from '../../src/reconciler/triggers/webhook.js';
import { Reconciler } from '../../src/reconciler/loops/reconciler.js';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { git, servedRepo, commitFiles, tempDir, clusterYaml, lbNodeYaml, serviceYaml } from '../../test/reconcile-helpers.js';
import { readConfigDir } from '../../src/reconciler/source/read-dir.js';
import { serialiseStatus } from '../../src/reconciler/status/status-doc.js';
import { SCALE, scaleFile, scaleFileOf, scaleFiles } from '../scale/config.js';

const PIN_BASE = `/sys/fs/bpf/gitlb-bench-${process.pid}`;
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const stamp = (level: string) => (msg: string) => console.log(`    [${new Date().toISOString().slice(11, 23)} ${level}] ${msg}`);
// BENCH_LOG=1 shows the daemon's log with timestamps (where the time between the webhook and applied goes)
const quiet = process.env.BENCH_LOG ? { info: stamp('info'), warn: stamp('warn') } : { info: () => {}, warn: () => {} };

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (xs: number[]) => `median ${median(xs)} ms (min ${Math.min(...xs)}, max ${Math.max(...xs)}, n=${xs.length})`;

async function waitApplied(d: Daemon, rev: string, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (d.reconciler.appliedRevision !== rev) {
    if (Date.now() > end) throw new Error(`not applied within ${timeoutMs} ms: ${rev}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A config and the change each round commits: `change(i)` returns the files to write. */
interface Scenario { name: string; files: Record<string, string>; change(i: number): Record<string, string>; initialTimeoutMs: number }

/** The sample config repository (sample-config-repo/), node lb-1; each round moves one real's weight in web.yaml. */
async function sampleScenario(): Promise<Scenario> {
  const files: Record<string, string> = {};
  for (const f of await readConfigDir('sample-config-repo')) files[f.path] = new TextDecoder().decode(f.content);
  const web = files['services/web.yaml']!;
  if (!/weight: 100/.test(web)) throw new Error('sample-config-repo/services/web.yaml: no "weight: 100" to change');
  return { name: 'sample config', files, initialTimeoutMs: 60_000,
    change: (i) => ({ 'services/web.yaml': web.replace('weight: 100', `weight: ${90 - (i % 5)}`) }) };
}

/** 1,000 services x 100 reals (bench/scale/config.ts); each round changes one real's weight of one service. */
function scaleScenario(): Scenario {
  return { name: `${SCALE.services} services x ${SCALE.reals} reals`, files: scaleFiles(), initialTimeoutMs: 900_000,
    change: (i) => {
      const svc = (i * 97) % SCALE.services;
      return { [scaleFileOf(svc)]: scaleFile(Math.floor(svc / 100), SCALE, new Map([[svc, (r: number) => (r === i % SCALE.reals ? 50 : 100)]])) };
    } };
}

async function latency(mode: 'webhook' | 'poll', scenario: Scenario): Promise<number[]> {
  const repo = await servedRepo();
  const cache = await tempDir(`bench-${mode}`);
  const dp = await openLbDataPlane({ pinRoot: join(PIN_BASE, mode) });
  const secret = 'bench-secret';
  let d: Daemon | undefined;
  try {
    const first = await commitFiles(repo.work, scenario.files, 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    // The moment the daemon has the revision in the kernel maps (its onApplied hook). The daemon shares this
    // process, so what it does after applying (the status write) would otherwise delay our noticing it.
    let appliedAt = 0;
    d = await startDaemon({
      repo: repo.url, branch: 'main', node: 'lb-1', dataPlane: dp, cacheDir: cache, log: quiet,
      onApplied: () => (appliedAt = Date.now()),
      ...(mode === 'webhook' ? { webhook: { listen: '127.0.0.1:0', secret } } : { poll: '1' }),
    });
    await waitApplied(d, first, scenario.initialTimeoutMs);
    await d.idle();
    const out: number[] = [];
    const stages: Record<string, number[]> = {};
    for (let i = 0; i < ROUNDS; i++) {
      const rev = await commitFiles(repo.work, scenario.change(i), `change ${i}`);
      appliedAt = 0;
      await git(repo.work, 'push', '-q', 'origin', 'main');
      const t0 = Date.now(); // the push has landed on the server
      if (process.env.BENCH_LOG) stamp('bench')(`round ${i}: pushed ${rev.slice(0, 12)}`);
      if (mode === 'webhook') {
        const body = JSON.stringify({ ref: 'refs/heads/main', after: rev });
        await fetch(d.webhook!.url, { method: 'POST', body, headers: { 'x-hub-signature-256': githubSignature(secret, Buffer.from(body)) } });
      }
      await waitApplied(d, rev);
      out.push(appliedAt - t0);
      for (const [k, v] of Object.entries(d.reconciler.timings)) (stages[k] ??= []).push(v);
      await d.idle(); // let the status write finish before the next round
    }
    console.log(`    stages of the reconcile pass (median ms): ${Object.entries(stages).map(([k, v]) => `${k} ${median(v)}`).join(', ')}`);
    // The status document written after every apply: its size and the CPU cost of serialising it.
    const status = d.reconciler.snapshot();
    const ser: number[] = [];
    let bytes = 0;
    for (let i = 0; i < 5; i++) {
      const t = performance.now();
      bytes = serialiseStatus(status).length;
      ser.push(Math.round(performance.now() - t));
    }
    console.log(`    status document: ${bytes} bytes, serialise ${fmt(ser)}`);
    return out;
  } finally {
    await d?.stop();
    d?.reconciler.dataPlane.close();
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
}

async function oneRealChange(): Promise<void> {
  const M = 65537;
  const N = 100;
  const repo = await servedRepo();
  const cache = await tempDir('bench-writes');
  const dp = await openLbDataPlane({ pinRoot: join(PIN_BASE, 'writes') });
  try {
    const reals = Array.from({ length: N }, (_, i) => `198.51.100.${i + 1}`);
    const files = {
      'cluster.yaml': clusterYaml({ tableSize: M }),
      'nodes/lb-1.yaml': lbNodeYaml('lb-1'),
      'services/web.yaml': serviceYaml('web', '203.0.113.10', reals),
    };
    await commitFiles(repo.work, files, 'initial');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const r = new Reconciler({ node: 'lb-1', branch: 'main', remote: new HttpRemote(repo.url, cache), dataPlane: dp, log: quiet });
    const first = await r.reconcile('bench');
    if (first.kind !== 'applied') throw new Error(JSON.stringify(first));
    console.log(`initial apply, M=${M} N=${N}: ${first.report.mapWrites} map writes`);
    const rows: string[] = [];
    for (const [label, next] of [
      ['remove one real', reals.slice(0, N - 1)],
      ['add it back', reals],
      ['replace one real', [...reals.slice(0, N - 1), '198.51.100.200']],
    ] as const) {
      await commitFiles(repo.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', [...next]) }, label);
      await git(repo.work, 'push', '-q', 'origin', 'main');
      const o = await r.reconcile('bench');
      if (o.kind !== 'applied') throw new Error(JSON.stringify(o));
      rows.push(`  ${label.padEnd(17)} ops=${o.report.ops}, mapWrites=${o.report.mapWrites} (a new ring of ${o.report.changedRingEntries} entries, switched in with one outer-map update), mapDeletes=${o.report.mapDeletes}, ringSwitches=${o.report.ringSwitches}`);
    }
    console.log(`one-real change at M=${M}, N=${N}:\n${rows.join('\n')}`);
    const again = await r.reconcile('bench');
    console.log(`  reconcile with nothing new: ${again.kind}`);
  } finally {
    dp.close();
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
}

try {
  const only = process.argv[2]; // 'sample', 'scale' or 'writes' runs just that part
  console.log(`commit-to-applied latency, from push landed to applied in the kernel maps (${ROUNDS} rounds each; ` +
    `load average ${loadavg().map((x) => x.toFixed(1)).join(' ')} on this shared machine)`);
  if (!only || only === 'sample') {
    const sample = await sampleScenario();
    console.log(`  ${sample.name}, by webhook (goal <= 1 s): ${fmt(await latency('webhook', sample))}`);
    console.log(`  ${sample.name}, by poll (1 s): ${fmt(await latency('poll', sample))}   (expected ~ half the poll interval + one reconcile)`);
  }
  if (!only || only === 'scale') {
    const scale = scaleScenario();
    console.log(`  ${scale.name}, by webhook (goal <= 3 s): ${fmt(await latency('webhook', scale))}`);
  }
  if (!only || only === 'writes') await oneRealChange();
} finally {
  rmSync(PIN_BASE, { recursive: true, force: true });
}
