// IPv6 SNAT takeover end to end (issue 24): the lab with IPv6 SNAT addresses (lb-1 2001:db8:1::111, lb-2
// 2001:db8:1::112), the snat service dns on the IPv6 VIP 2001:db8:ff::40 with the IPv6 reals of be-1 and be-2 (the
// hybrid game is left out: its UDP would need an IPv4 SNAT address), both lb nodes with `gitlb run --flow-sync`,
// BIRD on the lb nodes and FRR on the router (the takeover's BGP host route proven against FRR; the IPv4 takeover
// runs against BIRD and FRR in test/lib/survival-matrix.ts). 40 keep-alive IPv6 connections through the SNAT VIP,
// spread over both lb nodes by the router's ECMP; then lb-1 is lost (its link down):
// - the router drops lb-1's path when the hold timer runs out; lb-2 takes 2001:db8:1::111 over: holds it on its
//   interface, sends unsolicited neighbour advertisements (override, to all nodes) that the reals receive, and the
//   reals' neighbour entries for it name lb-2's MAC; FRR installs 2001:db8:1::111/128 via lb-2 (BGP host route);
// - every connection survives on its real (lb-1's translations, synced to lb-2, answer the reals' replies to
//   lb-1's address there);
// - lb-1 back: lb-2 gives the address back and withdraws the route, lb-1 announces its address again (an
//   unsolicited NA from lb-1's MAC).
import test from 'ava';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startE2eLab, type E2eLab } from '../e2e-lab.js';
import { bringBack, holds } from '../lib/survival-matrix.js';
import { routerNextHops, waitForHops } from '../../src/demo/failover.js';
import { runTraffic } from '../../src/demo/traffic.js';
import { labNs } from '../../src/lab/lab.js';
import { nsArgv, nsExec, sleep } from '../../src/lab/netns.js';

const SECRET = 'cVRlZeMLCxyw3z2odUuUITeI1Gf3CSi2nHouDKUk4CE='; // test-only peer secret
const VIP = '2001:db8:ff::40';
const PORT = 53;
const LB1 = '2001:db8:1::11';
const LB2 = '2001:db8:1::12';
const LB1_SNAT = '2001:db8:1::111';
const LB2_SNAT = '2001:db8:1::112';
const REALS = { 'be-1': '2001:db8:1::21', 'be-2': '2001:db8:1::22' } as const;
const FLOWS = 40;

let lab: E2eLab | null = null;
let labError: Error | null = null;
const need = () => {
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  return lab;
};

/** sample-config-repo with IPv6 SNAT: lb nodes' snatAddress IPv6, dns on an IPv6 VIP to IPv6 reals, no hybrid. */
function ipv6Snat(dir: string): void {
  const edit = (file: string, f: (s: string) => string) => writeFileSync(join(dir, file), f(readFileSync(join(dir, file), 'utf8')));
  edit('nodes/lb-1.yaml', (s) => s.replace(/snatAddress: \S+/, `snatAddress: ${LB1_SNAT}`));
  edit('nodes/lb-2.yaml', (s) => s.replace(/snatAddress: \S+/, `snatAddress: ${LB2_SNAT}`));
  edit('services/dns.yaml', (s) => s.replace(/vip: \S+/, `vip: ${VIP}`)
    .replace('- address: 198.51.100.21', `- address: ${REALS['be-1']}`).replace('- address: 198.51.100.22', `- address: ${REALS['be-2']}`));
  rmSync(join(dir, 'services/game.yaml'));
}

test.before(async (t) => {
  t.timeout(240_000);
  try {
    lab = await startE2eLab((s) => t.log(`lab: ${s}`), {
      routing: 'bgp',
      router: 'frr',
      editConfig: ipv6Snat,
      daemonArgs: (scratch) => {
        const file = join(scratch, 'peer.secret');
        writeFileSync(file, `${SECRET}\n`, { mode: 0o600 });
        return ['--flow-sync', '--peer-secret-file', file];
      },
    });
    if ((await waitForHops(lab.state, [VIP], (h) => h.join() === [LB1, LB2].join(), 90_000, 200)) === null)
      throw new Error(`FRR did not learn ${VIP} from both lb nodes within 90 s: ${await routerNextHops(lab.state, VIP)}`);
  } catch (err) {
    labError = err as Error;
  }
});

/** tcpdump processes this file started: stopped before the lab goes, whatever failed. */
const captures: { stop(): void }[] = [];

test.after.always(async () => {
  for (const c of captures) c.stop();
  await lab?.close();
});

const macOf = async (l: E2eLab, ns: string) => (JSON.parse((await nsExec(labNs(l.state, ns), ['ip', '-j', 'link', 'show', 'dev', 'eth0'])).stdout) as { address: string }[])[0]!.address;
const neighbourMac = async (l: E2eLab, ns: string, a: string) => /lladdr (\S+)/.exec((await nsExec(labNs(l.state, ns), ['ip', '-6', 'neigh', 'show', a, 'dev', 'eth0'])).stdout)?.[1] ?? null;

/** Neighbour advertisements a real receives (tcpdump in its namespace), as tcpdump prints them (-e: with MACs). */
function captureNa(l: E2eLab, ns: string) {
  const argv = nsArgv(labNs(l.state, ns), ['tcpdump', '-l', '-n', '-e', '-v', '-i', 'eth0', 'icmp6 and ip6[40] == 136']);
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  captures.push({ stop: () => child.kill('SIGTERM') });
  let out = '';
  let ready: () => void;
  const listening = new Promise<void>((r) => (ready = r));
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => d.toString().includes('listening on') && ready());
  return {
    listening: Promise.race([listening, sleep(10_000)]),
    /** Unsolicited advertisements (override, not solicited, to ff02::1) of `target` sent from `mac`. */
    unsolicited: (mac: string, target: string) => out.split('\n').filter((x) => x.includes(` ${mac} > 33:33:00:00:00:01, `) &&
      x.includes(`neighbor advertisement, length 32, tgt is ${target}, Flags [override]`)).length,
    text: () => out,
  };
}

/** Until the client holds FLOWS established connections to the VIP. */
async function waitEstablished(l: E2eLab, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const r = await nsExec(l.view.clientNs, ['ss', '-Htn6', 'state', 'established']);
    if (r.stdout.split('\n').filter((x) => x.trim().endsWith(`[${VIP}]:${PORT}`)).length >= FLOWS) return true;
    await sleep(250);
  }
  return false;
}

test.serial('IPv6 SNAT: lb-1 lost, lb-2 takes 2001:db8:1::111 over (NA at the reals, their neighbour entries on lb-2, FRR routes the /128 via lb-2), 40/40 IPv6 SNAT connections survive; given back when lb-1 returns', async (t) => {
  t.timeout(240_000);
  const l = need();
  const [lb1Mac, lb2Mac] = [await macOf(l, 'lb1'), await macOf(l, 'lb2')];
  const nas = Object.fromEntries(Object.keys(REALS).map((n) => [n, captureNa(l, n.replace('-', ''))]));
  const stopFile = join(l.scratch, 'snat6.stop');
  const running = runTraffic(l.view.clientNs, { kind: 'flows', host: VIP, port: PORT, flows: FLOWS, durationMs: 150_000, intervalMs: 250,
    sources: l.view.clientsV6, timeoutMs: 5000, stopFile });
  running.catch(() => undefined);
  let snatRoute: string[] = [];
  let tookOver = false;
  const before: Record<string, string | null> = {};
  const after: Record<string, string | null> = {};
  try {
    await Promise.all(Object.values(nas).map((c) => c.listening));
    t.true(await waitEstablished(l, 60_000), `${FLOWS} IPv6 connections established`);
    await sleep(1500); // synced (rounds of 250 ms)
    t.false(await holds(l, 'lb2', LB1_SNAT), 'lb-2 holds only its own SNAT address while lb-1 lives');
    t.true(await holds(l, 'lb2', LB2_SNAT));
    for (const n of Object.keys(REALS)) before[n] = await neighbourMac(l, n.replace('-', ''), LB1_SNAT);
    const down = await nsExec(labNs(l.state, 'lb1'), ['ip', 'link', 'set', 'eth0', 'down']);
    t.is(down.code, 0, down.stderr);
    const ms = await waitForHops(l.state, [VIP], (h) => h.join() === LB2, 60_000, 100);
    t.not(ms, null, 'FRR dropped lb-1\'s path');
    t.log(`FRR dropped lb-1's path ${ms} ms after its link went down`);
    for (let i = 0; i < 60 && !tookOver; i++) {
      await sleep(250);
      tookOver = await holds(l, 'lb2', LB1_SNAT);
    }
    for (let i = 0; i < 60 && snatRoute.join() !== LB2; i++) {
      await sleep(250);
      snatRoute = await routerNextHops(l.state, LB1_SNAT);
    }
    await sleep(4000); // the connections carry requests through lb-2
    for (const n of Object.keys(REALS)) after[n] = await neighbourMac(l, n.replace('-', ''), LB1_SNAT);
  } finally {
    writeFileSync(stopFile, '');
  }
  const res = await running;
  const survived = res.flows.filter((f) => f.survived);
  const switched = res.flows.filter((f) => f.backends.length > 1);
  const onReal = (n: string) => res.flows.filter((f) => f.backends[0] === n).length;
  t.log(`${survived.length}/${FLOWS} IPv6 SNAT connections survived, ${switched.length} changed real (be-1 ${onReal('be-1')}, be-2 ${onReal('be-2')})`);
  for (const f of res.flows.filter((x) => !x.survived)) t.log(`  lost: ${f.src}:${f.sport} ${f.backends.join('->')} after ${f.requests} requests: ${f.firstError}`);
  for (const [n, c] of Object.entries(nas)) if (!c.unsolicited(lb2Mac, LB1_SNAT)) t.log(`${n}: neighbour advertisements seen:\n${c.text().trim()}`);
  t.log(`neighbour entries for ${LB1_SNAT} (lb-1 ${lb1Mac}, lb-2 ${lb2Mac}): before ${JSON.stringify(before)}, after ${JSON.stringify(after)}`);

  t.true(tookOver, 'lb-2 holds lb-1\'s SNAT address');
  t.deepEqual(snatRoute, [LB2], `FRR installed ${LB1_SNAT}/128 via lb-2 (BGP host route)`);
  for (const n of Object.keys(REALS)) {
    t.true(nas[n]!.unsolicited(lb2Mac, LB1_SNAT) >= 1, `${n} received lb-2's unsolicited NA for ${LB1_SNAT}`);
    t.is(after[n], lb2Mac, `${n}'s neighbour entry for ${LB1_SNAT} names lb-2`);
  }
  t.true(Object.values(before).some((m) => m === lb1Mac), 'a real had talked to lb-1\'s SNAT address before');
  t.true(onReal('be-1') > 0 && onReal('be-2') > 0, 'connections on both reals');
  t.is(res.flows.length, FLOWS);
  t.true(res.flows.every((f) => f.requests >= 10), 'every connection carried requests through the loss');
  t.is(switched.length, 0, 'no connection changed real');
  t.is(survived.length, FLOWS, 'every IPv6 SNAT connection survived');

  // lb-1 back: the address goes home
  await bringBack(l);
  t.not(await waitForHops(l.state, [VIP], (h) => h.join() === [LB1, LB2].join(), 60_000, 200), null, 'lb-1 announces the VIP again');
  let released = false;
  for (let i = 0; i < 60 && !released; i++) {
    await sleep(250);
    released = !(await holds(l, 'lb2', LB1_SNAT));
  }
  t.true(released, 'lb-2 gave lb-1\'s SNAT address back');
  t.not(await waitForHops(l.state, [LB1_SNAT], (h) => h.length === 0, 30_000, 200), null, 'and withdrew its host route');
  let home = 0;
  for (let i = 0; i < 40 && home === 0; i++) {
    await sleep(250);
    home = nas['be-1']!.unsolicited(lb1Mac, LB1_SNAT);
  }
  t.true(home >= 1, 'lb-1 announced its address again (unsolicited NA from its MAC)');
  if (home === 0) t.log(nas['be-1']!.text());
});
