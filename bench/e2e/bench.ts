// End-to-end throughput in the lab, as a fair comparison: every target spreads the same wrk load (same threads,
// same connections, from the client namespace) over the same backends, and every figure is a ratio to "direct",
// that load sent straight to those backends (one wrk thread per backend, spreadOver in wrk.ts). The targets: each
// dispatch mode's VIP, with the lb daemons in native XDP (where it forwards; else the fallback the daemon chose)
// and then in generic XDP, and the peers (peers.ts): nftables full NAT, haproxy TCP mode and nftables stateless
// DSR on lb-1, where an operator would run them instead of gitlb, and (information) haproxy and nftables DNAT on
// the router, which skip the lb-node hop; all in this one run. Each lab measures in rounds (direct, then every
// other target; direct again after the last round), and each target's ratio is to the directs just before and
// after its round (table.ts): a direct figure taken minutes earlier on this shared machine would add the
// machine's drift to the ratio. The table gives medians over the rounds and the range of the ratios.
//
// Fairness, and why:
// - one backend set: the bench's config (config.ts) gives every measured service every backend, equal weights;
//   haproxy round-robins, nftables NATs (numgen inc) and hashes (DSR: jhash) over the same addresses.
// - the peers on lb-1 take the path a VIP request takes (router -> lb-1 -> backend); each nftables ruleset is
//   loaded only for its own measurement, so no other target pays its connection tracking.
// - no target meets another's TIME_WAIT at the backends: each reaches them with 4-tuples of its own (peers.ts,
//   placePeers: the router's DNAT keeps the client's address and port, so the client uses its second address there).
// - backends answer HTTP with haproxy (src/lab/servers/backend-haproxy.ts), not the lab's Node server: one Node
//   process per backend costs ~3x the CPU per request, and the Node figures measured the backends, not the
//   path to them. `--backend-http node` measures with the Node servers, for comparison.
// - "direct, be-1 only" (information, in the first lab): the same load on one backend; when it is close to the
//   spread direct, one backend is not what limits direct.
// - "direct, routed via the lb nodes" (information, in every gitlb lab): direct's load, but through the lb nodes'
//   kernels (routedViaLbNodes): the same extra hop a VIP request takes, with no balancer.
// - the floor lab (last, without gitlb): bench/e2e/xdp_l2_floor.c on the lb nodes, a MAC rewrite and XDP_TX for
//   web's VIP and nothing else (floor.ts), native and then generic: the least any XDP L2 DSR balancer pays here.
//   What a gitlb mode loses against direct beyond the floor is gitlb's; the rest is the lab's topology. SNAT's
//   replies come back through the lb nodes (DSR's go straight to the router): its floor is the row "replies via the
//   lb too", the same program also sending the backends' answers on to the router.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_CONFIG_DIR, labDown, labUp, labNs, startDaemons, type LabState } from '../../src/lab/lab.js';
import { nsArgv, run } from '../../src/lab/netns.js';
import { waitForLocalApplied } from '../../src/demo/status-watch.js';
import { runTraffic } from '../../src/demo/traffic.js';
import { waitForAnnounced } from '../../src/demo/failover.js';
import { writeBenchConfig, type BenchConfig } from './config.js';
import { comparisons, formatTable, summarize, type Sample, type Series } from './table.js';
import { wrk } from './wrk.js';
import { attachFloor, buildFloor, repliesThroughLbNodes } from './floor.js';
import * as peers from './peers.js';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '60' },
    'xdp-mode': { type: 'string' },
    'backend-http': { type: 'string', default: 'haproxy' },
    floor: { type: 'boolean', default: false },
  },
});
const xdpMode = values['xdp-mode'];
if (xdpMode && !['native', 'generic', 'auto'].includes(xdpMode)) throw new Error('--xdp-mode must be native, generic or auto');
if (!['haproxy', 'node'].includes(values['backend-http']!)) throw new Error('--backend-http must be haproxy or node');
const backendHttp = values['backend-http'] as 'haproxy' | 'node';
const seconds = Math.min(30, Math.max(1, Number(values.duration)));
const wantedConnections = Math.min(256, Math.max(1, Number(values.connections)));
const rounds = Math.min(20, Math.max(1, Math.floor(Number(values.rounds))));

/** The measured services and their row labels. */
const MODES = [
  { service: 'web', label: 'web  dsr/l2' },
  { service: 'api', label: 'api  dsr/ipip' },
  { service: 'shop', label: 'shop dsr/ipopt' },
  { service: 'dns', label: 'dns  snat (tcp)' },
];
const { BACKEND_PORT } = peers;

interface Target {
  name: string;
  url: string;
  /** direct: wrk's threads go to these addresses (url's port), one backend per thread */
  spreadOver?: string[];
  /** information: route the direct load through the lb nodes' kernels (see routedViaLbNodes) */
  viaLbNodes?: boolean;
  /** run before each of the target's measurements and before its warm-up (the floor attaches its program) */
  before?: (state: LabState) => Promise<void>;
  /** run after each of them and after its warm-up, also when it failed (undoes what `before` changed; a peer's
   * ruleset is checked and unloaded) */
  after?: (state: LabState) => Promise<void>;
}

/**
 * "direct, routed via the lb nodes": for the time of one measurement the router reaches the backends over an ECMP
 * route through the lb nodes, whose kernels forward the packets (not VIP traffic: their XDP program passes it up).
 * A request then takes the same extra hop a VIP request takes (router -> lb -> backend over the switch, replies
 * straight back), with no balancing at all: how much of the gap to direct is the lab's topology, not gitlb.
 * Returns the undo.
 */
async function routedViaLbNodes(state: LabState, backends: string[]): Promise<() => Promise<void>> {
  const router = labNs(state, 'router');
  const lbs = state.plan.nodes.filter((n) => n.role === 'lb');
  const hops = lbs.flatMap((n) => ['nexthop', 'via', n.addresses.find((a) => !a.includes(':'))!]);
  // the lb node forwards out of the interface the packet came in on: no ICMP redirects to the router
  for (const n of lbs) await run(nsArgv(labNs(state, n.ns), ['sysctl', '-q', '-w', 'net.ipv4.conf.all.send_redirects=0', `net.ipv4.conf.${n.interface}.send_redirects=0`]));
  for (const b of backends) await run(nsArgv(router, ['ip', 'route', 'replace', `${b}/32`, ...hops]));
  return async () => {
    for (const b of backends) await run(nsArgv(router, ['ip', 'route', 'del', `${b}/32`]));
  };
}

/** The XDP mode each lb daemon's program really runs in (`ip -d link`: xdp = native, xdpgeneric = generic). */
async function attachedModes(state: LabState): Promise<string> {
  const out: string[] = [];
  for (const n of state.plan.nodes.filter((x) => x.role === 'lb')) {
    const r = await run(nsArgv(labNs(state, n.ns), ['ip', '-d', 'link', 'show', 'dev', n.interface]));
    const m = /mtu \d+ (xdp\w*)/.exec(r.stdout)?.[1];
    out.push(`${n.name} ${m === 'xdp' ? 'native' : m === 'xdpgeneric' ? 'generic' : (m ?? 'none')}`);
  }
  return out.join(', ');
}

/**
 * Until every target answers, and every VIP from every backend: a real enters a service only once its health
 * check has risen, and a VIP measured before that would spread over fewer backends than direct. Bursts of 30
 * new connections (random source ports: a backend with a third of the Maglev table is missed by all 30 with
 * probability ~1e-5); a first request through each path also warms neighbour entries.
 */
async function warmUp(state: LabState, cfg: BenchConfig, targets: Target[], mode: string): Promise<void> {
  const names = new Map(state.plan.nodes.filter((n) => n.role === 'backend').map((n) => [n.addresses.find((a) => !a.includes(':'))!, n.name]));
  const all = cfg.backends.map((b) => names.get(b) ?? b);
  for (const t of targets) {
    const u = new URL(t.url);
    const hosts = t.spreadOver ?? [u.hostname];
    await t.before?.(state);
    try {
      await warmUpTarget(state, cfg, t, hosts, all, mode);
    } finally {
      await t.after?.(state);
    }
  }
}

/** warmUp for one target: bursts until every host of it answers (a balancer: from every backend). */
async function warmUpTarget(state: LabState, cfg: BenchConfig, t: Target, hosts: string[], all: string[], mode: string): Promise<void> {
  const client = labNs(state, 'client');
  const u = new URL(t.url);
  for (const host of hosts) {
    let last = '';
    for (let attempt = 1; ; attempt++) {
      const r = await runTraffic(client, { kind: 'burst', host, port: Number(u.port || 80), count: 30, concurrency: 6, sources: state.plan.client.v4, timeoutMs: 5000 });
      const failed = r.records.filter((x) => !x.backend);
      const seen = new Set(r.records.map((x) => x.backend).filter((b): b is string => !!b));
      // a balancer (VIP, haproxy, nftables) must reach every backend; a backend's own address only itself
      const missing = cfg.backends.includes(host) ? [] : all.filter((b) => !seen.has(b));
      if (failed.length === 0 && missing.length === 0) break;
      last = failed.length ? `${failed.length}/30 failed (${[...new Set(failed.map((x) => x.error))].join(', ')})` : `no answer from ${missing.join(', ')}`;
      if (attempt === 15) throw new Error(`${t.name} (${mode}): warm-up after 15 rounds: ${last}`);
      process.stderr.write(`bench/e2e: ${t.name} ${host}: ${last}; retrying\n`);
      await new Promise((res) => setTimeout(res, 2000));
    }
  }
}

/** Brings a lab up with the lb daemons in `mode`, waits until every node applied the config and every VIP answers. */
async function labWithMode(stateDir: string, cfg: BenchConfig, mode: string): Promise<LabState> {
  const state = await labUp({ stateDir, configDir: cfg.dir, daemons: false, vipsOnLo: false, backendHttp });
  const reports = await startDaemons(state, { extraArgs: ['--xdp-mode', mode] });
  const bad = reports.filter((r) => !r.started);
  if (bad.length) throw new Error(`daemons not running: ${bad.map((r) => `${r.node}: ${r.reason}`).join('; ')}`);
  const head = (await run(['git', '--git-dir', state.git!.bare, 'rev-parse', 'main'])).stdout.trim();
  const w = await waitForLocalApplied(state.stateDir, state.plan.nodes.map((n) => n.name), head, 120_000);
  if (!w.ok) throw new Error(`the daemons of ${w.missing.join(', ')} did not apply the config within 120 s`);
  // With BGP, measure only once the router spreads every VIP over both lb nodes (BIRD connects seconds later).
  if (state.plan.bird && (await waitForAnnounced(state, cfg.services.map((s) => new URL(s.url).hostname), 60_000)) === null)
    throw new Error(`the router does not route every VIP over every lb node within 60 s (${mode})`);
  return state;
}

async function main(): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'gitlb-bench-e2e-'));
  const cfg = writeBenchConfig(DEFAULT_CONFIG_DIR, join(scratch, 'config'), MODES.map((m) => m.service));
  // one wrk thread per backend, for every target (direct needs one per backend; the others get the same client)
  const threads = cfg.backends.length;
  const connections = Math.max(threads, wantedConnections - (wantedConnections % threads));
  const be = (i: number) => `http://${cfg.backends[i]}:${BACKEND_PORT}/`;
  const direct: Target = { name: `direct, ${threads} backends`, url: be(0), spreadOver: cfg.backends };
  const routed: Target = { name: 'direct, routed via the lb nodes (info)', url: be(0), spreadOver: cfg.backends, viaLbNodes: true };
  const directOne: Target = { name: `direct, ${cfg.backends[0]} only (info)`, url: be(0) };
  const modeTargets: Target[] = MODES.map((m) => ({ name: m.label, url: cfg.services.find((s) => s.name === m.service)!.url }));

  let stopPeers: (() => Promise<void>) | null = null;
  let labDir: string | null = null;
  const cleanup = async () => {
    await stopPeers?.().catch((e: Error) => process.stderr.write(`bench/e2e: ${e.message}\n`));
    stopPeers = null;
    if (labDir) await labDown(labDir).catch((e: Error) => process.stderr.write(`bench/e2e: ${e.message}\n`));
    labDir = null;
  };
  process.once('SIGINT', () => void cleanup().finally(() => process.exit(130)));
  // Native first where the kernel can (auto: the daemon falls back to generic when native cannot forward, and the
  // table says which mode really ran), then generic as the measured fallback; --xdp-mode measures one mode only.
  const xdpModes = xdpMode ? [xdpMode] : ['auto', 'generic'];
  const rows: Series[] = [];
  const ran: string[] = [];
  const sample = async (state: LabState, t: Target, what: string): Promise<Sample> => {
    process.stderr.write(`bench/e2e: ${what} ...\n`);
    const client = labNs(state, 'client');
    const o = { seconds, connections, threads, spreadOver: t.spreadOver };
    await t.before?.(state);
    let undo: (() => Promise<void>) | null = null;
    try {
      undo = t.viaLbNodes ? await routedViaLbNodes(state, t.spreadOver!) : null;
      const rps = await wrk(client, t.url, { ...o, closeEach: false });
      const cps = await wrk(client, t.url, { ...o, closeEach: true });
      return { rps, cps };
    } finally {
      await undo?.();
      await t.after?.(state);
    }
  };
  const header = () => [
    `e2e throughput in the lab: wrk -t${threads} -c${connections}, ${seconds} s per measurement, ${rounds} rounds, from the client namespace`,
    `backends ${cfg.backends.join(', ')} answer HTTP with ${backendHttp === 'haproxy' ? 'haproxy (1 thread each)' : 'the lab Node server'}; every VIP and peer spreads over all of them (equal weights)`,
    `direct: the same ${threads} threads x ${connections / threads} connections, thread i straight to backend i`,
  ];
  try {
    for (const [i, mode] of xdpModes.entries()) {
      process.stderr.write(`bench/e2e: building the lab (lb daemons --xdp-mode ${mode}, backends: ${backendHttp}) ...\n`);
      labDir = join(scratch, `lab-${i}`);
      const state = await labWithMode(labDir, cfg, mode);
      const attached = await attachedModes(state);
      ran.push(`lab ${i + 1}: --xdp-mode ${mode}: ${attached}`);
      const tag = attached.includes('native') ? (attached.includes('generic') ? ' [mixed]' : ' [native]') : ' [generic]';
      let peerTargets: Target[] = [];
      if (i === 0) {
        // the peers, once (peers.ts): on lb-1 where the comparison runs them, and on the router as information
        const p = await peers.startPeers(state, cfg.dir, cfg.backends, scratch);
        stopPeers = p.stop;
        peerTargets = p.targets.map((t) => ({ name: t.name, url: t.url, before: t.before, after: t.after }));
      }
      const targets = [direct, routed, ...(i === 0 ? [directOne] : []), ...peerTargets, ...modeTargets];
      await warmUp(state, cfg, targets, mode);
      const series = targets.map((t): Series => ({ name: `${t.name}${modeTargets.includes(t) ? tag : ` [lab ${i + 1}]`}`, lab: i, direct: t === direct, samples: [] }));
      rows.push(...series);
      for (let k = 0; k < rounds; k++) {
        for (const [j, t] of targets.entries()) series[j]!.samples.push(await sample(state, t, `round ${k + 1}/${rounds}: ${series[j]!.name}`));
      }
      series[0]!.samples.push(await sample(state, direct, `after the last round: ${series[0]!.name}`));
      await cleanup();
    }
    if (!xdpMode || values.floor) {
      // the floor lab: no gitlb at all; the lb nodes run xdp_l2_floor.c (native, then generic) for web's VIP
      const i = xdpModes.length;
      process.stderr.write(`bench/e2e: building the floor lab (no daemons; xdp_l2_floor on the lb nodes) ...\n`);
      labDir = join(scratch, `lab-${i}`);
      const state = await labUp({ stateDir: labDir, configDir: cfg.dir, daemons: false, vipsOnLo: true, backendHttp, routing: 'static' });
      const web = cfg.services.find((x) => x.name === 'web')!;
      const obj = await buildFloor(state, cfg.backends, web.url, scratch);
      const floorT = (m: 'native' | 'generic'): Target => ({ name: `xdp l2 floor (web's VIP) [${m}]`, url: web.url, before: (st) => attachFloor(st, obj, m) });
      // the floor of a balancer that carries the replies too (SNAT's path): the backends answer through the lb nodes
      let undoReplies: (() => Promise<void>) | null = null;
      const replyFloorT: Target = { name: 'xdp floor, replies via the lb too (SNAT\'s path) [native]', url: web.url,
        before: async (st) => { await attachFloor(st, obj, 'native'); undoReplies ??= await repliesThroughLbNodes(st); },
        after: async () => { await undoReplies?.(); undoReplies = null; } };
      const targets = [direct, floorT('native'), floorT('generic'), replyFloorT];
      ran.push(`lab ${i + 1}: no daemons, bench/e2e/xdp_l2_floor.c on both lb nodes (MAC rewrite + XDP_TX, nothing else; for the ` +
        `"replies via the lb" row the backends route the clients via the lb nodes and the program sends the answers on to the router)`);
      await warmUp(state, cfg, targets, 'floor');
      const series = targets.map((t): Series => ({ name: t === direct ? `${t.name} [lab ${i + 1}]` : t.name, lab: i, direct: t === direct, samples: [] }));
      rows.push(...series);
      for (let k = 0; k < rounds; k++) {
        for (const [j, t] of targets.entries()) series[j]!.samples.push(await sample(state, t, `round ${k + 1}/${rounds}: ${series[j]!.name}`));
      }
      series[0]!.samples.push(await sample(state, direct, `after the last round: ${series[0]!.name}`));
      await cleanup();
    }
    await printTable(rows, [...header(), ...ran]);
  } catch (e) {
    // what was measured before the failure is still a same-run comparison: print it, then fail
    if (rows.some((r) => r.samples.length)) {
      console.log('\n(partial: the run failed before every target was measured)');
      await printTable(rows, [...header(), ...ran]);
    }
    throw e;
  } finally {
    await cleanup();
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The results table (table.ts): medians over the rounds, ratios to the direct around each round. */
async function printTable(rows: Series[], head: string[]): Promise<void> {
  console.log('');
  for (const h of head) console.log(h);
  console.log('req/s: keep-alive HTTP/1.1; conn/s: one request per new TCP connection (Connection: close); medians over the rounds');
  console.log('/direct: median over the rounds of (this target / mean of the direct measured just before and just after its round);');
  console.log('range: lowest-highest of those ratios (direct rows: each direct / their median, i.e. the drift during the lab)\n');
  const lines = summarize(rows.filter((r) => r.samples.length));
  for (const l of formatTable(lines)) console.log(l);
  const against = comparisons(lines);
  if (against.length) console.log(['', ...against].join('\n'));
  const load = (await run(['cat', '/proc/loadavg'])).stdout.trim();
  console.log(`\nmachine load average at the end of the run: ${load} (2 shared cores: compare ratios, not absolute figures)`);
}

main().catch((e: Error) => {
  console.error(`bench/e2e: ${e.message}`);
  process.exit(1);
});
