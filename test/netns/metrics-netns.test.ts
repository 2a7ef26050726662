// /metrics of real `gitlb run` daemons in a lab (client, router, lb-1, two backends; Git over HTTP), while traffic
// flows: per-service and per-real packet counters equal exactly what the client sent, in DSR and in SNAT mode;
// a health flip shows on the first scrape after the daemon logged it; and every metric the Grafana dashboard and
// the Prometheus alert rules name exists on a live /metrics; docs/metrics.md's tables match a live /metrics (names,
// types, drop/pass/backend label values), echo requests to a VIP are counted, and `gitlb top --drops` matches.
import test from 'ava';
import { mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { labDown, labNs, labUp, type LabState } from '../../src/lab/lab.js';
import { nsExec, run } from '../../src/lab/netns.js';
import { waitForLocalApplied } from '../../src/demo/status-watch.js';
import { parsePromText, sumOf, type Sample } from '../../src/reconciler/metrics/prom-text.js';
import { queryPrometheus } from '../../src/lab/prometheus.js';
import { exposedTypes, readDocMetrics } from '../lib/metrics-doc.js';

const here = fileURLToPath(new URL('..', import.meta.url));
const root = join(here, '..');
const BE: Record<string, string> = { 'be-1': '198.51.100.21', 'be-2': '198.51.100.22' };
const INTERVAL_MS = 300;
/** The lab runs each daemon with --metrics <node address>:9462, where the lab's Prometheus scrapes it. */
const METRICS: Record<string, string> = { 'lb-1': 'http://198.51.100.11:9462', 'be-1': 'http://198.51.100.21:9462', 'be-2': 'http://198.51.100.22:9462' };

function writeConfig(dir: string): void {
  const put = (rel: string, text: string) => {
    mkdirSync(join(dir, rel, '..'), { recursive: true });
    writeFileSync(join(dir, rel), text);
  };
  put('cluster.yaml', 'apiVersion: gitlb/v1\nkind: Cluster\nmetadata: { name: metrics }\nspec:\n  maglev: { tableSize: 1021, seed: JLfvgnHc2kaSUFaI }\n' +
    '  conntrack: { maxEntries: 4096 }\n  status: { branch: gitlb-status }\n  rollback: { policy: manual }\n');
  put('nodes/lb-1.yaml', 'apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: lb-1 }\nspec:\n  role: lb\n  interface: eth0\n' +
    '  addresses: [198.51.100.11]\n  allowedVips: [203.0.113.0/24]\n  snatAddress: 198.51.100.111\n');
  for (const [name, addr] of Object.entries(BE))
    put(`nodes/${name}.yaml`, `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${name} }\nspec:\n  role: backend\n  interface: eth0\n  addresses: [${addr}]\n`);
  const hc = `  healthCheck: { type: tcp, port: 80, interval: ${INTERVAL_MS}ms, timeout: 200ms, rise: 1, fall: 2 }\n`;
  const reals = `  reals:\n${Object.values(BE).map((a) => `    - { address: ${a} }\n`).join('')}`;
  put('services/udp-dsr.yaml', 'apiVersion: gitlb/v1\nkind: Service\nmetadata: { name: udp-dsr }\nspec:\n  vip: 203.0.113.10\n' +
    '  ports: [{ port: 9000, protocol: UDP }]\n  dispatch: { mode: dsr, encap: l2 }\n' + hc + reals);
  put('services/udp-snat.yaml', 'apiVersion: gitlb/v1\nkind: Service\nmetadata: { name: udp-snat }\nspec:\n  vip: 203.0.113.40\n' +
    '  ports: [{ port: 53, protocol: UDP, targetPort: 5353 }]\n  dispatch: { mode: snat }\n' + hc + reals);
}

async function scrape(state: LabState, node: string, path = '/metrics'): Promise<{ code: number; text: string }> {
  const r = await nsExec(labNs(state, node), ['curl', '-s', '-o', '-', '-w', '\n%{http_code}', `${METRICS[node]}${path}`], { timeoutMs: 10_000 });
  const i = r.stdout.lastIndexOf('\n');
  return { code: Number(r.stdout.slice(i + 1)), text: r.stdout.slice(0, i) };
}

const samplesOf = async (state: LabState, node: string): Promise<Sample[]> => parsePromText((await scrape(state, node)).text);

async function sendUdp(state: LabState, vip: string, port: number, flows: number, perFlow: number): Promise<{ sent: number; byBackend: Record<string, number> }> {
  const r = await nsExec(labNs(state, 'client'), [process.execPath, '--import', 'tsx', join(here, 'udp-flows-client.ts'), vip, String(port),
    String(flows), String(perFlow)], { timeoutMs: 60_000, cwd: root });
  if (r.code !== 0) throw new Error(`udp client failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
}

/** Every gitlb_* metric name in the shipped dashboard and alert rules. */
function deployedMetricNames(): string[] {
  const names = new Set<string>();
  const files = [
    ...readdirSync(join(root, 'deploy', 'grafana')).filter((f) => f.endsWith('.json')).map((f) => join(root, 'deploy', 'grafana', f)),
    ...readdirSync(join(root, 'deploy', 'prometheus')).filter((f) => /\.ya?ml$/.test(f) && !/\.test\.ya?ml$/.test(f)).map((f) => join(root, 'deploy', 'prometheus', f)),
  ];
  for (const f of files) for (const m of readFileSync(f, 'utf8').matchAll(/\bgitlb_[a-z0-9_]+/g)) names.add(m[0]);
  return [...names].sort();
}

test('netns: /metrics counts exactly what the client sent (DSR and SNAT), shows a health flip, names every deployed metric', async (t) => {
  const work = mkdtempSync(join(tmpdir(), `gitlb-metrics-${process.pid}-`));
  const configDir = join(work, 'config');
  const stateDir = join(work, 'lab');
  writeConfig(configDir);
  try {
    const state = await labUp({ configDir, stateDir, clientCount: 1, log: (l) => t.log(l) });
    const bad = state.daemons.filter((d) => !d.started);
    if (bad.length) throw new Error(`daemons not running: ${bad.map((d) => `${d.node}: ${d.reason}`).join('; ')}`);
    const head = (await run(['git', '--git-dir', state.git!.bare, 'rev-parse', 'main'])).stdout.trim();
    const applied = await waitForLocalApplied(stateDir, ['lb-1', 'be-1', 'be-2'], head, 90_000);
    if (!applied.ok) for (const n of applied.missing) t.log(`${n}: ${readFileSync(join(stateDir, 'logs', `daemon-${n}.log`), 'utf8').slice(-1500)}`);
    t.true(applied.ok, `not applied: ${applied.missing.join(', ')}`);
    t.is((await scrape(state, 'lb-1', '/healthz')).code, 200, '/healthz is ready once a revision is applied');

    // wait until both reals are up (health checks start unknown; render keeps unknown reals in the table anyway)
    for (let i = 0; i < 100; i++) {
      const s = await samplesOf(state, 'lb-1');
      if (sumOf(s, 'gitlb_real_health_state', { service: 'udp-dsr', state: 'up' }) === 2) break;
      await new Promise((r) => setTimeout(r, 200));
    }

    for (const [mode, service, vip, port, flows, perFlow] of [['dsr', 'udp-dsr', '203.0.113.10', 9000, 8, 5], ['snat', 'udp-snat', '203.0.113.40', 53, 6, 4]] as const) {
      const before = await samplesOf(state, 'lb-1');
      const sent = await sendUdp(state, vip, port, flows, perFlow);
      const after = await samplesOf(state, 'lb-1');
      const delta = (name: string, labels: Record<string, string>) => sumOf(after, name, labels) - sumOf(before, name, labels);
      t.is(sent.sent, flows * perFlow);
      t.is(sent.byBackend['no-echo'], undefined, `${mode}: every flow was answered (${JSON.stringify(sent.byBackend)})`);
      t.is(delta('gitlb_service_packets_total', { service }), sent.sent, `${mode}: service packets = datagrams sent`);
      t.is(delta('gitlb_service_new_connections_total', { service }), flows, `${mode}: one new connection per flow`);
      for (const [name, addr] of Object.entries(BE))
        t.is(delta('gitlb_real_packets_total', { real: addr }), sent.byBackend[name] ?? 0, `${mode}: packets to ${name} = datagrams it echoed`);
      t.true(delta('gitlb_real_bytes_total', { real: BE['be-1']! }) + delta('gitlb_real_bytes_total', { real: BE['be-2']! }) >= sent.sent * 42,
        `${mode}: bytes counted`);
      t.log(`${mode}: ${sent.sent} datagrams, ${JSON.stringify(sent.byBackend)}`);
      if (mode === 'snat') t.true(sumOf(after, 'gitlb_snat_translations', { address: '198.51.100.111' }) >= flows, 'SNAT translations in use');
    }

    // gitlb top --once in the lb namespace: the kernel totals, named and with health from the daemon's /metrics
    const top = await nsExec(labNs(state, 'lb-1'), [process.execPath, '--import', 'tsx', join(root, 'src', 'cli', 'main.ts'), 'top', '--once',
      '--interval', '0.3', '--pin-root', state.pinRoots[0]!, '--node', 'lb-1', '--metrics', METRICS['lb-1']!], { timeoutMs: 60_000, cwd: root });
    t.is(top.code, 0, top.stderr);
    const m = await samplesOf(state, 'lb-1');
    const row = (re: RegExp) => top.stdout.split('\n').find((l) => re.test(l)) ?? '';
    for (const [service, listener] of [['udp-dsr', '203.0.113.10:9000/UDP'], ['udp-snat', '203.0.113.40:53/UDP']]) {
      const cells = row(new RegExp(`^${service}\\s`)).trim().split(/\s+/);
      t.is(cells[1], listener, top.stdout);
      t.is(Number(cells[cells.length - 1]), sumOf(m, 'gitlb_service_packets_total', { service }), `top's total for ${service} = /metrics`);
    }
    for (const addr of Object.values(BE)) t.regex(row(new RegExp(`^${addr.replace(/\./g, '\\.')}\\s+udp-dsr\\s`)), /\sup\s+(49|50)\.\d%\s/, top.stdout);
    t.log(top.stdout);

    // the lab's Prometheus (router namespace) scrapes the daemons: its per-real new connections match /metrics
    const want = Object.fromEntries(Object.values(BE).map((a) => [a, sumOf(m, 'gitlb_real_new_connections_total', { real: a })]));
    let got: Record<string, number> = {};
    for (let i = 0; i < 60 && JSON.stringify(got) !== JSON.stringify(want); i++) {
      if (i) await new Promise((r) => setTimeout(r, 500));
      const q = await queryPrometheus(labNs(state, 'router'), 'sum by (real) (gitlb_real_new_connections_total{node="lb-1"})').catch(() => []);
      got = Object.fromEntries(Object.values(BE).map((a) => [a, q.find((x) => x.metric.real === a)?.value ?? -1]));
    }
    t.deepEqual(got, want, 'Prometheus in the lab scraped lb-1');

    // every metric the dashboard and the rules name is on a live /metrics (lb and backend together)
    const live = new Set([...(await samplesOf(state, 'lb-1')), ...(await samplesOf(state, 'be-1'))].map((s) => s.name));
    const missing = deployedMetricNames().filter((n) => !live.has(n));
    t.deepEqual(missing, [], 'metrics named in deploy/ but absent from /metrics');

    // docs/metrics.md against a live /metrics (lb and backend): every exported gitlb_* metric is documented with
    // its type, every documented one is exported (BGP's only with BGP settings: none here), and the label values
    // of drops, passes and backend events are exactly the documented ones
    const documented = readDocMetrics(join(root, 'docs', 'metrics.md'));
    const docOf = (name: string) => documented.find((d) => d.name === name)!;
    const rawLb = (await scrape(state, 'lb-1')).text;
    const rawBe = (await scrape(state, 'be-1')).text;
    const exposed = new Map([...exposedTypes(rawBe), ...exposedTypes(rawLb)]);
    t.deepEqual([...exposed.keys()].filter((n) => n.startsWith('gitlb_') && !documented.some((d) => d.name === n)).sort(), [],
      'exported but not in docs/metrics.md');
    t.deepEqual(documented.filter((d) => !d.section.startsWith('BGP') && !exposed.has(d.name)).map((d) => d.name), [],
      'in docs/metrics.md but not exported');
    t.deepEqual(documented.filter((d) => exposed.has(d.name) && exposed.get(d.name) !== d.type).map((d) => `${d.name}: ${d.type} vs ${exposed.get(d.name)}`), [],
      'documented type = exported type');
    const labelValues = (text: string, name: string, label: string) =>
      [...new Set(parsePromText(text).filter((x) => x.name === name).map((x) => x.labels[label]!))].sort();
    t.deepEqual(labelValues(rawLb, 'gitlb_drops_total', 'reason'), [...docOf('gitlb_drops_total').values].sort());
    for (const r of ['martian', 'l2_not_unicast', 'bad_ip_csum']) t.true(labelValues(rawLb, 'gitlb_drops_total', 'reason').includes(r), r);
    t.deepEqual(labelValues(rawLb, 'gitlb_passes_total', 'reason'), [...docOf('gitlb_passes_total').values].sort());
    t.deepEqual(labelValues(rawBe, 'gitlb_backend_events_total', 'event'), [...docOf('gitlb_backend_events_total').values].sort());

    // icmp_echo_reply: three echo requests to the VIP from the client, answered by lb-1's XDP program, each counted
    const echoBefore = sumOf(await samplesOf(state, 'lb-1'), 'gitlb_icmp_echo_replies_total', {});
    const ping = await nsExec(labNs(state, 'client'), ['ping', '-c', '3', '-W', '3', '203.0.113.10'], { timeoutMs: 15_000 });
    t.is(ping.code, 0, `the VIP answers ping: ${ping.stdout}${ping.stderr}`);
    await new Promise((r) => setTimeout(r, 500)); // past the scrape memo (one read of the maps serves a scrape's metrics)
    t.is(sumOf(await samplesOf(state, 'lb-1'), 'gitlb_icmp_echo_replies_total', {}) - echoBefore, 3, 'three echo replies counted');

    // gitlb top --drops --all: a row per documented drop reason, each total between two scrapes around it
    const dropsBefore = await samplesOf(state, 'lb-1');
    const drops = await nsExec(labNs(state, 'lb-1'), [process.execPath, '--import', 'tsx', join(root, 'src', 'cli', 'main.ts'), 'top', '--once', '--drops', '--all',
      '--interval', '0.3', '--pin-root', state.pinRoots[0]!, '--node', 'lb-1'], { timeoutMs: 60_000, cwd: root });
    t.is(drops.code, 0, drops.stderr);
    const dropsAfter = await samplesOf(state, 'lb-1');
    const rows = drops.stdout.split('\n').slice(drops.stdout.split('\n').findIndex((l) => l.startsWith('REASON')) + 1).filter(Boolean).map((l) => l.trim().split(/\s+/));
    t.deepEqual(rows.map((r) => r[0]).sort(), [...docOf('gitlb_drops_total').values].sort(), drops.stdout);
    for (const [reason, , , total] of rows) {
      const parsed = Number(total);
      if (!Number.isFinite(parsed)) continue; // 1.2k and the like: shown rounded
      t.true(parsed >= sumOf(dropsBefore, 'gitlb_drops_total', { reason: reason! }) && parsed <= sumOf(dropsAfter, 'gitlb_drops_total', { reason: reason! }),
        `${reason}: top ${total}, /metrics ${sumOf(dropsBefore, 'gitlb_drops_total', { reason: reason! })}..${sumOf(dropsAfter, 'gitlb_drops_total', { reason: reason! })}`);
    }

    // health flip: be-2's servers stop; the first scrape after the daemon logs the flip shows it
    const server = state.processes.find((p) => p.role === 'backend-server' && p.node === 'be-2')!;
    const logFile = join(stateDir, 'logs', 'daemon-lb-1.log');
    const logLines = () => readFileSync(logFile, 'utf8').split('\n');
    // only lines written after the kill: a real can go down once while the lab starts (its server not listening
    // yet), and that old line would be taken for this flip
    const before = logLines().length - 1;
    process.kill(server.pid, 'SIGKILL');
    let flip: Record<string, unknown> | undefined;
    for (let i = 0; i < 100 && !flip; i++) {
      await new Promise((r) => setTimeout(r, INTERVAL_MS / 2));
      flip = logLines().slice(before).filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((r) => r.stage === 'health' && r.real === BE['be-2'] && r.to === 'down' && r.service === 'udp-dsr');
    }
    t.truthy(flip, 'the daemon logged the flip as a JSON line naming service and real');
    t.is(flip?.node, 'lb-1');
    t.is(flip?.level, 'warn');
    const s = await samplesOf(state, 'lb-1');
    t.is(sumOf(s, 'gitlb_real_health_state', { service: 'udp-dsr', real: BE['be-2']!, state: 'down' }), 1, 'down on the next scrape');
    t.true(sumOf(s, 'gitlb_health_transitions_total', { service: 'udp-dsr', real: BE['be-2']!, to: 'down' }) >= 1);
  } finally {
    await labDown(stateDir).catch(() => {});
    rmSync(work, { recursive: true, force: true });
  }
});
