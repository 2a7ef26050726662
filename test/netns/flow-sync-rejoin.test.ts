// An lb node that comes back with EMPTY maps (a reboot, or its pins lost) must not take flows before its peer's
// connection state has reached it (issue 24; docs/bgp.md "Rejoining with empty maps"). Two lb nodes with
// `--flow-sync` announce through BIRD to the lab's BIRD router (ECMP). The router's sessions to lb-1 are shut, so
// 40 keep-alive connections per VIP (dsr-l2, dsr-ipip, snat, hybrid: 160) are made through lb-2 alone (every SNAT
// translation is lb-2's); the table changes under them (be-1's weight down to 1 in the DSR services: it stays in
// their rings, but almost none of the DSR connections on it are the table's choice any more; a drained real would
// not do: a peer's entry naming a real outside the ring is refused by design, docs/datapath.md). Then lb-1 is "rebooted": its daemon killed, its pins removed (its XDP program detached, its maps
// gone), the daemon started again on empty maps, and lb-2's table is late: lb-1 refuses lb-2's peer messages with a
// TCP reset for 8 s after its BIRD is reloaded (as a big table, or a loaded or slow peer, would make it late; a reset,
// not a drop, so that lb-2 does not take lb-1 for lost). The router's sessions to lb-1 are opened at once: lb-1's
// path must stay out while lb-2's table cannot reach it, and come back only after lb-1 logged that it arrived; then
// ECMP moves some of the connections to lb-1, which must carry every one (lb-2's translations and the DSR entries
// on be-1). Without the gate lb-1 announces as soon as its config is applied and its XDP program attached, and the
// connections ECMP moves to it reset (seen: revert the gate and run this file).
// The second test: lb-1 LOST (its link down) while ECMP spreads the connections over both nodes, so lb-1 made about
// half of the SNAT translations; lb-2 takes lb-1's SNAT address over; lb-1 is rebooted while lost (daemon killed,
// pins removed), its link comes back and its daemon starts on empty maps. lb-1 must get its own translations back
// from lb-2's copies (flow-sync.ts needOwn / ownBack) and lb-2 must keep lb-1's address until then (snat-takeover.ts
// handBackReady): without that, lb-2 gives the address back as soon as lb-1's kernel answers, and the replies of the
// connections lb-1 translated reach a node with no translation for them.
import test from 'ava';
import { existsSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { commitAndPush, waitApplied, type E2eLab } from '../e2e-lab.js';
import { waitForHops, routerNextHops } from '../../src/demo/failover.js';
import { nsExec, sleep } from '../../src/lab/netns.js';
import { labNs, setRouterSessions } from '../../src/lab/lab.js';
import { spawnDetached, stopLabProcess, type LabProcess } from '../../src/lab/processes.js';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { HOSTS, LB1, LB1_SNAT, LB2, VIPS, alive, startFlowSyncLab, assertSurvived, bothPaths, bringBack, daemonOf, holds, hopsOf, metric, metricsOf,
  phase, routeVia } from '../lib/survival-matrix.js';

let lab: E2eLab | null = null;
let labError: Error | null = null;
const started: LabProcess[] = [];

test.before(async (t) => {
  t.timeout(240_000);
  try {
    lab = await startFlowSyncLab(t, 'bird');
  } catch (err) {
    labError = err as Error;
  }
});

test.after.always(async () => {
  for (const p of started) await stopLabProcess(p).catch(() => undefined);
  await lab?.close();
});

const BE1 = '198.51.100.21';

/** The real `address` of a service file gets `weight: <weight>` (its other lines kept). */
function setWeight(text: string, address: string, weight: number): string {
  const lines = text.split('\n');
  const at = lines.findIndex((x) => x.trim() === `- address: ${address}`);
  if (at < 0) throw new Error(`no real ${address}`);
  const indent = ' '.repeat(/^(\s*)-/.exec(lines[at]!)![1]!.length + 2);
  let end = at + 1;
  while (end < lines.length && lines[end]!.startsWith(indent) && !lines[end]!.trimStart().startsWith('-')) end++;
  const body = lines.slice(at + 1, end).filter((x) => !x.trim().startsWith('weight:'));
  return [...lines.slice(0, at + 1), `${indent}weight: ${weight}`, ...body, ...lines.slice(end)].join('\n');
}

/** One commit giving be-1 `weight` in the DSR services, applied by the nodes named. */
async function weighBe1(l: E2eLab, weight: number, nodes: string[]): Promise<void> {
  const [last, ...rest] = VIPS.filter((x) => x.mode !== 'snat').map((v) => v.file).reverse();
  for (const f of rest) writeFileSync(join(l.clone, f), setWeight(readFileSync(join(l.clone, f), 'utf8'), BE1, weight));
  const rev = await commitAndPush(l, last!, (x) => setWeight(x, BE1, weight), `be-1 weight ${weight}`);
  await waitApplied(l, rev, nodes, 60_000);
}

const PEER_BLOCK = 'glbrejoin';

/** lb-1 answers lb-2's peer-channel connections (port 7946) with a TCP reset, or again normally. */
async function refuseLb2(l: E2eLab, on: boolean): Promise<void> {
  const ns = labNs(l.state, 'lb1');
  if (!on) {
    await nsExec(ns, ['nft', 'delete', 'table', 'inet', PEER_BLOCK]);
    return;
  }
  for (const cmd of [['add', 'table', 'inet', PEER_BLOCK], ['add', 'chain', 'inet', PEER_BLOCK, 'in', '{ type filter hook input priority 0 ; }'],
    ['add', 'rule', 'inet', PEER_BLOCK, 'in', 'ip', 'saddr', LB2, 'tcp', 'dport', '7946', 'reject', 'with', 'tcp', 'reset']]) {
    const r = await nsExec(ns, ['nft', ...cmd]);
    if (r.code !== 0) throw new Error(`nft ${cmd.join(' ')}: ${r.stderr}`);
  }
}

/** Does lb-1's interface carry an XDP program (`ip -d -j link`)? */
async function xdpOn(l: E2eLab): Promise<boolean> {
  const r = await nsExec(labNs(l.state, 'lb1'), ['ip', '-d', '-j', 'link', 'show', 'dev', 'eth0']);
  const x = (JSON.parse(r.stdout || '[]') as { xdp?: { prog?: unknown; attached?: unknown[] } }[])[0]?.xdp;
  return x !== undefined && (x.prog !== undefined || (x.attached?.length ?? 0) > 0);
}

test.serial('lb-1 rebooted with empty maps while every connection runs through lb-2: the router gets lb-1\'s path back only after lb-1 received lb-2\'s whole table, and every connection survives in every mode', async (t) => {
  t.timeout(240_000);
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  const l = lab;
  const old = daemonOf(l, 'lb-1');
  const pinAt = old.argv.indexOf('--pin-root');
  t.true(pinAt > 0, 'the lab gives the daemon --pin-root');
  const pins = join(old.argv[pinAt + 1]!, 'lb-1');
  const logFile = join(l.state.stateDir, 'logs', 'daemon-lb-1-rebooted.log');
  let restarted: LabProcess | null = null;
  let pathBackLog = '';
  let drained = false;
  let blocked = false;
  let early = false;
  let heldMetric = NaN;
  try {
    await routeVia(t, l, ['lb-2']); // every connection is made through lb-2
    const r = await phase(t, l, 'reboot of lb-1', async () => {
      drained = true;
      await weighBe1(l, 1, ['lb-1', 'lb-2']); // be-1's connections: no longer the table's choice
      await sleep(1000);
      process.kill(old.pid, 'SIGKILL');
      for (let i = 0; i < 20 && alive(old.pid); i++) await sleep(100);
      t.false(alive(old.pid), 'lb-1\'s daemon is gone');
      rmSync(pins, { recursive: true, force: true }); // a reboot: nothing pinned survives
      let detached = false;
      for (let i = 0; i < 40 && !detached; i++) {
        detached = !(await xdpOn(l));
        if (!detached) await sleep(100);
      }
      t.true(detached, 'lb-1\'s XDP program went with its pins');
      t.false(existsSync(join(pins, 'lb_vips')), 'no maps left to adopt');
      await refuseLb2(l, true);
      blocked = true;
      restarted = spawnDetached('daemon', old.ns, old.argv, logFile, { node: 'lb-1', cwd: join(import.meta.dirname, '..', '..') });
      started.push(restarted);
      l.state.processes.push(restarted);
      // the restarted daemon has applied its config and told its BIRD what to announce: only now may the router listen
      let reloaded = false;
      for (let i = 0; i < 240 && !reloaded; i++) {
        await sleep(250);
        reloaded = existsSync(logFile) && /bgp: BIRD reloaded/.test(readFileSync(logFile, 'utf8'));
      }
      t.true(reloaded, 'the restarted lb-1 reloaded its BIRD');
      await setRouterSessions(l.state, 'lb-1', true);
      // lb-2's table cannot reach lb-1: lb-1's path must stay out of the router's table
      const until = Date.now() + 8000;
      while (Date.now() < until) {
        if ((await routerNextHops(l.state, HOSTS[0])).includes(LB1)) early = true;
        await sleep(250);
      }
      heldMetric = metric(await metricsOf(l, LB1), 'gitlb_bgp_rejoin_held');
      await refuseLb2(l, false);
      blocked = false;
      const ms = await waitForHops(l.state, HOSTS, bothPaths, 60_000, 100);
      pathBackLog = readFileSync(logFile, 'utf8'); // read the moment the router has lb-1's path again
      t.not(ms, null, `the router has lb-1's path again: ${JSON.stringify(await hopsOf(l))}`);
      t.log(`reboot of lb-1: the router had its path again ${ms} ms after its sessions opened`);
    }, 4000);
    t.false(early, 'the router had no path to lb-1 while lb-2\'s table could not reach it');
    t.is(heldMetric, 1, 'lb-1 exposed its announcements as held meanwhile (gitlb_bgp_rejoin_held)');
    const lines = pathBackLog.split('\n');
    const at = (re: RegExp) => lines.findIndex((x) => re.test(x));
    const held = at(/rejoining with empty maps: announcements held until lb-2/);
    const received = at(/flow sync: lb-2's whole table received/);
    const released = at(/rejoin: resync received from every peer \(lb-2\).*announcements released/);
    t.log(lines.filter((x) => /rejoin|whole table|BIRD reloaded/.test(x)).join('\n'));
    t.true(held >= 0, 'lb-1 logged that it holds its announcements');
    t.true(received > held, 'then that lb-2\'s whole table arrived');
    t.true(released > held, 'and released its announcements for that (not by the bound) before the router had its path');
    const m = await metricsOf(l, LB1);
    t.is(metric(m, 'gitlb_flow_sync_resync_received', 'peer="lb-2"'), 1, 'lb-1 exposes lb-2\'s resync as received');
    t.is(metric(m, 'gitlb_bgp_rejoin_held'), 0, 'and its gate as released');
    t.is(metric(await metricsOf(l, LB2), 'gitlb_flow_sync_in_sync', 'peer="lb-1"'), 1, 'lb-2 in sync with the rebooted lb-1');
    const moved = (await routerNextHops(l.state, HOSTS[0])).includes(LB1) && (await routerNextHops(l.state, HOSTS[0])).includes(LB2);
    t.true(moved, 'ECMP over both nodes at the end');
    const onBe1 = ['dsr-l2', 'dsr-ipip', 'hybrid'].reduce((n, mode) => n + r.get(mode)!.flows.filter((f) => f.backends[0] === 'be-1').length, 0);
    t.log(`${onBe1} DSR connections were on be-1 when its weight went down to 1`);
    t.true(onBe1 > 0, 'the case occurred: DSR connections on a real the table no longer chooses for them');
    assertSurvived(t, r, 10);
  } finally {
    if (blocked) await refuseLb2(l, false).catch(() => undefined);
    if (!restarted && !alive(old.pid)) {
      const p = spawnDetached('daemon', old.ns, old.argv, logFile, { node: 'lb-1', cwd: join(import.meta.dirname, '..', '..') });
      started.push(p);
    }
    await setRouterSessions(l.state, 'lb-1', true).catch(() => undefined);
    if (drained) await weighBe1(l, 100, ['lb-2']).catch(() => undefined);
  }
});

/** lb-1's own SNAT translations (owner 0) in its pinned lb_snat_rev, read from bpffs. */
function ownTranslations(pins: string): number {
  const m = BpfMap.open(join(pins, 'lb_snat_rev'));
  try {
    return m.entries().filter(([, v]) => v[41] === 0).length;
  } finally {
    m.close();
  }
}

async function waitFor(what: () => Promise<boolean> | boolean, rounds: number, ms = 250): Promise<boolean> {
  for (let i = 0; i < rounds; i++) {
    if (await what()) return true;
    await sleep(ms);
  }
  return what();
}

test.serial('lb-1 lost with SNAT connections it translated, rebooted with empty maps while lost, back: lb-2 keeps lb-1\'s SNAT address until lb-1 has its own translations back, and every connection survives in every mode', async (t) => {
  t.timeout(240_000);
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  const l = lab;
  const old = daemonOf(l, 'lb-1');
  const pins = join(old.argv[old.argv.indexOf('--pin-root') + 1]!, 'lb-1');
  const lb1 = labNs(l.state, 'lb1');
  const lb2Log = daemonOf(l, 'lb-2').log;
  const lb2LogFrom = statSync(lb2Log).size;
  const logFile = join(l.state.stateDir, 'logs', 'daemon-lb-1-rebooted-lost.log');
  let restarted: LabProcess | null = null;
  let down = false;
  let sessionsShut = false;
  let ownBefore = 0;
  let tookOver = false;
  let heldAtDaemonUp = false;
  let pendingAtDaemonUp = NaN;
  let pendingAfter = NaN;
  let metricsAfter = '';
  let released = false;
  try {
    await routeVia(t, l, ['lb-1', 'lb-2']);
    const r = await phase(t, l, 'loss and reboot of lb-1', async () => {
      ownBefore = ownTranslations(pins);
      const d = await nsExec(lb1, ['ip', 'link', 'set', 'eth0', 'down']);
      t.is(d.code, 0, d.stderr);
      down = true;
      t.not(await waitForHops(l.state, HOSTS, (h) => h.join() === LB2, 60_000, 100), null, 'the router dropped lb-1\'s path');
      tookOver = await waitFor(() => holds(l, 'lb2', LB1_SNAT), 40);
      // the reboot, while lost: nothing pinned survives
      process.kill(old.pid, 'SIGKILL');
      await waitFor(() => !alive(old.pid), 20, 100);
      rmSync(pins, { recursive: true, force: true });
      // its BIRD still has the file of before the reboot: the router listens to it again once the daemon reloaded it
      await setRouterSessions(l.state, 'lb-1', false);
      sessionsShut = true;
      await bringBack(l);
      down = false;
      restarted = spawnDetached('daemon', old.ns, old.argv, logFile, { node: 'lb-1', cwd: join(import.meta.dirname, '..', '..') });
      started.push(restarted);
      l.state.processes.push(restarted);
      t.true(await waitFor(() => existsSync(logFile) && /bgp: BIRD reloaded/.test(readFileSync(logFile, 'utf8')), 240), 'the rebooted lb-1 reloaded its BIRD');
      // lb-1's kernel has answered lb-2's probes for seconds by now: without the wait lb-2 has given the address back
      // read before the address itself: a hold that ends between the two reads cannot make the metric look wrong
      pendingAtDaemonUp = metric(await metricsOf(l, LB2), 'gitlb_snat_handback_pending', 'owner="lb-1"', `address="${LB1_SNAT}"`);
      heldAtDaemonUp = await holds(l, 'lb2', LB1_SNAT);
      await setRouterSessions(l.state, 'lb-1', true);
      sessionsShut = false;
      const ms = await waitForHops(l.state, HOSTS, bothPaths, 60_000, 100);
      t.not(ms, null, `the router has lb-1's path again: ${JSON.stringify(await hopsOf(l))}`);
      released = await waitFor(async () => !(await holds(l, 'lb2', LB1_SNAT)), 120);
      metricsAfter = await metricsOf(l, LB2);
      pendingAfter = metric(metricsAfter, 'gitlb_snat_handback_pending', 'owner="lb-1"');
    }, 4000);
    t.log(`lb-1 had made ${ownBefore} of the SNAT translations before it was lost`);
    t.true(ownBefore > 0, 'the case occurred: SNAT connections lb-1 translated itself');
    t.true(tookOver, 'lb-2 took lb-1\'s SNAT address over while it was lost');
    t.true(heldAtDaemonUp, 'lb-2 still served lb-1\'s address when lb-1\'s daemon came up (its kernel had answered long before)');
    t.true(released, 'and gave it back afterwards');
    t.is(pendingAtDaemonUp, 1, 'while held for the returned lb-1, lb-2 said so: gitlb_snat_handback_pending{owner="lb-1"} 1');
    t.regex(metricsAfter, /^# TYPE gitlb_/m, 'lb-2\'s metrics were read after the give-back (a failed read has no series either)');
    t.true(Number.isNaN(pendingAfter), 'and no longer once given back');
    const lb2Lines = readFileSync(lb2Log, 'utf8').slice(lb2LogFrom).split('\n');
    const at = (re: RegExp) => lb2Lines.findIndex((x) => re.test(x));
    t.log(lb2Lines.filter((x) => /snat takeover|own SNAT translations/.test(x)).join('\n'));
    const sentBack = at(/flow sync: lb-1's own SNAT translations sent back: [1-9]/);
    const ready = at(/snat takeover: lb-1 has its own SNAT translations back/);
    const holding = at(new RegExp(`snat takeover: holding lb-1's SNAT address ${LB1_SNAT.replace(/\./g, '\\.')} until it has its own translations \\(waiting for: `));
    t.true(holding >= 0 && holding < ready, 'lb-2 logged (and wrote to its status) that it holds lb-1\'s address, and for what, before it was ready');
    const givenBack = at(/snat takeover: giving lb-1's SNAT address \S+ back/);
    t.true(sentBack >= 0, 'lb-2 sent lb-1 the copies of its translations');
    t.true(ready > sentBack && givenBack > ready, 'and gave the address back only after that');
    const lb1Lines = readFileSync(logFile, 'utf8');
    t.regex(lb1Lines, /flow sync: lb-2's whole table received \(resync \d+, with [1-9]\d* own SNAT translations back\)/);
    const returned = metric(await metricsOf(l, LB1), 'gitlb_flow_sync_entries_total', 'peer="lb-2"', 'event="returned"');
    t.log(`lb-1 took ${returned} of its own translations back from lb-2`);
    t.true(returned > 0);
    assertSurvived(t, r, 10);
  } finally {
    if (down) await bringBack(l).catch(() => undefined);
    if (!restarted && !alive(old.pid)) {
      const p = spawnDetached('daemon', old.ns, old.argv, logFile, { node: 'lb-1', cwd: join(import.meta.dirname, '..', '..') });
      started.push(p);
    }
    if (sessionsShut) await setRouterSessions(l.state, 'lb-1', true).catch(() => undefined);
  }
});
