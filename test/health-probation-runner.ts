// Runs the probation scenarios of test/netns/health-probation.test.ts inside that test's network namespace (reals on
// its loopback device, 198.51.100.0/24) and prints one JSON line of observations per scenario; the test asserts.
import net from 'node:net';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openLbDataPlane } from '../src/bpf/dataplane/index.js';
import { HttpRemote } from '../src/reconciler/source/git-remote.js';
import { Reconciler } from '../src/reconciler/loops/reconciler.js';
import { HealthService } from '../src/reconciler/health/service.js';
import { git, servedRepo, commitFiles, tempDir, clusterYaml, lbNodeYaml } from './reconcile-helpers.js';

const PIN_BASE = process.argv[2]!;
const quiet = { info: () => {}, warn: () => {} };
const cleanups: (() => Promise<void> | void)[] = [];

/** A TCP server on address:port (any free port when 0) that accepts and closes; returns the port. */
async function listen(address: string, port = 0): Promise<number> {
  const server = net.createServer((c) => c.end());
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, address, resolve));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as net.AddressInfo).port;
}

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

function web(reals: string[], targetPort: number): string {
  return [
    'apiVersion: gitlb/v1', 'kind: Service', 'metadata: { name: web }', 'spec:', '  vip: 203.0.113.10',
    `  ports: [{ port: 80, protocol: TCP, targetPort: ${targetPort} }]`, '  dispatch: { mode: dsr, encap: ipopt }',
    '  healthCheck: { type: tcp, interval: 100ms, timeout: 100ms, rise: 2, fall: 2 }', '  reals:',
    ...reals.map((r) => `    - { address: ${r} }`), '',
  ].join('\n');
}

async function setup(name: string, reals: string[], port: number) {
  const repo = await servedRepo();
  cleanups.push(() => repo.cleanup());
  await commitFiles(repo.work, { 'cluster.yaml': clusterYaml({ policy: 'auto', tableSize: 1021 }), 'nodes/lb-1.yaml': lbNodeYaml('lb-1'),
    'services/web.yaml': web(reals, port) }, 'initial config');
  await git(repo.work, 'push', '-q', 'origin', 'main');
  const dp = await openLbDataPlane({ pinRoot: join(PIN_BASE, name) });
  cleanups.push(() => dp.close());
  const health = new HealthService({ node: 'lb-1' });
  cleanups.push(() => health.checker.stop());
  const cache = await tempDir(`probation-${name}`);
  cleanups.push(() => rmSync(cache, { recursive: true, force: true }));
  const rec = new Reconciler({
    node: 'lb-1', branch: 'main', remote: new HttpRemote(repo.url, join(cache, 'git')), dataPlane: dp, log: quiet,
    health: () => health.view(),
    preApplyGate: health.preApplyGate({ maxCapacityLossShare: 0.5 }),
    postApplyGate: health.postApplyGate({ maxCapacityLossShare: 0.5 }),
    onApplied: (m) => health.update(m),
  });
  const first = await rec.reconcile('start');
  if (first.kind !== 'applied') throw new Error(`first apply: ${JSON.stringify(first)}`);
  const push = async (files: Record<string, string>, message: string) => {
    const rev = await commitFiles(repo.work, files, message);
    await git(repo.work, 'push', '-q', 'origin', 'main');
    return rev;
  };
  return { repo, dp, health, rec, first: first.revision, push };
}


const REALS = ['198.51.100.1', '198.51.100.2', '198.51.100.3'];

async function closedScenario() {
  const open = await listen(REALS[0]!);
  for (const r of REALS.slice(1)) await listen(r, open);
  const { repo, dp, rec, first, push } = await setup('closed', REALS, open);
  const live0 = await dp.readLive();
  const closed = await closedPort();
  const bad = await push({ 'services/web.yaml': web(REALS, closed) }, `targetPort -> ${closed} (nothing listens)`);
  // Sample what the kernel serves while the revision is tried.
  const seen = new Set<number>();
  let sampling = true;
  let samples = 0;
  const sampler = (async () => {
    while (sampling) {
      for (const v of (await dp.readLive()).vips) seen.add(v.targetPort);
      samples++;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const o = await rec.reconcile('poll');
  sampling = false;
  await sampler;
  const live1 = await dp.readLive();
  const appliedIsFirst = rec.appliedRevision === first;
  const again = await rec.reconcile('poll');
  await git(repo.work, 'pull', '-q', 'origin', 'main');
  return {
    scenario: 'closed', open, closed, samples, seen: [...seen],
    targetPortsBefore: live0.vips.map((v) => v.targetPort),
    outcome: { kind: o.kind, ...(o.kind === 'failed' && { stage: o.stage, reason: o.reason, rollback: o.rollback?.pushed ? 'pushed' : (o.rollback as { why?: string } | undefined)?.why ?? 'none' }) },
    appliedIsFirst,
    digestsBefore: live0.services.map((s) => s.digest), digestsAfter: live1.services.map((s) => s.digest),
    again: again.kind, rollbacksPushed: rec.counters.rollbacksPushed,
    headParentIsBad: (await git(repo.work, 'rev-parse', 'HEAD^')) === bad,
    headServiceIsOriginal: (await git(repo.work, 'show', 'HEAD:services/web.yaml')).trim() === web(REALS, open).trim(),
  };
}

async function partialScenario() {
  const port = await listen(REALS[0]!);
  for (const r of REALS.slice(1)) await listen(r, port);
  await listen('198.51.100.5', port); // answers; 198.51.100.4 does not
  const { dp, health, rec, push } = await setup('partial', REALS, port);
  await health.settled(rec.appliedConfig!, 5000);
  const rev = await push({ 'services/web.yaml': web([...REALS, '198.51.100.4', '198.51.100.5'], port) }, 'two new reals');
  const o = await rec.reconcile('poll');
  const entries = async () => {
    const live = await dp.readLive({ tables: true });
    const ring = live.services[0]!.ring!;
    const count = (a: string) => ring.filter((x) => x === live.reals.find((r) => r.address === a)?.id).length;
    return { silent: count('198.51.100.4'), answering: count('198.51.100.5') };
  };
  const atApply = await entries();
  const checkerState = health.checker.state('web', '198.51.100.4')?.state;
  // A few check intervals later (a fresh `unknown` check would have admitted it by now).
  await new Promise((r) => setTimeout(r, 600));
  await rec.reconcile('poll');
  return { scenario: 'partial', outcome: { kind: o.kind, ...(o.kind === 'failed' && { stage: o.stage, reason: o.reason }) },
    appliedIsRev: rec.appliedRevision === rev, atApply, checkerState, later: await entries() };
}

try {
  console.log(JSON.stringify(await closedScenario()));
  console.log(JSON.stringify(await partialScenario()));
} catch (err) {
  console.log(JSON.stringify({ scenario: 'error', message: String((err as Error)?.stack ?? err) }));
} finally {
  for (const f of cleanups.reverse()) await f();
}
process.exit(0);
