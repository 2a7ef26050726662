// The metrics endpoint on its own: /healthz is 503 until a revision is served, /metrics speaks Prometheus text,
// other paths and methods are refused; `gitlb run --metrics` rejects a bad address as a usage error (exit 2).
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeMetrics, startMetricsServer } from '../../src/reconciler/metrics/index.js';
import { parsePromText, samples, sumOf } from '../../src/reconciler/metrics/prom-text.js';
import type { NodeStatus } from '../../src/reconciler/status/status-doc.js';
import type { StatusXdp } from '../../src/reconciler/status/xdp-report.js';
import { runCli } from '../../src/cli/main.js';

test('metrics server: /healthz follows readiness, /metrics is Prometheus text, the rest is refused', async (t) => {
  const pins = mkdtempSync(join(tmpdir(), 'gitlb-metrics-pins-')); // nothing pinned: no data-plane series
  let served: string | null = null;
  const metrics = new NodeMetrics({ node: 'lb-9', pinRoot: pins, desired: () => null });
  const server = await startMetricsServer({ listen: '127.0.0.1:0', registry: metrics.registry, notReady: () => (served ? null : 'no revision applied yet') });
  try {
    const h1 = await fetch(`${server.url}/healthz`);
    t.is(h1.status, 503);
    t.regex(await h1.text(), /not ready: no revision applied yet/);
    served = 'a'.repeat(40);
    t.is((await fetch(`${server.url}/healthz`)).status, 200);

    metrics.setRole('lb');
    metrics.control.observeReconcile({ kind: 'failed', revision: 'b'.repeat(40), stage: 'validate', reason: 'x.yaml:1:1: bad', code: 'ConfigInvalid' });
    metrics.control.observeCommitApplied(1000, 1_060_000); // committed at 1000 s, applied 60 s later (ms)
    const res = await fetch(`${server.url}/metrics`);
    t.is(res.status, 200);
    t.regex(res.headers.get('content-type') ?? '', /^text\/plain/);
    const s = parsePromText(await res.text());
    t.is(sumOf(s, 'gitlb_node_info', { node: 'lb-9', role: 'lb' }), 1);
    t.is(sumOf(s, 'gitlb_reconciles_total', { result: 'failed', reason: 'validate' }), 1, 'reason is the stage, not free text');
    t.is(sumOf(s, 'gitlb_commit_to_applied_seconds_count'), 1);
    t.is(sumOf(s, 'gitlb_commit_to_applied_seconds_sum'), 60);
    t.is(sumOf(s, 'gitlb_service_packets_total'), 0, 'no pinned data plane, no series');

    t.is((await fetch(`${server.url}/other`)).status, 404);
    t.is((await fetch(`${server.url}/metrics`, { method: 'POST' })).status, 405);
  } finally {
    await server.close();
    rmSync(pins, { recursive: true, force: true });
  }
});

test('gitlb run --metrics: a bad address is a usage error, before anything starts', async (t) => {
  const stderr = process.stderr.write;
  let err = '';
  process.stderr.write = ((s: string) => ((err += s), true)) as typeof process.stderr.write;
  try {
    t.is(await runCli(['run', '--repo', '/nonexistent', '--node', 'x', '--metrics', 'nowhere']), 2);
  } finally {
    process.stderr.write = stderr;
  }
  t.regex(err, /--metrics: expected ADDR:PORT, got 'nowhere'/);
});

test('gitlb_xdp_attachment_info mirrors status.xdp: a fallback (also one a restart adopted) is labelled fell_back="true"', async (t) => {
  const pins = mkdtempSync(join(tmpdir(), 'gitlb-metrics-pins-'));
  t.teardown(() => rmSync(pins, { recursive: true, force: true }));
  const metrics = new NodeMetrics({ node: 'lb-9', pinRoot: pins, desired: () => null });
  let xdp: StatusXdp | undefined = { mode: 'generic', requested: 'auto', fellBack: true, forwards: null,
    detail: 'native XDP could not forward, fell back to generic (found 2026-12-01T00:00:00.000Z, adopted across a restart): eth0: only 0/4' };
  metrics.control.attach({ snapshot: () => ({ ...(xdp && { xdp }) }) as unknown as NodeStatus, desired: () => null });
  const series = async () => samples(parsePromText(await metrics.registry.metrics()), 'gitlb_xdp_attachment_info');
  t.like(await series(), [{ labels: { node: 'lb-9', mode: 'generic', requested: 'auto', fell_back: 'true', forwards: 'unknown' }, value: 1 }]);
  xdp = { mode: 'native', requested: 'auto', fellBack: false, forwards: true, detail: 'eth0: 4/4 XDP_TX probe frames transmitted' };
  t.like(await series(), [{ labels: { mode: 'native', fell_back: 'false', forwards: 'true' }, value: 1 }]);
  xdp = undefined; // backend nodes, and lb nodes before the first attach
  t.deepEqual(await series(), []);
});

test('gitlb_config_fetch_failing_seconds and _failures say a fetch outage is going on (0 while fetching works)', async (t) => {
  const pins = mkdtempSync(join(tmpdir(), 'gitlb-metrics-pins-'));
  t.teardown(() => rmSync(pins, { recursive: true, force: true }));
  const metrics = new NodeMetrics({ node: 'lb-9', pinRoot: pins, desired: () => null });
  let failing: { since: number; attempts: number } | null = null;
  metrics.control.attach({ snapshot: () => ({}) as unknown as NodeStatus, desired: () => null, fetchFailing: () => failing });
  const value = async (name: string) => samples(parsePromText(await metrics.registry.metrics()), name)[0]?.value;
  t.is(await value('gitlb_config_fetch_failing_seconds'), 0);
  t.is(await value('gitlb_config_fetch_failures'), 0);
  failing = { since: Date.now() - 90_000, attempts: 12 };
  t.true((await value('gitlb_config_fetch_failing_seconds'))! >= 90);
  t.is(await value('gitlb_config_fetch_failures'), 12);
});
