// The lab's Prometheus (Debian `prometheus`): runs in the router namespace, scrapes every node's `gitlb run`
// /metrics on the lab segment every 2 s, loads the shipped alert rules, and answers PromQL for the demo.
// Started after the daemons, stopped by `lab down` like every recorded lab process.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnDetached, type LabProcess } from './processes.js';
import { nsExec, waitForPort } from './netns.js';

/** Where each lab daemon serves /metrics: its node's first IPv4 address (reachable from the router). */
export const LAB_METRICS_PORT = 9462;
export const LAB_PROMETHEUS_LISTEN = { host: '127.0.0.1', port: 9090 };

export interface ScrapeTarget { node: string; role: 'lb' | 'backend'; address: string }

/** The node's address for --metrics (IPv4 first), or null when it has none. */
export function metricsAddress(addresses: string[]): string | null {
  return addresses.find((a) => !a.includes(':')) ?? addresses[0] ?? null;
}

/** prometheus.yml for the lab. Pure. */
export function prometheusConfig(targets: ScrapeTarget[], rulesFile: string | null): string {
  const hostPort = (t: ScrapeTarget) => (t.address.includes(':') ? `[${t.address}]` : t.address) + `:${LAB_METRICS_PORT}`;
  const lines = [
    '# written by gitlb lab (src/lab/prometheus.ts)',
    'global:',
    '  scrape_interval: 2s',
    '  evaluation_interval: 2s',
    ...(rulesFile ? ['rule_files:', `  - ${JSON.stringify(rulesFile)}`] : []),
    'scrape_configs:',
    '  - job_name: gitlb',
    '    static_configs:',
    ...targets.map((t) => `      - targets: ['${hostPort(t)}']\n        labels: { lab_role: ${t.role} }`),
  ];
  return lines.join('\n') + '\n';
}

/** True when the `prometheus` binary is installed (make deps installs it). */
export function prometheusAvailable(): boolean {
  return existsSync('/usr/bin/prometheus');
}

/** Starts Prometheus in `ns` with its data under `dir`; resolves when it listens. */
export async function startPrometheus(o: { ns: string; dir: string; targets: ScrapeTarget[]; rulesFile: string | null }): Promise<LabProcess> {
  mkdirSync(join(o.dir, 'data'), { recursive: true });
  const config = join(o.dir, 'prometheus.yml');
  writeFileSync(config, prometheusConfig(o.targets, o.rulesFile));
  const { host, port } = LAB_PROMETHEUS_LISTEN;
  const proc = spawnDetached('prometheus', o.ns, ['/usr/bin/prometheus', `--config.file=${config}`, `--storage.tsdb.path=${join(o.dir, 'data')}`,
    `--web.listen-address=${host}:${port}`, '--storage.tsdb.retention.time=1d', '--log.level=warn'], join(o.dir, 'prometheus.log'));
  await waitForPort(o.ns, port, 'tcp', { timeoutMs: 60_000 });
  return proc;
}

export interface PromSample { metric: Record<string, string>; value: number }

/** An instant PromQL query against the lab's Prometheus (from inside its namespace). */
export async function queryPrometheus(ns: string, promql: string): Promise<PromSample[]> {
  const { host, port } = LAB_PROMETHEUS_LISTEN;
  const r = await nsExec(ns, ['curl', '-s', '--max-time', '10', '--data-urlencode', `query=${promql}`, `http://${host}:${port}/api/v1/query`], { timeoutMs: 15_000 });
  if (r.code !== 0) throw new Error(`prometheus query failed: ${r.stderr.trim() || `curl exit ${r.code}`}`);
  const body = JSON.parse(r.stdout) as { status: string; error?: string; data?: { result: { metric: Record<string, string>; value: [number, string] }[] } };
  if (body.status !== 'success') throw new Error(`prometheus: ${body.error ?? body.status}`);
  return (body.data?.result ?? []).map((s) => ({ metric: s.metric, value: Number(s.value[1]) }));
}
