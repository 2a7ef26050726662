// Connection-state sync in the lab (issue 24): both lb nodes run `gitlb run --flow-sync --peer-secret-file`, and 40
// keep-alive connections at a time are spread over them by the router's ECMP:
// - dsr-l2: the table changes under them (real be-1 drained by a commit: new flows leave it, established ones stay),
//   then lb-1 is taken out of the ECMP route (its drain, as the router sees it) and put back (undrain). Without the
//   sync the connections lb-1 carried to be-1 reach lb-2, which has no entry for them and re-hashes them by the new
//   table (another backend: a reset); with it lb-2 holds lb-1's entries;
// - snat: lb-1 drained and undrained; lb-2 sends lb-1's flows from lb-1's SNAT address and port (without the sync it
//   makes new translations, which the reals reset), lb-1 still translates the replies;
// - the metrics of both nodes name the other as in sync, with entries sent and applied;
// - dsr-l2 again: another real drained, then lb-1 lost (its link down, its route gone).
import test from 'ava';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { commitAndPush, routeVipsVia, startE2eLab, waitApplied, type E2eLab } from '../e2e-lab.js';
import { runTraffic } from '../../src/demo/traffic.js';
import { nsExec, sleep } from '../../src/lab/netns.js';
import { labNs } from '../../src/lab/lab.js';
import { LAB_METRICS_PORT } from '../../src/lab/prometheus.js';

const SECRET = 'Lk2j3H4g5F6d7S8a9P0o1I2u3Y4t5R6e7W8q9Zx0cVb='; // test-only peer secret

let lab: E2eLab | null = null;
let labError: Error | null = null;

test.before(async (t) => {
  t.timeout(240_000);
  try {
    lab = await startE2eLab((line) => t.log(`lab: ${line}`), {
      daemonArgs: (scratch) => {
        const file = join(scratch, 'peer.secret');
        writeFileSync(file, `${SECRET}\n`, { mode: 0o600 });
        return ['--flow-sync', '--peer-secret-file', file];
      },
    });
  } catch (err) {
    labError = err as Error;
  }
});

test.after.always(async () => {
  await lab?.close();
});

test.serial('table changed under 40 keep-alive connections, then lb-1 drained and undrained: every connection survives on its backend', async (t) => {
  t.timeout(180_000);
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  const l = lab;
  const flows = 40;
  const running = runTraffic(l.view.clientNs, { kind: 'flows', host: '203.0.113.10', port: 80, flows, durationMs: 30_000, intervalMs: 250,
    sources: l.view.clientsV4, timeoutMs: 5000 });
  try {
    await sleep(3000);
    const rev = await commitAndPush(l, 'services/web.yaml',
      (s) => s.replace(/(- address: 198\.51\.100\.21\n(\s+)weight: 100)/, '$1\n$2state: drain'), 'web: drain be-1');
    await waitApplied(l, rev, ['lb-1', 'lb-2'], 60_000);
    await sleep(1500); // a few sync rounds (250 ms each)
    await routeVipsVia(l, ['lb-2']); // lb-1 drained: the router sends every flow to lb-2
    await sleep(6000);
    await routeVipsVia(l, ['lb-1', 'lb-2']); // undrained: ECMP moves some flows back to lb-1
    const r = await running;
    const survived = r.flows.filter((f) => f.survived);
    const switched = r.flows.filter((f) => f.backends.length > 1);
    const onBe1 = r.flows.filter((f) => f.backends[0] === 'be-1');
    t.log(`${survived.length}/${flows} connections survived the table change, lb-1's drain and undrain; ${onBe1.length} were on the drained be-1; ${switched.length} changed backend`);
    for (const f of r.flows.filter((x) => !x.survived)) t.log(`  lost: ${f.src}:${f.sport} ${f.backends.join('->')} after ${f.requests} requests: ${f.firstError}`);
    t.true(onBe1.length > 0, 'some connections were on the backend the table moved away from');
    t.true(r.flows.every((f) => f.requests >= 3), 'every connection was carrying requests');
    t.is(switched.length, 0, 'no connection changed backend');
    t.is(survived.length, flows);
  } finally {
    await routeVipsVia(l, ['lb-1', 'lb-2']).catch(() => undefined);
  }
});

test.serial('snat: lb-1 drained and undrained under 40 keep-alive connections: every connection survives (lb-2 sends lb-1\'s flows from lb-1\'s SNAT address and port)', async (t) => {
  t.timeout(180_000);
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  const l = lab;
  const flows = 40;
  // dns: snat, 203.0.113.40:53/TCP -> reals :5353; each lb node its own snatAddress (.111, .112)
  const running = runTraffic(l.view.clientNs, { kind: 'flows', host: '203.0.113.40', port: 53, flows, durationMs: 20_000, intervalMs: 250,
    sources: l.view.clientsV4, timeoutMs: 5000 });
  try {
    await sleep(3000); // connections through both lb nodes, synced within a round
    await routeVipsVia(l, ['lb-2']); // lb-1 drained: its flows reach lb-2; the reals still answer lb-1's address
    await sleep(6000);
    await routeVipsVia(l, ['lb-1', 'lb-2']); // undrained
    const r = await running;
    const survived = r.flows.filter((f) => f.survived);
    const switched = r.flows.filter((f) => f.backends.length > 1);
    t.log(`snat: ${survived.length}/${flows} connections survived lb-1's drain and undrain; ${switched.length} changed backend`);
    for (const f of r.flows.filter((x) => !x.survived)) t.log(`  lost: ${f.src}:${f.sport} ${f.backends.join('->')} after ${f.requests} requests: ${f.firstError}`);
    t.true(r.flows.every((f) => f.requests >= 3), 'every connection was carrying requests');
    t.is(switched.length, 0, 'no connection changed backend');
    t.is(survived.length, flows);
  } finally {
    await routeVipsVia(l, ['lb-1', 'lb-2']).catch(() => undefined);
  }
});

test.serial('metrics: each lb node reports its peer in sync, entries sent to it and entries applied from it', async (t) => {
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  for (const [node, address, peer] of [['lb-1', '198.51.100.11', 'lb-2'], ['lb-2', '198.51.100.12', 'lb-1']] as const) {
    const r = await nsExec(labNs(lab.state, 'router'), ['curl', '-s', '--max-time', '5', `http://${address}:${LAB_METRICS_PORT}/metrics`], { timeoutMs: 10_000 });
    t.is(r.code, 0, r.stderr);
    const value = (name: string, ...labels: string[]) => {
      const line = r.stdout.split('\n').find((l) => l.startsWith(`${name}{`) && labels.every((x) => l.includes(x)));
      return line ? Number(line.split(' ').pop()) : NaN;
    };
    t.is(value('gitlb_flow_sync_in_sync', `peer="${peer}"`), 1, `${node}: in sync with ${peer}`);
    t.true(value('gitlb_flow_sync_entries_total', `peer="${peer}"`, 'event="sent"') > 0, `${node}: sent to ${peer}`);
    t.true(value('gitlb_flow_sync_entries_total', `peer="${peer}"`, 'event="applied"') > 0, `${node}: applied from ${peer}`);
  }
});

test.serial('loss of lb-1 (its link down, its route gone) after the table changed under 40 keep-alive dsr connections: every connection survives', async (t) => {
  t.timeout(180_000);
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  const l = lab;
  const flows = 40;
  const lb1 = labNs(l.state, 'lb1');
  const running = runTraffic(l.view.clientNs, { kind: 'flows', host: '203.0.113.10', port: 80, flows, durationMs: 24_000, intervalMs: 250,
    sources: l.view.clientsV4, timeoutMs: 5000 });
  try {
    await sleep(3000);
    const rev = await commitAndPush(l, 'services/web.yaml',
      (s) => s.replace(/(- address: 198\.51\.100\.22\n(\s+)weight: 100)/, '$1\n$2state: drain'), 'web: drain be-2');
    await waitApplied(l, rev, ['lb-1', 'lb-2'], 60_000);
    await sleep(1500);
    // lb-1 is lost: it stops forwarding at once, and the router's route follows
    const down = await nsExec(lb1, ['ip', 'link', 'set', 'eth0', 'down']);
    t.is(down.code, 0, down.stderr);
    await routeVipsVia(l, ['lb-2']);
    const r = await running;
    const survived = r.flows.filter((f) => f.survived);
    const switched = r.flows.filter((f) => f.backends.length > 1);
    t.log(`loss of lb-1: ${survived.length}/${flows} connections survived; ${switched.length} changed backend`);
    for (const f of r.flows.filter((x) => !x.survived)) t.log(`  lost: ${f.src}:${f.sport} ${f.backends.join('->')} after ${f.requests} requests: ${f.firstError}`);
    t.is(switched.length, 0, 'no connection changed backend');
    t.is(survived.length, flows);
  } finally {
    await nsExec(lb1, ['ip', 'link', 'set', 'eth0', 'up']).catch(() => undefined);
    await routeVipsVia(l, ['lb-1', 'lb-2']).catch(() => undefined);
  }
});

test.serial('snat: loss of lb-1 (its link down, its route gone) under 40 keep-alive connections: lb-2 takes lb-1\'s SNAT address over and every connection survives', async (t) => {
  t.timeout(180_000);
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  const l = lab;
  const flows = 40;
  const lb1 = labNs(l.state, 'lb1');
  const lb2 = labNs(l.state, 'lb2');
  const holds = async (ns: string, a: string) => (await nsExec(ns, ['ip', '-o', 'addr', 'show', 'dev', 'eth0'])).stdout.includes(` ${a}/32 `);
  const running = runTraffic(l.view.clientNs, { kind: 'flows', host: '203.0.113.40', port: 53, flows, durationMs: 20_000, intervalMs: 250,
    sources: l.view.clientsV4, timeoutMs: 5000 });
  let tookOver = false;
  try {
    await sleep(3000);
    t.false(await holds(lb2, '198.51.100.111'), 'lb-2 holds only its own SNAT address while lb-1 lives');
    const down = await nsExec(lb1, ['ip', 'link', 'set', 'eth0', 'down']);
    t.is(down.code, 0, down.stderr);
    await routeVipsVia(l, ['lb-2']);
    for (let i = 0; i < 40 && !tookOver; i++) {
      await sleep(250);
      tookOver = await holds(lb2, '198.51.100.111');
    }
    const r = await running;
    const survived = r.flows.filter((f) => f.survived);
    const switched = r.flows.filter((f) => f.backends.length > 1);
    t.log(`snat, loss of lb-1: ${survived.length}/${flows} connections survived; ${switched.length} changed backend; lb-2 took .111 over: ${tookOver}`);
    for (const f of r.flows.filter((x) => !x.survived)) t.log(`  lost: ${f.src}:${f.sport} ${f.backends.join('->')} after ${f.requests} requests: ${f.firstError}`);
    t.true(tookOver, 'lb-2 took lb-1\'s SNAT address over');
    t.true(r.flows.every((f) => f.requests >= 3), 'every connection was carrying requests');
    t.is(switched.length, 0, 'no connection changed backend');
    t.is(survived.length, flows);
  } finally {
    await nsExec(lb1, ['ip', 'link', 'set', 'eth0', 'up']).catch(() => undefined);
    await routeVipsVia(l, ['lb-1', 'lb-2']).catch(() => undefined);
  }
  // lb-1 back: lb-2 gives the address back
  let released = false;
  for (let i = 0; i < 60 && !released; i++) {
    await sleep(250);
    released = !(await holds(lb2, '198.51.100.111'));
  }
  t.true(released, 'lb-2 gave lb-1\'s SNAT address back once lb-1 answered again');
});
