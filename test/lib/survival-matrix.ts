// Every established connection survives lb node events, in every dispatch mode (issue 24), through the router's ECMP
// as a BGP daemon installs it: BIRD (test/netns/flow-sync-lab.test.ts) or FRR (test/netns/flow-sync-lab-frr.test.ts)
// on the router, one piece of code for both (`survivalMatrix(router)`). Both lb nodes run
// `gitlb run --flow-sync --peer-secret-file` and BIRD, and 40 keep-alive connections per VIP (dsr-l2 web, dsr-ipip
// api, snat dns, hybrid game: its TCP goes by ipip) are spread over them by the router's ECMP. One lab, four phases,
// all four VIPs at once in each (160 connections), each ended by a stop file once its events are over:
// - drain and undrain: the table changes under the connections (be-1 drained by a commit: new flows leave it,
//   established ones stay), then lb-1 is drained by a commit (its BIRD withdraws, the router drops its path) and
//   undrained (the path comes back). Without the sync the DSR connections lb-1 carried to be-1 reach lb-2, which
//   re-hashes them by the new table (another backend: a reset), and lb-2 makes new translations for lb-1's SNAT
//   flows, which the reals reset;
// - kill -9 of lb-1's daemon: while it is dead the router's sessions to lb-1 are shut at the router (the daemon cannot
//   apply a drain), so the router moves its flows to lb-2, which carries them with the entries synced before the
//   kill; the daemon is started again (it adopts its pinned data plane and resyncs) and, once both are in sync, the
//   sessions are opened again;
// - loss of lb-1: the table changes again (be-1 back, be-2 drained), then lb-1's link goes down; the router drops
//   its path when the BGP hold timer runs out. lb-2 carries lb-1's DSR flows by the synced entries and takes lb-1's
//   SNAT address over (the reals' replies to it reach lb-2, src/reconciler/flows/snat-takeover.ts), announcing it
//   as a BGP host route the router installs; then, under the same connections, lb-1's link comes up again: its
//   BIRD reconnects, ECMP moves some flows back, lb-2 gives the address back and withdraws its route;
// - graceful drain: lb-1 drained by a commit keeps its data plane and sync, reports that it is not to be stopped
//   while packets came lately, and that it can be stopped once nothing arrives.
// And the metrics of both nodes name the other as in sync, with entries sent and applied; and issue 24's stale entry
// as met (last test) survives the moves.
import test, { type ExecutionContext } from 'ava';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { commitAndPush, startE2eLab, waitApplied, type E2eLab } from '../e2e-lab.js';
import { runTraffic } from '../../src/demo/traffic.js';
import type { FlowsResult } from '../../src/demo/traffic-client.js';
import { routerNextHops, waitForHops } from '../../src/demo/failover.js';
import { exec, nsExec, sleep } from '../../src/lab/netns.js';
import { labNs, setRouterSessions } from '../../src/lab/lab.js';
import { spawnDetached, stopLabProcess, type LabProcess } from '../../src/lab/processes.js';
import { LAB_METRICS_PORT } from '../../src/lab/prometheus.js';

export const SECRET = 'Lk2j3H4g5F6d7S8a9P0o1I2u3Y4t5R6e7W8q9Zx0cVb='; // test-only peer secret
export const FLOWS = 40;
export const VIPS = [
  { mode: 'dsr-l2', file: 'services/web.yaml', host: '203.0.113.10', port: 80 },
  { mode: 'dsr-ipip', file: 'services/api.yaml', host: '203.0.113.20', port: 8080 },
  { mode: 'snat', file: 'services/dns.yaml', host: '203.0.113.40', port: 53 },
  { mode: 'hybrid', file: 'services/game.yaml', host: '203.0.113.50', port: 7777 },
] as const;
export const HOSTS = VIPS.map((v) => v.host);
export const LB1 = '198.51.100.11';
export const LB2 = '198.51.100.12';
export const LB1_SNAT = '198.51.100.111';

/** The lab of the matrix and of its rejoin test: both lb nodes with `--flow-sync` and the peer secret, BGP to a
 * `router` router; resolves once the router has every VIP through both lb nodes. */
export async function startFlowSyncLab(t: ExecutionContext, router: 'bird' | 'frr'): Promise<E2eLab> {
  const lab = await startE2eLab((line) => t.log(`lab: ${line}`), {
    routing: 'bgp',
    router,
    daemonArgs: (scratch) => {
      const file = join(scratch, 'peer.secret');
      writeFileSync(file, `${SECRET}\n`, { mode: 0o600 });
      return ['--flow-sync', '--peer-secret-file', file];
    },
  });
  if ((await waitForHops(lab.state, HOSTS, bothPaths, 90_000, 200)) === null) {
    await lab.close();
    throw new Error(`the router did not learn every VIP from both lb nodes within 90 s: ${JSON.stringify(await hopsOf(lab))}`);
  }
  return lab;
}

/** One lab whose router runs `router` (BGP from both lb nodes' BIRD), and the matrix's tests on it. */
export function survivalMatrix(router: 'bird' | 'frr'): void {
  let lab: E2eLab | null = null;
  let labError: Error | null = null;
  /** Daemons this file started itself (the lab's state file does not know them): stopped before the lab goes. */
  const started: LabProcess[] = [];
  const tag = `[${router} upstream]`;

  test.before(async (t) => {
    t.timeout(240_000);
    try {
      lab = await startFlowSyncLab(t, router);
    } catch (err) {
      labError = err as Error;
    }
  });

  test.after.always(async () => {
    for (const p of started) await stopLabProcess(p).catch(() => undefined);
    await lab?.close();
  });

  function need(): E2eLab {
    if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
    return lab;
  }

  /** lb-1's daemon again, as the lab started it. */
  function restart(l: E2eLab, old: LabProcess): LabProcess {
    const p = spawnDetached('daemon', old.ns, old.argv, join(l.state.stateDir, 'logs', 'daemon-lb-1-restarted.log'), { node: 'lb-1', cwd: join(import.meta.dirname, '..', '..') });
    started.push(p);
    l.state.processes.push(p);
    return p;
  }

  test.serial(`${tag} drain and undrain of lb-1 by commit after the table changed, 40 keep-alive connections per mode: every connection survives on its backend`, async (t) => {
    t.timeout(180_000);
    const l = need();
    let onBe1 = 0;
    let drained = false;
    try {
      const r = await phase(t, l, 'drain+undrain', async () => {
        await changeTable(l, { '198.51.100.21': 'drain' }, 'drain be-1');
        await sleep(1000); // a few sync rounds
        drained = true;
        await setNodeState(t, l, 'drain'); // lb-1 withdraws: the router sends every flow to lb-2
        await sleep(4000);
        await setNodeState(t, l, 'active'); // undrained: ECMP moves some flows back to lb-1
        drained = false;
      });
      onBe1 = ['dsr-l2', 'dsr-ipip', 'hybrid'].reduce((n, m) => n + r.get(m)!.flows.filter((f) => f.backends[0] === 'be-1').length, 0);
      t.log(`${onBe1} DSR connections were on be-1 when the table moved away from it`);
      t.true(onBe1 > 0, 'some connections were on the backend the table moved away from');
      assertSurvived(t, r, 10);
    } finally {
      if (drained) await setNodeState(t, l, 'active').catch(() => undefined);
    }
  });

  test.serial(`${tag} metrics: each lb node reports its peer in sync, entries sent to it and entries applied from it`, async (t) => {
    const l = need();
    for (const [node, address, peer] of [['lb-1', LB1, 'lb-2'], ['lb-2', LB2, 'lb-1']] as const) {
      const m = await metricsOf(l, address);
      t.is(metric(m, 'gitlb_flow_sync_in_sync', `peer="${peer}"`), 1, `${node}: in sync with ${peer}`);
      t.true(metric(m, 'gitlb_flow_sync_entries_total', `peer="${peer}"`, 'event="sent"') > 0, `${node}: sent to ${peer}`);
      t.true(metric(m, 'gitlb_flow_sync_entries_total', `peer="${peer}"`, 'event="applied"') > 0, `${node}: applied from ${peer}`);
    }
  });

  test.serial(`${tag} kill -9 of lb-1's daemon, the router's sessions to lb-1 shut while it is dead, the daemon restarted and in sync, the sessions open again: every connection survives in every mode`, async (t) => {
    t.timeout(180_000);
    const l = need();
    const old = daemonOf(l, 'lb-1');
    let restarted: LabProcess | null = null;
    let shut = false;
    try {
      const r = await phase(t, l, 'kill -9', async () => {
        process.kill(old.pid, 'SIGKILL');
        for (let i = 0; i < 20 && alive(old.pid); i++) await sleep(100);
        t.false(alive(old.pid), 'lb-1\'s daemon is gone');
        await sleep(1000);
        t.false(await holds(l, 'lb2', LB1_SNAT), 'a killed daemon is not a lost node: lb-2 does not take lb-1\'s SNAT address');
        shut = true;
        await lb1Sessions(t, l, 'shut'); // lb-1's flows move to lb-2 while its daemon is dead
        await sleep(2000);
        restarted = restart(l, old);
        // the restarted daemon adopts its pinned data plane and resyncs with lb-2, and lb-2 with it (the flows made
        // on lb-2 while lb-1 was out must be on lb-1 before ECMP sends some of them there)
        let inSync = false;
        for (let i = 0; i < 120 && !inSync; i++) {
          await sleep(250);
          inSync = metric(await metricsOf(l, LB1), 'gitlb_flow_sync_in_sync', 'peer="lb-2"') === 1 &&
            metric(await metricsOf(l, LB2), 'gitlb_flow_sync_in_sync', 'peer="lb-1"') === 1;
        }
        t.true(inSync, 'the restarted daemon and lb-2 are in sync both ways');
        t.deepEqual(await hopsOf(l), Object.fromEntries(HOSTS.map((h) => [h, [LB2]])), 'lb-1 still out of the route until then');
        await sleep(1000);
        await lb1Sessions(t, l, 'open'); // back: ECMP moves some flows back to lb-1
        shut = false;
      });
      assertSurvived(t, r, 10);
    } finally {
      if (shut) await lb1Sessions(t, l, 'open').catch(() => undefined);
      if (!restarted && !alive(old.pid)) restart(l, old);
    }
  });

  test.serial(`${tag} loss of lb-1 (its link down, its path gone when the hold timer runs out) after the table changed, and its return: every connection survives both in every mode; lb-2 serves lb-1's SNAT address and announces it by BGP, then gives it back`, async (t) => {
    t.timeout(180_000);
    const l = need();
    const lb1 = labNs(l.state, 'lb1');
    let tookOver = false;
    let snatRoute: string[] = [];
    let back = false;
    let released = false;
    let withdrawn: number | null = null;
    try {
      const r = await phase(t, l, 'loss of lb-1', async () => {
        t.false(await holds(l, 'lb2', LB1_SNAT), 'lb-2 holds only its own SNAT address while lb-1 lives');
        await changeTable(l, { '198.51.100.21': 'active', '198.51.100.22': 'drain' }, 'be-1 back, be-2 drained');
        await sleep(1000);
        const down = await nsExec(lb1, ['ip', 'link', 'set', 'eth0', 'down']);
        t.is(down.code, 0, down.stderr);
        const ms = await waitForHops(l.state, HOSTS, (h) => h.join() === LB2, 60_000, 100);
        t.not(ms, null, 'the router dropped lb-1\'s path');
        t.log(`loss of lb-1: the router dropped its path ${ms} ms after its link went down`);
        for (let i = 0; i < 40 && !tookOver; i++) {
          await sleep(250);
          tookOver = await holds(l, 'lb2', LB1_SNAT);
        }
        // the taken-over address as a BGP host route via lb-2 in the router's table (replies routed, not switched)
        for (let i = 0; i < 40 && snatRoute.join() !== LB2; i++) {
          await sleep(250);
          snatRoute = await routerNextHops(l.state, LB1_SNAT);
        }
        await sleep(3000); // lb-1's connections carry requests through lb-2
        // lb-1 found again under the same connections: its BIRD reconnects, ECMP moves some flows back to it
        await bringBack(l);
        const backMs = await waitForHops(l.state, HOSTS, bothPaths, 60_000, 100);
        back = backMs !== null;
        t.log(`return of lb-1: both paths again ${backMs} ms after its link came up`);
        for (let i = 0; i < 60 && !released; i++) {
          await sleep(250);
          released = !(await holds(l, 'lb2', LB1_SNAT));
        }
        withdrawn = await waitForHops(l.state, [LB1_SNAT], (h) => h.length === 0, 30_000, 200);
      }, 4000);
      t.true(tookOver, 'lb-2 took lb-1\'s SNAT address over');
      t.deepEqual(snatRoute, [LB2], 'the router installed lb-1\'s SNAT address via lb-2 (BGP host route)');
      t.true(back, 'lb-1 announces again once its link is up');
      t.true(released, 'lb-2 gave lb-1\'s SNAT address back once lb-1 answered again');
      t.not(withdrawn, null, 'and withdrew its host route');
      assertSurvived(t, r, 10);
    } finally {
      await bringBack(l).catch(() => undefined);
      await waitForHops(l.state, HOSTS, bothPaths, 60_000, 200);
    }
  });

  // Under BIRD only: what it proves is the lb node's side (connections counted while drained, "can be stopped"
  // after 30 s of quiet, most of its 45 s); the router's side of a drain (paths withdrawn and back, every connection
  // kept) is the drain and undrain test above, which runs under both routers.
  if (router === 'bird') test.serial(`${tag} graceful drain: lb-1 drained by commit withdraws its routes, keeps forwarding what still arrives; once nothing arrives gitlb status says it can be stopped`, async (t) => {
    t.timeout(150_000);
    const l = need();
    const statusOf = () => exec([process.execPath, join(import.meta.dirname, '..', '..', 'bin', 'gitlb'), 'status', '--repo', l.state.git!.bare], { timeoutMs: 30_000 });
    let firstCanStop = NaN;
    let conns = NaN;
    let translations = NaN;
    let drained = false;
    try {
      const r = await phase(t, l, 'graceful drain', async () => {
        drained = true;
        await setNodeState(t, l, 'drain');
        // its connections were seen a moment ago (the watch samples every 5 s): it must not call itself stoppable
        for (let i = 0; i < 60 && !(firstCanStop === 0 && conns > 0); i++) {
          const m = await metricsOf(l, LB1);
          firstCanStop = metric(m, 'gitlb_drain_can_stop');
          conns = metric(m, 'gitlb_drain_active_connections');
          translations = metric(m, 'gitlb_drain_active_snat_translations');
          if (!(firstCanStop === 0 && conns > 0)) await sleep(500);
        }
        t.log(`drained lb-1: ${conns} connections seen in the last 30 s, ${translations} active SNAT translations`);
      }, 2000);
      t.is(firstCanStop, 0, 'drained with connections seen lately: not stoppable');
      t.true(conns > 0, 'connections seen in the last 30 s (the DSR ones, by their last-seen)');
      assertSurvived(t, r, 5);
      // nothing arrives any more: 30 s quiet and no active translation
      let canStop = NaN;
      for (let i = 0; i < 120 && canStop !== 1; i++) {
        await sleep(500);
        canStop = metric(await metricsOf(l, LB1), 'gitlb_drain_can_stop');
      }
      t.is(canStop, 1, 'lb-1 can be stopped');
      t.is(metric(await metricsOf(l, LB1), 'gitlb_drain_active_connections'), 0, 'no connection seen for 30 s');
      let out = '';
      for (let i = 0; i < 40 && !/lb-1: drained since .*it can be stopped/.test(out); i++) {
        await sleep(500);
        out = (await statusOf()).stdout;
      }
      t.regex(out, /lb-1: drained since .*carries no more traffic.*it can be stopped/);
      t.regex(out, /Flow sync:\n.*NODE\s+PEER\s+IN SYNC/);
      t.regex(out, /lb-1\s+lb-2\s+yes\s+\d+/);
      t.log(out.split('\n').filter((x) => /Flow sync|lb-[12]\s+lb-|drained/.test(x)).join('\n'));
    } finally {
      if (drained) await setNodeState(t, l, 'active').catch(() => undefined);
    }
  });

  // Issue 24's third case as met: connections from fixed ports through lb-1 while be-1 is out (lb-1 records other
  // backends for them), be-1 back, the router sends everything to lb-2, the client reconnects from the same ports
  // through lb-2 (its SYNs pick be-1 for some of them), then the router sends everything to lb-1 again: lb-1 must
  // forward them where lb-2 did. Without the recency mark lb-1 kept its entries of the older choice (other backends,
  // still in the table), and those connections were reset. The router's paths move by its sessions (routeVia).
  test.serial(`${tag} the stale entry as met: connections reconnected through lb-2 from the ports lb-1 recorded while be-1 was out survive the move back to lb-1`, async (t) => {
    t.timeout(180_000);
    const l = need();
    const web = VIPS[0];
    const ports = Array.from({ length: FLOWS }, (_, i) => 20000 + i); // below the ephemeral range: no other flow takes them
    const stopFile = join(l.scratch, 'stop-stale');
    rmSync(stopFile, { force: true });
    try {
      await changeTable(l, { '198.51.100.21': 'drain', '198.51.100.22': 'active' }, 'be-1 out');
      await routeVia(t, l, ['lb-1']);
      const first = await runTraffic(l.view.clientNs, { kind: 'burst', host: web.host, port: web.port, count: FLOWS, sources: l.view.clientsV4, ports, timeoutMs: 5000 });
      t.deepEqual(first.records.filter((x) => !x.backend), [], 'every first connection answered');
      t.false(first.records.some((x) => x.backend === 'be-1'), 'lb-1 recorded other backends while be-1 was out');
      await changeTable(l, { '198.51.100.21': 'active' }, 'be-1 back');
      await routeVia(t, l, ['lb-2']); // lb-1 out
      const run = runTraffic(l.view.clientNs, { kind: 'flows', host: web.host, port: web.port, flows: FLOWS, durationMs: 100_000, intervalMs: 250,
        sources: l.view.clientsV4, ports, timeoutMs: 5000, stopFile });
      const end = Date.now() + 60_000;
      let established = 0;
      while (Date.now() < end && established < FLOWS) {
        const r = await nsExec(l.view.clientNs, ['ss', '-Htn', 'state', 'established', `( sport >= :20000 and sport < :${20000 + FLOWS} )`]);
        established = r.stdout.split('\n').filter((x) => x.includes(`${web.host}:${web.port}`)).length;
        await sleep(250);
      }
      t.is(established, FLOWS, 'reconnected through lb-2');
      await sleep(2000); // lb-2's entries reach lb-1
      await routeVia(t, l, ['lb-1']); // every flow moves back to lb-1
      await sleep(4000);
      await routeVia(t, l, ['lb-1', 'lb-2']);
      await sleep(2000);
      writeFileSync(stopFile, '');
      const r = await run;
      const stale = r.flows.filter((f) => f.backends[0] === 'be-1' && first.records.find((x) => x.sport === f.sport)?.backend !== 'be-1');
      t.log(`${stale.length} of ${FLOWS} reconnected connections went to be-1 where lb-1 had recorded another backend`);
      for (const f of r.flows.filter((x) => !x.survived)) t.log(`  lost: ${f.src}:${f.sport} ${f.backends.join('->')} after ${f.requests} requests: ${f.firstError}`);
      t.true(stale.length > 0, 'the case occurred');
      t.is(r.flows.filter((f) => f.backends.length > 1).length, 0, 'no connection changed backend');
      t.is(r.flows.filter((f) => f.survived).length, FLOWS, 'every connection survived (0 resets)');
    } finally {
      writeFileSync(stopFile, '');
      await routeVia(t, l, ['lb-1', 'lb-2']).catch(() => undefined);
    }
  });
}

export const bothPaths = (h: string[]) => h.join() === [LB1, LB2].join();
export const hopsOf = async (l: E2eLab) => Object.fromEntries(await Promise.all(HOSTS.map(async (v) => [v, await routerNextHops(l.state, v)] as const)));

/** lb-1 drained or undrained by a commit; resolves once the router has dropped or installed its path for every VIP. */
async function setNodeState(t: ExecutionContext, l: E2eLab, state: 'drain' | 'active'): Promise<void> {
  const rev = await commitAndPush(l, 'nodes/lb-1.yaml', (y) => y.replace(/state: (active|drain)/, `state: ${state}`), `${state} lb-1`);
  const ms = await waitForHops(l.state, HOSTS, state === 'drain' ? (h) => h.join() === LB2 : bothPaths, 60_000, 100);
  if (ms === null) throw new Error(`lb-1 ${state}: the router's paths did not follow within 60 s: ${JSON.stringify(await hopsOf(l))}`);
  t.log(`lb-1 ${state}: the router's paths followed ${ms} ms after the push`);
  await waitApplied(l, rev, ['lb-1', 'lb-2'], 60_000);
}

/** The router's sessions to lb-1 shut or opened at the router's daemon (what an upstream operator does while lb-1's
 * daemon is dead: it cannot apply a drain); resolves once the router has dropped or installed lb-1's path for every
 * VIP. At the router, so that lb-1's restarted daemon reloading its BIRD cannot bring the path back early. */
async function lb1Sessions(t: ExecutionContext, l: E2eLab, verb: 'shut' | 'open'): Promise<void> {
  await routeVia(t, l, verb === 'shut' ? ['lb-2'] : ['lb-1', 'lb-2']);
}

/** The router's sessions to the lb nodes not in `nodes` shut, to those in it open (at the router's daemon); resolves
 * once the router's paths for every VIP are exactly those nodes. */
export async function routeVia(t: ExecutionContext, l: E2eLab, nodes: ('lb-1' | 'lb-2')[]): Promise<void> {
  const wanted = nodes.map((n) => (n === 'lb-1' ? LB1 : LB2)).sort();
  const want = wanted.join();
  // make before break: a session opened takes seconds to establish (BGP connect retry) while a shut one is gone at
  // once; shutting first left the router with no path for 4 s, and the client's requests timed out in that window
  const began = Date.now();
  for (const n of nodes) await setRouterSessions(l.state, n, true);
  const opened = await waitForHops(l.state, HOSTS, (h) => wanted.every((x) => h.includes(x)), 60_000, 100);
  if (opened === null) throw new Error(`router sessions to ${nodes.join(', ')} opened: the router's paths did not follow within 60 s: ${JSON.stringify(await hopsOf(l))}`);
  for (const n of ['lb-1', 'lb-2'] as const) if (!nodes.includes(n)) await setRouterSessions(l.state, n, false);
  const closed = await waitForHops(l.state, HOSTS, (h) => h.join() === want, 60_000, 100);
  const ms = closed === null ? null : Date.now() - began;
  if (ms === null) throw new Error(`router sessions to ${nodes.join(', ')} only: the router's paths did not follow within 60 s: ${JSON.stringify(await hopsOf(l))}`);
  t.log(`router sessions open to ${nodes.join(' and ')} only: its paths followed in ${ms} ms`);
}

/** A real's line in a service file gets `state: <state>` (or loses its state line: 'active'). */
function setRealState(text: string, address: string, state: 'drain' | 'active'): string {
  const lines = text.split('\n');
  const at = lines.findIndex((l) => l.trim() === `- address: ${address}`);
  if (at < 0) throw new Error(`no real ${address}`);
  const indent = /^(\s*)-/.exec(lines[at]!)![1]!.length + 2;
  let end = at + 1;
  while (end < lines.length && lines[end]!.length - lines[end]!.trimStart().length === indent && lines[end]!.trim() !== '') end++;
  const body = lines.slice(at + 1, end).filter((l) => !l.trim().startsWith('state:'));
  if (state === 'drain') body.push(`${' '.repeat(indent)}state: drain`);
  return [...lines.slice(0, at + 1), ...body, ...lines.slice(end)].join('\n');
}

/** One commit that sets the states of reals in the DSR services (`commit -am` takes every edited file), applied by
 * both lb nodes. */
export async function changeTable(l: E2eLab, changes: Record<string, 'drain' | 'active'>, message: string): Promise<void> {
  const edit = (s: string) => Object.entries(changes).reduce((acc, [a, st]) => setRealState(acc, a, st), s);
  const [last, ...rest] = VIPS.filter((x) => x.mode !== 'snat').map((v) => v.file).reverse();
  for (const f of rest) writeFileSync(join(l.clone, f), edit(readFileSync(join(l.clone, f), 'utf8')));
  const rev = await commitAndPush(l, last!, edit, message);
  await waitApplied(l, rev, ['lb-1', 'lb-2'], 60_000);
}

/** Until the client holds FLOWS established connections to every VIP (ss in the client namespace). */
async function waitEstablished(l: E2eLab, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const r = await nsExec(l.view.clientNs, ['ss', '-Htn', 'state', 'established']);
    const peers = r.stdout.split('\n').map((x) => x.trim().split(/\s+/).pop() ?? '');
    if (VIPS.every((v) => peers.filter((p) => p === `${v.host}:${v.port}`).length >= FLOWS)) return true;
    await sleep(250);
  }
  return false;
}

/** Traffic to every VIP at once, until `events` is done and `afterMs` more have passed. */
export async function phase(t: ExecutionContext, l: E2eLab, name: string, events: () => Promise<void>, afterMs = 3000): Promise<Map<string, FlowsResult>> {
  const stopFile = join(l.scratch, `stop-${name.replace(/\W+/g, '-')}`);
  rmSync(stopFile, { force: true });
  const runs = VIPS.map((v) => runTraffic(l.view.clientNs, { kind: 'flows', host: v.host, port: v.port, flows: FLOWS, durationMs: 150_000,
    intervalMs: 250, sources: l.view.clientsV4, timeoutMs: 5000, stopFile }));
  const began = Date.now();
  const mark = (what: string) => t.log(`${name}: +${Date.now() - began} ms ${what}`);
  try {
    // every connection open (the client may take seconds to start on a loaded machine), then synced (rounds of 250 ms)
    t.true(await waitEstablished(l, 60_000), `${name}: ${VIPS.length * FLOWS} connections established`);
    await sleep(1500);
    mark('events begin');
    await events();
    mark('events done');
    await sleep(afterMs);
  } finally {
    writeFileSync(stopFile, '');
  }
  const results = await Promise.all(runs);
  const out = new Map<string, FlowsResult>();
  VIPS.forEach((v, i) => out.set(v.mode, results[i]!));
  for (const v of VIPS) {
    const r = out.get(v.mode)!;
    const survived = r.flows.filter((f) => f.survived).length;
    const switched = r.flows.filter((f) => f.backends.length > 1).length;
    t.log(`${name}: ${v.mode} ${v.host}:${v.port}: ${survived}/${FLOWS} survived, ${switched} changed backend`);
    for (const f of r.flows.filter((x) => !x.survived)) t.log(`  lost: ${f.src}:${f.sport} ${f.backends.join('->')} after ${f.requests} requests: ${f.firstError}`);
  }
  return out;
}

export function assertSurvived(t: ExecutionContext, results: Map<string, FlowsResult>, minRequests: number): void {
  for (const v of VIPS) {
    const r = results.get(v.mode)!;
    t.is(r.flows.length, FLOWS, v.mode);
    t.true(r.flows.every((f) => f.requests >= minRequests), `${v.mode}: every connection carried requests through the events`);
    t.is(r.flows.filter((f) => f.backends.length > 1).length, 0, `${v.mode}: no connection changed backend`);
    t.is(r.flows.filter((f) => f.survived).length, FLOWS, `${v.mode}: every connection survived`);
  }
}

export const daemonOf = (l: E2eLab, node: string): LabProcess => [...l.state.processes].reverse().find((p) => p.role === 'daemon' && p.node === node)!;
export const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

export async function metricsOf(l: E2eLab, address: string): Promise<string> {
  const r = await nsExec(labNs(l.state, 'router'), ['curl', '-s', '--max-time', '5', `http://${address}:${LAB_METRICS_PORT}/metrics`], { timeoutMs: 10_000 });
  return r.code === 0 ? r.stdout : '';
}
export const metric = (text: string, name: string, ...labels: string[]) => {
  const line = text.split('\n').find((x) => x.startsWith(`${name}{`) && labels.every((y) => x.includes(y)));
  return line ? Number(line.split(' ').pop()) : NaN;
};

/** lb-1 found again: its link up with what the lab gave it (a link down drops its IPv6 addresses and its routes). */
export async function bringBack(l: E2eLab): Promise<void> {
  const ns = labNs(l.state, 'lb1');
  await nsExec(ns, ['ip', 'link', 'set', 'eth0', 'up']);
  const link = l.state.plan.links.find((x) => x.a.ns === 'lb1')!;
  for (const a of link.a.addrs) await nsExec(ns, ['ip', 'addr', 'replace', a, 'dev', 'eth0', ...(a.includes(':') ? ['nodad'] : [])]);
  for (const r of l.state.plan.routes.filter((x) => x.ns === 'lb1'))
    await nsExec(ns, ['ip', ...(r.dest.includes(':') ? ['-6'] : []), 'route', 'replace', r.dest, ...r.spec]);
}

/** Does the lab namespace `ns` (lb1, lb2) hold `a` as a host address on eth0? */
export const holds = async (l: E2eLab, ns: string, a: string) =>
  (await nsExec(labNs(l.state, ns), ['ip', '-o', 'addr', 'show', 'dev', 'eth0'])).stdout.includes(` ${a}/${a.includes(':') ? 128 : 32} `);
