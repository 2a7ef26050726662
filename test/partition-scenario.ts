// A killed backend seen by an lb node running the real `gitlb run` daemon (real XDP data plane, real Git server
// over HTTP in the lab), either connected to the Git server or partitioned from it by an nftables drop rule in
// its own namespace. Measures, from the client's point of view, how long new connections still reach the dead
// backend and how soon they reach it again once it is back. Used by test/netns/reconcile-partition-netns.test.ts and
// bench/health (side by side). Needs root; everything lives in the lab's own namespaces.
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { labUp, labDown, labNs, type LabState } from '../src/lab/lab.js';
import { nsSpawn, nsExec, stopChild, waitForPort } from '../src/lab/netns.js';
import { LineTap, logMessage } from './health-lab.js';
import { nodeModuleArgv } from '../src/lab/compiled.js';

const here = fileURLToPath(new URL('.', import.meta.url));
export const VIP = '203.0.113.10';
export const BE = { 'be-1': '198.51.100.21', 'be-2': '198.51.100.22', 'be-3': '198.51.100.23' };
export const HEALTH = { intervalMs: 200, fall: 3, rise: 2 };
/** The check defaults (a service giving only type, port and path): docs/health.md, Defaults. */
export const DEFAULT_HEALTH = { intervalMs: 2000, fall: 3, rise: 2 };
/** The UDP port of the mixed service (`udp: true`): the lab's backend servers answer it (src/lab/topology.ts). */
export const UDP_PORT = 9000;

export interface PartitionResult {
  partitioned: boolean;
  /** Kill of be-2 -> start of the last new connection that still reached it (failed). */
  deathToZeroMs: number;
  /** New connections that failed after the kill. */
  failedFlows: number;
  /** New connections started more than fall x interval + 1 s after the kill that reached be-2 (must be 0). */
  lateFlowsToDead: number;
  /** be-2 listening again -> first new connection answered by it. */
  reviveToFlowMs: number;
  /** Fetch failures the daemon logged during the run (> 0 proves the partition held). */
  fetchFailures: number;
  /** The daemon logged be-2 suspect (passive signals) after its death. */
  suspected: boolean;
  /** The detail of the failed check that took be-2 down (from the daemon's log), if it went down. */
  downDetail?: string;
  /** Death -> the daemon's first `suspect` line for be-2 / its `-> down` line (the lines' own times), if any. */
  suspectMs?: number;
  downMs?: number;
  /** be-2's first `suspect` line came before its first `-> down` line in the daemon's log (line order). */
  suspectBeforeDown: boolean;
  /** From the death (or the attack) on: every real the daemon called suspect, and every `<service> real <address>`
   * it took down. */
  suspects: string[];
  downs: string[];
}

/** The lab's config: lb-1 in front of be-1..3 (DSR over L2, or SNAT: `mode`), http checks every HEALTH.intervalMs (or with the
 * default timings: `checks: 'defaults'`); `udp`: the service serves UDP_PORT too (a mixed TCP/UDP service, as the
 * sample config's dns and game), which the lab's backend servers answer. */
export function writeConfig(dir: string, checks: 'fast' | 'defaults' = 'fast', udp = false, mode: 'dsr' | 'snat' = 'dsr'): void {
  const put = (rel: string, text: string) => {
    mkdirSync(join(dir, rel, '..'), { recursive: true });
    writeFileSync(join(dir, rel), text);
  };
  const { intervalMs, fall, rise } = HEALTH;
  put('cluster.yaml', `apiVersion: gitlb/v1\nkind: Cluster\nmetadata: { name: partition }\nspec:\n  maglev: { tableSize: 1021, seed: JLfvgnHc2kaSUFaI }\n  conntrack: { maxEntries: 4096 }\n  status: { branch: gitlb-status }\n  rollback: { policy: manual }\n`);
  put('nodes/lb-1.yaml', `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: lb-1 }\nspec:\n  role: lb\n  interface: eth0\n  addresses: [198.51.100.11]\n  allowedVips: [203.0.113.0/24]\n${mode === 'snat' ? '  snatAddress: 198.51.100.111\n' : ''}`);
  for (const [name, addr] of Object.entries(BE))
    put(`nodes/${name}.yaml`, `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${name} }\nspec:\n  role: backend\n  interface: eth0\n  addresses: [${addr}]\n`);
  put('services/web.yaml', `apiVersion: gitlb/v1\nkind: Service\nmetadata: { name: web }\nspec:\n  vip: ${VIP}\n  ports: [{ port: 80, protocol: TCP }${udp ? `, { port: ${UDP_PORT}, protocol: UDP }` : ''}]\n  dispatch: ${mode === 'snat' ? '{ mode: snat }' : '{ mode: dsr, encap: l2 }'}\n` +
    (checks === 'defaults'
      ? `  healthCheck: { type: http, port: 80, path: /healthz }\n`
      : `  healthCheck: { type: http, port: 80, path: /healthz, interval: ${intervalMs}ms, timeout: 150ms, rise: ${rise}, fall: ${fall} }\n`) +
    `  reals:\n${Object.values(BE).map((a) => `    - { address: ${a}, weight: 100 }\n`).join('')}`);
}

export type Flow = { start: number; end: number; result: string };

/** The TCP client of test/health-client.ts in the lab's client namespace; `burst` opens `count` connections to the
 * VIP, `gapMs` apart, and resolves with one record per connection. */
export function startHealthClient(state: LabState): { client: ChildProcess; burst: (count: number, gapMs: number) => Promise<Flow[]> } {
  const client = nsSpawn(labNs(state, 'client'), [process.execPath, '--import', 'tsx', join(here, 'health-client.ts'), VIP, '80'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const clientOut = new LineTap(client);
  const burst = async (count: number, gapMs: number): Promise<Flow[]> => {
    client.stdin!.write(`burst ${count} ${gapMs}\n`);
    const flows: Flow[] = [];
    for (;;) {
      const line = await clientOut.next((l) => l.includes('"type":"flow"') || l.includes('"type":"burst-done"'), 30_000, 'burst');
      if (line.includes('burst-done')) return flows;
      flows.push(JSON.parse(line) as Flow);
    }
  };
  return { client, burst };
}

export async function partitionScenario(o: { partitioned: boolean; log?: (m: string) => void;
  /** Default check timings instead of HEALTH's fast ones; passive: false runs the daemon with --no-passive-health. */
  checks?: 'fast' | 'defaults'; passive?: boolean;
  /** How be-2 dies: its server SIGKILLed (the kernel resets), its port 80 closed (an nftables rule in its namespace
   * answers every TCP packet to it with a reset, as a closed port does), or every TCP packet to port 80 dropped in
   * its namespace (a silent host: no answer at all; the health check's probes time out). */
  death?: 'kill' | 'close' | 'blackhole';
  /** Gap between new connections of the client (default 5 ms; the issue's operator probe is 20/s: 50). */
  gapMs?: number;
  /** The service serves UDP_PORT too, and the client also sends one-packet UDP flows (a new source port each, no
   * answer awaited) to it every gapMs while it opens its connections. */
  udp?: boolean;
  /** How the lb node dispatches (default dsr, L2): snat sends the reals the lb node's snatAddress as the source and
   * translates their answers back. */
  mode?: 'dsr' | 'snat';
  /** No death: instead an attacker in the client namespace opens `synFlood` connections (gapMs apart) whose
   * answers it drops (nftables in its own namespace), so the lb node sees its SYNs and their retransmissions and
   * nothing behind them, while every backend is healthy. */
  synFlood?: number }): Promise<PartitionResult> {
  const log = o.log ?? (() => {});
  const health = o.checks === 'defaults' ? DEFAULT_HEALTH : HEALTH;
  const work = mkdtempSync(join(tmpdir(), `gitlb-partition-${process.pid}-`));
  const configDir = join(work, 'config');
  writeConfig(configDir, o.checks, o.udp, o.mode);
  let state: LabState | undefined;
  let lb: ChildProcess | undefined;
  let client: ChildProcess | undefined;
  let revived: ChildProcess | undefined;
  let pinRoot = '';
  try {
    state = await labUp({ configDir, stateDir: join(work, 'lab'), daemons: false, vipsOnLo: true, clientCount: 1 });
    pinRoot = `/sys/fs/bpf/gitlb-test-${state.prefix}partition`;
    const lbNs = labNs(state, 'lb-1');
    lb = nsSpawn(lbNs, [...nodeModuleArgv(join(here, '..', 'src', 'cli', 'main.ts')), 'run', '--repo', state.git!.repoUrl, '--node', 'lb-1',
      '--interface', 'eth0', '--xdp-mode', 'generic', '--pin-root', pinRoot, '--cache-dir', join(work, 'cache'), '--poll', '1', '--git-timeout', '2',
      ...(o.passive === false ? ['--no-passive-health'] : [])],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    const lbOut = new LineTap(lb, 'stderr');
    let fetchFailures = 0;
    let deathAt = Infinity;
    let suspected = false;
    let downDetail: string | undefined;
    let suspectAt: number | undefined;
    let downAt: number | undefined;
    let suspectBeforeDown = false;
    const suspects: string[] = [];
    const downs: string[] = [];
    let partial = '';
    const timeOf = (line: string) => {
      try {
        const t = (JSON.parse(line) as { time?: unknown }).time;
        return typeof t === 'number' ? t : typeof t === 'string' ? Date.parse(t) : Date.now();
      } catch {
        return Date.now();
      }
    };
    lb.stderr!.on('data', (b: Buffer) => {
      const text = b.toString();
      fetchFailures += (text.match(/fetch failed/g) ?? []).length;
      if (process.env.GITLB_TEST_LOG) process.stderr.write(text);
      const lines = (partial + text).split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        if (Date.now() < deathAt) continue;
        const m = logMessage(line);
        const suspect = /^health: (\S+) suspect/.exec(m);
        if (suspect) suspects.push(suspect[1]!);
        if (m.startsWith(`health: ${BE['be-2']} suspect`) && !suspected) {
          suspected = true;
          suspectAt = timeOf(line);
          suspectBeforeDown = downDetail === undefined;
        }
        const flip = ' -> down (';
        const down = /^health: (\S+ real \S+) .* -> down \(/.exec(m);
        if (down) downs.push(down[1]!);
        if (m.startsWith(`health: web real ${BE['be-2']} `) && m.includes(flip) && downDetail === undefined) {
          downDetail = m.slice(m.indexOf(flip) + flip.length, -1);
          downAt = timeOf(line);
        }
      }
    });
    const hc = startHealthClient(state);
    client = hc.client;
    const burst = hc.burst;

    await lbOut.next((l) => /^applied [0-9a-f]{12}/.test(logMessage(l)), 60_000, 'first apply');
    // Ready when new connections reach every backend (health checks up, neighbours resolved).
    for (let i = 0; ; i++) {
      const seen = new Set((await burst(30, 10)).map((f) => f.result));
      if (Object.keys(BE).every((b) => seen.has(b))) break;
      if (i >= 30) throw new Error(`not every backend reachable through the VIP: ${[...seen].join(', ')}`);
      await new Promise((r) => setTimeout(r, 300));
    }
    if (o.partitioned) {
      // Drop everything this node sends to the Git server: fetches hang until their deadline.
      const git = state.plan.git.address;
      for (const cmd of [['add', 'table', 'inet', 'gitlbpart'], ['add', 'chain', 'inet', 'gitlbpart', 'out', '{ type filter hook output priority 0; }'],
        ['add', 'rule', 'inet', 'gitlbpart', 'out', 'ip', 'daddr', git, 'drop']]) {
        const r = await nsExec(lbNs, ['nft', ...cmd]);
        if (r.code !== 0) throw new Error(`nft ${cmd.join(' ')}: ${r.stderr}`);
      }
      const since = fetchFailures;
      const until = Date.now() + 15_000;
      while (fetchFailures === since && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
      if (fetchFailures === since) throw new Error('the partition did not make a fetch fail');
      log('partitioned: fetches are failing');
    }

    const gap = o.gapMs ?? 5;
    if (o.synFlood) {
      deathAt = Date.now();
      await synFlood(state, o.synFlood, gap);
      // the suspicions' probes (one per real and interval) have had two intervals to run
      await new Promise((r) => setTimeout(r, 2 * health.intervalMs));
      const after = await burst(60, 10);
      const reached = new Set(after.map((f) => f.result));
      return { partitioned: o.partitioned, deathToZeroMs: 0, failedFlows: after.filter((f) => f.result.startsWith('error')).length,
        lateFlowsToDead: 0, reviveToFlowMs: Object.keys(BE).every((b) => reached.has(b)) ? 0 : Infinity, fetchFailures, suspected,
        suspectBeforeDown, suspects, downs };
    }
    // New connections every gapMs for fall x interval + 2 s, at least 3 s; be-2 dies 400 ms in.
    const udpTrickle = o.udp ? udpFlows(state, Math.ceil(Math.max(3000, health.fall * health.intervalMs + 2000) / gap), gap) : null;
    const running = burst(Math.ceil(Math.max(3000, health.fall * health.intervalMs + 2000) / gap), gap);
    await new Promise((r) => setTimeout(r, 400));
    const server = state.processes.find((p) => p.role === 'backend-server' && p.node === 'be-2')!;
    const be2 = labNs(state, 'be-2');
    const nft = async (...args: string[]) => {
      const r = await nsExec(be2, ['nft', ...args]);
      if (r.code !== 0) throw new Error(`nft ${args.join(' ')}: ${r.stderr}`);
    };
    if (o.death === 'blackhole' || o.death === 'close') {
      // the table and chain first: only the rule below changes anything
      await nft('add', 'table', 'inet', 'gitlbhole');
      await nft('add', 'chain', 'inet', 'gitlbhole', 'in', '{ type filter hook input priority 0; }');
    }
    const killedAt = Date.now();
    deathAt = killedAt;
    if (o.death === 'blackhole') await nft('add', 'rule', 'inet', 'gitlbhole', 'in', 'tcp', 'dport', '80', 'drop');
    else if (o.death === 'close') await nft('add', 'rule', 'inet', 'gitlbhole', 'in', 'tcp', 'dport', '80', 'reject', 'with', 'tcp', 'reset');
    else process.kill(server.pid, 'SIGKILL');
    const flows = await running;
    await udpTrickle;
    const failed = flows.filter((f) => f.start >= killedAt && f.result.startsWith('error'));
    const lastHit = Math.max(killedAt, ...flows.filter((f) => f.start >= killedAt && (f.result === 'be-2' || f.result.startsWith('error'))).map((f) => f.start));
    // a silent real fails each check only at its timeout (1 s by default, 150 ms with HEALTH)
    const bound = health.fall * health.intervalMs + 1000 + (o.death === 'blackhole' ? (o.checks === 'defaults' ? 1000 : 150) : 0);
    const late = flows.filter((f) => f.start > killedAt + bound && (f.result === 'be-2' || f.result.startsWith('error')));

    // be-2 comes back: new connections reach it again after `rise` good checks.
    if (o.death === 'blackhole' || o.death === 'close') await nft('delete', 'table', 'inet', 'gitlbhole');
    else {
      revived = nsSpawn(be2, server.argv, { stdio: 'ignore' });
      await waitForPort(be2, 80);
    }
    const revivedAt = Date.now();
    const again = await burst(Math.ceil(Math.max(2500, health.rise * health.intervalMs + 2000) / gap), gap);
    const firstBack = again.find((f) => f.result === 'be-2');
    return {
      partitioned: o.partitioned,
      deathToZeroMs: lastHit - killedAt,
      failedFlows: failed.length,
      lateFlowsToDead: late.length,
      reviveToFlowMs: firstBack ? firstBack.start - revivedAt : Infinity,
      fetchFailures,
      suspected,
      ...(downDetail !== undefined && { downDetail }),
      ...(suspectAt !== undefined && { suspectMs: suspectAt - killedAt }),
      ...(downAt !== undefined && { downMs: downAt - killedAt }),
      suspectBeforeDown, suspects, downs,
    };
  } finally {
    if (revived) await stopChild(revived, 1000);
    client?.stdin?.end();
    await Promise.all([client && stopChild(client, 2000), lb && stopChild(lb, 5000)]);
    if (state) await labDown(state.stateDir);
    rmSync(work, { recursive: true, force: true });
    if (pinRoot) rmSync(pinRoot, { recursive: true, force: true });
  }
}

/** `count` one-packet UDP flows from the client namespace to VIP:UDP_PORT, `gapMs` apart, each from a socket (and
 * source port) of its own that is closed right after sending: what DNS queries look like to the lb node. */
async function udpFlows(state: LabState, count: number, gapMs: number): Promise<void> {
  const script = `const d = require('node:dgram'); let i = 0; const t = setInterval(() => { const s = d.createSocket('udp4');
    s.send('q' + i, ${UDP_PORT}, '${VIP}', () => s.close()); if (++i >= ${count}) clearInterval(t); }, ${gapMs});`;
  const r = await nsExec(labNs(state, 'client'), [process.execPath, '-e', script], { timeoutMs: count * gapMs * 3 + 30_000 } /* a bound on a stuck client, not a figure: timers fire late on a loaded machine */);
  if (r.code !== 0) throw new Error(`udp flows: ${r.stderr}`);
}

/** The attacker of `synFlood`: `count` connections to VIP:80 from source ports 20000.. (outside the kernel's
 * ephemeral range), `gapMs` apart, whose answers an nftables rule in the client namespace drops, so the client's
 * kernel retransmits each SYN (after 1 s and 3 s) and never completes a handshake; each is given up after 3.5 s. */
async function synFlood(state: LabState, count: number, gapMs: number): Promise<void> {
  const ns = labNs(state, 'client');
  for (const args of [['add', 'table', 'inet', 'gitlbflood'], ['add', 'chain', 'inet', 'gitlbflood', 'in', '{ type filter hook input priority 0; }'],
    ['add', 'rule', 'inet', 'gitlbflood', 'in', 'tcp', 'sport', '80', 'tcp', 'dport', `20000-${20000 + count - 1}`, 'drop']]) {
    const r = await nsExec(ns, ['nft', ...args]);
    if (r.code !== 0) throw new Error(`nft ${args.join(' ')}: ${r.stderr}`);
  }
  try {
    const script = `const net = require('node:net'); let i = 0; const t = setInterval(() => {
      const s = net.connect({ host: '${VIP}', port: 80, localPort: 20000 + i }); s.on('error', () => {}); setTimeout(() => s.destroy(), 3500);
      if (++i >= ${count}) clearInterval(t); }, ${gapMs});`;
    const r = await nsExec(ns, [process.execPath, '-e', script], { timeoutMs: count * gapMs + 15_000 });
    if (r.code !== 0) throw new Error(`syn flood: ${r.stderr}`);
  } finally {
    await nsExec(ns, ['nft', 'delete', 'table', 'inet', 'gitlbflood']);
  }
}
