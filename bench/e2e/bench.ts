// End-to-end throughput in the lab: for each dispatch mode, wrk (in the client namespace) against the mode's VIP,
// once with keep-alive (requests/s) and once with a new connection per request (connections/s), with the lb
// daemons in native XDP (where it forwards; else the fallback the daemon chose) and then in generic XDP; the same
// load straight to one backend, through haproxy in TCP mode and through nftables DNAT (both in the router
// namespace), all in this one run.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { labDown, labUp, labNs, startDaemons, type LabState } from '../../src/lab/lab.js';
import { nsArgv, run, waitForPort } from '../../src/lab/netns.js';
import { waitForLocalApplied } from '../../src/demo/status-watch.js';
import { runTraffic } from '../../src/demo/traffic.js';
import { waitForAnnounced } from '../../src/demo/failover.js';
import { wrk, type WrkResult } from './wrk.js';

const { values } = parseArgs({
  options: { duration: { type: 'string', default: '5' }, connections: { type: 'string', default: '16' }, 'xdp-mode': { type: 'string' } },
});
const xdpMode = values['xdp-mode'];
if (xdpMode && !['native', 'generic', 'auto'].includes(xdpMode)) throw new Error('--xdp-mode must be native, generic or auto');
const seconds = Math.min(30, Math.max(1, Number(values.duration)));
const connections = Math.min(256, Math.max(1, Number(values.connections)));

interface Target {
  name: string;
  url: string;
}

const MODES: Target[] = [
  { name: 'web  dsr/l2', url: 'http://203.0.113.10:80/' },
  { name: 'api  dsr/ipip', url: 'http://203.0.113.20:8080/' },
  { name: 'shop dsr/ipopt', url: 'http://203.0.113.30:80/' },
  { name: 'dns  snat (tcp)', url: 'http://203.0.113.40:53/' },
];
const DIRECT: Target = { name: 'direct to be-1', url: 'http://198.51.100.21:80/' };
const HAPROXY_BIND = { addr: '192.0.2.1', port: 8888 };
const HAPROXY: Target = { name: 'haproxy tcp mode', url: `http://${HAPROXY_BIND.addr}:${HAPROXY_BIND.port}/` };
// DNAT keeps the port: the backends serve 80, and nothing on the router listens there
const NFT_BIND = { addr: '192.0.2.1', port: 80 };
const NFTABLES: Target = { name: 'nftables dnat', url: `http://${NFT_BIND.addr}:${NFT_BIND.port}/` };

function haproxyConfig(backends: string[]): string {
  return [
    'global',
    '  maxconn 8192',
    'defaults',
    '  mode tcp',
    '  timeout connect 3s',
    '  timeout client 10s',
    '  timeout server 10s',
    'frontend fe',
    `  bind ${HAPROXY_BIND.addr}:${HAPROXY_BIND.port}`,
    '  default_backend be',
    'backend be',
    '  balance roundrobin',
    ...backends.map((b, i) => `  server be${i + 1} ${b}:80`),
    '',
  ].join('\n');
}

/** nftables DNAT in the router namespace, round-robin over the backends: the kernel's own L4 balancer as a peer. */
function nftablesRuleset(backends: string[]): string {
  const map = backends.map((b, i) => `${i} : ${b}`).join(', ');
  return [
    'table ip gitlb_bench {',
    '  chain pre {',
    '    type nat hook prerouting priority dstnat;',
    `    ip daddr ${NFT_BIND.addr} tcp dport ${NFT_BIND.port} dnat to numgen inc mod ${backends.length} map { ${map} }`,
    '  }',
    '}',
    '',
  ].join('\n');
}

type Results = Map<string, { rps: WrkResult; cps: WrkResult }>;

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

/** Brings a lab up with the lb daemons in `mode`, waits until every node applied the config and every VIP answers. */
async function labWithMode(stateDir: string, mode: string): Promise<LabState> {
  const state = await labUp({ stateDir, daemons: false, vipsOnLo: false });
  const reports = await startDaemons(state, { extraArgs: ['--xdp-mode', mode] });
  const bad = reports.filter((r) => !r.started);
  if (bad.length) throw new Error(`daemons not running: ${bad.map((r) => `${r.node}: ${r.reason}`).join('; ')}`);
  const head = (await run(['git', '--git-dir', state.git!.bare, 'rev-parse', 'main'])).stdout.trim();
  const w = await waitForLocalApplied(state.stateDir, state.plan.nodes.map((n) => n.name), head, 120_000);
  if (!w.ok) throw new Error(`the daemons of ${w.missing.join(', ')} did not apply the config within 120 s`);
  // With BGP, measure only once the router spreads every VIP over both lb nodes (BIRD connects seconds later).
  if (state.plan.bird && (await waitForAnnounced(state, MODES.map((t) => new URL(t.url).hostname), 60_000)) === null)
    throw new Error(`the router does not route every VIP over every lb node within 60 s (${mode})`);
  const client = labNs(state, 'client');
  // Every VIP answers before measuring (a first request through each path also warms neighbour entries).
  for (const t of [...MODES, DIRECT]) {
    const u = new URL(t.url);
    let lastErrors = '';
    for (let attempt = 1; ; attempt++) {
      const r = await runTraffic(client, { kind: 'burst', host: u.hostname, port: Number(u.port || 80), count: 10, sources: state.plan.client.v4, timeoutMs: 5000 });
      const failed = r.records.filter((x) => !x.backend);
      if (failed.length === 0) break;
      lastErrors = failed.map((x) => x.error).join(', ');
      if (attempt === 5) throw new Error(`${t.name} (${mode}): warm-up requests still failing after 5 rounds: ${lastErrors}`);
      process.stderr.write(`bench/e2e: ${t.name}: ${failed.length}/10 warm-up requests failed (${lastErrors}); retrying\n`);
      await new Promise((res) => setTimeout(res, 2000));
    }
  }
  return state;
}

async function measure(state: LabState, targets: Target[], results: Results, suffix = ''): Promise<void> {
  const client = labNs(state, 'client');
  for (const t of targets) {
    process.stderr.write(`bench/e2e: ${t.name}${suffix} ...\n`);
    const rps = await wrk(client, t.url, { seconds, connections, closeEach: false });
    const cps = await wrk(client, t.url, { seconds, connections, closeEach: true });
    results.set(`${t.name}${suffix}`, { rps, cps });
  }
}

/** The results table: every target measured so far, as ratios to direct and to haproxy. */
async function printTable(results: Results, ran: string[]): Promise<void> {
  const d = results.get(DIRECT.name);
  const h = results.get(HAPROXY.name);
  if (!d || !h) return;
  const fmt = (x: number) => x.toFixed(0).padStart(8);
  const ratio = (a: number, b: number) => (b > 0 ? (a / b).toFixed(2) : '-').padStart(6);
  console.log(`\ne2e throughput in the lab: wrk -t1 -c${connections}, ${seconds} s per measurement, from the client namespace`);
  for (const r of ran) console.log(`lb XDP ${r}`);
  console.log('requests/s: keep-alive HTTP/1.1; connections/s: one request per new TCP connection (Connection: close)');
  console.log('ratios: this target / direct-to-backend, this target / haproxy (tcp mode, in the router namespace)\n');
  console.log(`${'target'.padEnd(28)}${'req/s'.padStart(8)} ${'/direct'.padStart(7)} ${'/hapx'.padStart(6)}  ${'conn/s'.padStart(8)} ${'/direct'.padStart(7)} ${'/hapx'.padStart(6)}  errors  latency(ka)`);
  for (const [name, r] of results) {
    console.log(
      `${name.padEnd(28)}${fmt(r.rps.requestsPerSec)} ${ratio(r.rps.requestsPerSec, d.rps.requestsPerSec).padStart(7)} ${ratio(r.rps.requestsPerSec, h.rps.requestsPerSec)}  ` +
        `${fmt(r.cps.requestsPerSec)} ${ratio(r.cps.requestsPerSec, d.cps.requestsPerSec).padStart(7)} ${ratio(r.cps.requestsPerSec, h.cps.requestsPerSec)}  ${String(r.rps.errors + r.cps.errors).padStart(6)}  ${r.rps.latencyAvg}`,
    );
  }
  const load = (await run(['cat', '/proc/loadavg'])).stdout.trim();
  console.log(`\nmachine load average during the run: ${load} (2 shared cores: compare ratios, not absolute figures)`);
}

async function main(): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'gitlb-bench-e2e-'));
  let haproxy: ChildProcess | null = null;
  let labDir: string | null = null;
  const cleanup = async () => {
    if (haproxy && haproxy.exitCode === null) haproxy.kill('SIGTERM');
    haproxy = null;
    if (labDir) await labDown(labDir).catch((e: Error) => process.stderr.write(`bench/e2e: ${e.message}\n`));
    labDir = null;
  };
  process.once('SIGINT', () => void cleanup().finally(() => process.exit(130)));
  // Native first where the kernel can (auto: the daemon falls back to generic when native cannot forward, and the
  // table says which mode really ran), then generic as the measured fallback; --xdp-mode measures one mode only.
  const xdpModes = xdpMode ? [xdpMode] : ['auto', 'generic'];
  const results: Results = new Map();
  const ran: string[] = [];
  try {
    for (const [i, mode] of xdpModes.entries()) {
      process.stderr.write(`bench/e2e: building the lab (lb daemons --xdp-mode ${mode}) ...\n`);
      labDir = join(scratch, `lab-${i}`);
      const state = await labWithMode(labDir, mode);
      const attached = await attachedModes(state);
      ran.push(`--xdp-mode ${mode}: ${attached}`);
      if (i === 0) {
        // the peers, once: straight to a backend, haproxy (TCP mode) and nftables DNAT, both in the router namespace
        const router = labNs(state, 'router');
        const backends = state.plan.nodes.filter((n) => n.role === 'backend').map((n) => n.addresses.find((a) => !a.includes(':'))!);
        const cfg = join(scratch, 'haproxy.cfg');
        writeFileSync(cfg, haproxyConfig(backends));
        const argv = nsArgv(router, ['haproxy', '-db', '-f', cfg]);
        haproxy = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
        await waitForPort(router, HAPROXY_BIND.port, 'tcp', { timeoutMs: 10_000 });
        const nftFile = join(scratch, 'nft.conf');
        writeFileSync(nftFile, nftablesRuleset(backends));
        const nft = await run(nsArgv(router, ['nft', '-f', nftFile]));
        if (nft.code !== 0) throw new Error(`nft -f failed: ${nft.stderr.trim()}`);
        await measure(state, [DIRECT, HAPROXY, NFTABLES], results);
      }
      const tag = attached.includes('native') ? (attached.includes('generic') ? ' [mixed]' : ' [native]') : ' [generic]';
      await measure(state, MODES, results, tag);
      await cleanup();
    }
    await printTable(results, ran);
  } catch (e) {
    // what was measured before the failure is still a same-run comparison: print it, then fail
    if (results.size) {
      console.log('\n(partial: the run failed before every target was measured)');
      await printTable(results, ran);
    }
    throw e;
  } finally {
    await cleanup();
    rmSync(scratch, { recursive: true, force: true });
  }
}

main().catch((e: Error) => {
  console.error(`bench/e2e: ${e.message}`);
  process.exit(1);
});
