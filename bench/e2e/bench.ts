// End-to-end throughput in the lab: for each dispatch mode, wrk (in the client namespace) against the mode's VIP,
// once with keep-alive (requests/s) and once with a new connection per request (connections/s); the same load
// straight to one backend and through haproxy in TCP mode (in the router namespace), all in this one run.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { labDown, labUp, labNs, startDaemons } from '../../src/lab/lab.js';
import { nsArgv, run, waitForPort } from '../../src/lab/netns.js';
import { waitForLocalApplied } from '../../src/demo/status-watch.js';
import { runTraffic } from '../../src/demo/traffic.js';
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

async function main(): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'gitlb-bench-e2e-'));
  const stateDir = join(scratch, 'lab');
  let haproxy: ChildProcess | null = null;
  const cleanup = async () => {
    if (haproxy && haproxy.exitCode === null) haproxy.kill('SIGTERM');
    await labDown(stateDir).catch(() => {});
    rmSync(scratch, { recursive: true, force: true });
  };
  process.once('SIGINT', () => void cleanup().finally(() => process.exit(130)));
  try {
    process.stderr.write('bench/e2e: building the lab ...\n');
    // With --xdp-mode the daemons are started here, so that the mode can be passed to `gitlb run`.
    const state = await labUp({ stateDir, ...(xdpMode ? { daemons: false, vipsOnLo: false } : {}) });
    if (xdpMode) {
      const reports = await startDaemons(state, { extraArgs: ['--xdp-mode', xdpMode] });
      const bad = reports.filter((r) => !r.started);
      if (bad.length) throw new Error(`daemons not running: ${bad.map((r) => `${r.node}: ${r.reason}`).join('; ')}`);
    }
    const main = (await run(['git', '--git-dir', state.git!.bare, 'rev-parse', 'main'])).stdout.trim();
    const w = await waitForLocalApplied(state.stateDir, state.plan.nodes.map((n) => n.name), main, 120_000);
    if (!w.ok) throw new Error(`the daemons of ${w.missing.join(', ')} did not apply the config within 120 s`);
    const client = labNs(state, 'client');
    const router = labNs(state, 'router');
    // Every VIP answers before measuring (a first request through each path also warms neighbour entries).
    for (const t of [...MODES, DIRECT]) {
      const u = new URL(t.url);
      let lastErrors = '';
      for (let attempt = 1; ; attempt++) {
        const r = await runTraffic(client, { kind: 'burst', host: u.hostname, port: Number(u.port || 80), count: 10, sources: state.plan.client.v4, timeoutMs: 5000 });
        const failed = r.records.filter((x) => !x.backend);
        if (failed.length === 0) break;
        lastErrors = failed.map((x) => x.error).join(', ');
        if (attempt === 5) throw new Error(`${t.name}: warm-up requests still failing after 5 rounds: ${lastErrors}`);
        process.stderr.write(`bench/e2e: ${t.name}: ${failed.length}/10 warm-up requests failed (${lastErrors}); retrying\n`);
        await new Promise((res) => setTimeout(res, 2000));
      }
    }
    const cfg = join(scratch, 'haproxy.cfg');
    const backends = state.plan.nodes.filter((n) => n.role === 'backend').map((n) => n.addresses.find((a) => !a.includes(':'))!);
    writeFileSync(cfg, haproxyConfig(backends));
    const argv = nsArgv(router, ['haproxy', '-db', '-f', cfg]);
    haproxy = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
    await waitForPort(router, HAPROXY_BIND.port, 'tcp', { timeoutMs: 10_000 });

    const results = new Map<string, { rps: WrkResult; cps: WrkResult }>();
    for (const t of [DIRECT, HAPROXY, ...MODES]) {
      process.stderr.write(`bench/e2e: ${t.name} ...\n`);
      const rps = await wrk(client, t.url, { seconds, connections, closeEach: false });
      const cps = await wrk(client, t.url, { seconds, connections, closeEach: true });
      results.set(t.name, { rps, cps });
    }
    const d = results.get(DIRECT.name)!;
    const h = results.get(HAPROXY.name)!;
    const fmt = (x: number) => x.toFixed(0).padStart(8);
    const ratio = (a: number, b: number) => (b > 0 ? (a / b).toFixed(2) : '-').padStart(6);
    console.log(`\ne2e throughput in the lab: wrk -t1 -c${connections}, ${seconds} s per measurement, from the client namespace; lb XDP mode ${xdpMode ?? 'auto (the lab default)'}`);
    console.log('requests/s: keep-alive HTTP/1.1; connections/s: one request per new TCP connection (Connection: close)');
    console.log('ratios: this target / direct-to-backend, this target / haproxy (tcp mode, in the router namespace)\n');
    console.log(`${'target'.padEnd(18)}${'req/s'.padStart(8)} ${'/direct'.padStart(7)} ${'/hapx'.padStart(6)}  ${'conn/s'.padStart(8)} ${'/direct'.padStart(7)} ${'/hapx'.padStart(6)}  errors  latency(ka)`);
    for (const [name, r] of results) {
      console.log(
        `${name.padEnd(18)}${fmt(r.rps.requestsPerSec)} ${ratio(r.rps.requestsPerSec, d.rps.requestsPerSec).padStart(7)} ${ratio(r.rps.requestsPerSec, h.rps.requestsPerSec)}  ` +
          `${fmt(r.cps.requestsPerSec)} ${ratio(r.cps.requestsPerSec, d.cps.requestsPerSec).padStart(7)} ${ratio(r.cps.requestsPerSec, h.cps.requestsPerSec)}  ${String(r.rps.errors + r.cps.errors).padStart(6)}  ${r.rps.latencyAvg}`,
      );
    }
    const load = (await run(['cat', '/proc/loadavg'])).stdout.trim();
    console.log(`\nmachine load average during the run: ${load} (2 shared cores: compare ratios, not absolute figures)`);
  } finally {
    await cleanup();
  }
}

main().catch((e: Error) => {
  console.error(`bench/e2e: ${e.message}`);
  process.exit(1);
});
