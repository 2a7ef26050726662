// The demo's metrics chapter: the lab's Prometheus (router namespace) scrapes every daemon's /metrics; after a
// burst of new connections, its per-real counts must equal what the clients saw, real by real.
import type { DemoContext } from './chapters.js';
import { runTraffic, tally } from './traffic.js';
import { queryPrometheus, type PromSample } from '../lab/prometheus.js';
import { sleep } from '../lab/netns.js';

const PER_REAL = 'sum by (real) (gitlb_real_new_connections_total{lab_role="lb"})';
export const SHARE_QUERY = 'sum by (real) (rate(gitlb_real_new_connections_total[1m])) / ignoring (real) group_left () sum (rate(gitlb_real_new_connections_total[1m]))';

const byReal = (s: PromSample[]) => new Map(s.map((x) => [x.metric.real ?? '', x.value]));
const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);

/** The per-real counts once Prometheus has scraped everything sent so far: equal across a scrape interval. */
async function settled(ns: string): Promise<Map<string, number>> {
  let last = byReal(await queryPrometheus(ns, PER_REAL));
  for (let i = 0; i < 10; i++) {
    await sleep(2500);
    const now = byReal(await queryPrometheus(ns, PER_REAL));
    if (total(now) === total(last)) return now;
    last = now;
  }
  return last;
}

export async function chapterMetrics(ctx: DemoContext): Promise<void> {
  ctx.n.chapter('Prometheus sees the same traffic');
  ctx.n.say('Every daemon serves /metrics (prom-client); the lab runs a real Prometheus in the router namespace that\n' +
    'scrapes them every 2 s. The data-plane counters come straight from the XDP program\'s per-CPU maps.');
  const before = await settled(ctx.view.routerNs);
  const r = await runTraffic(ctx.view.clientNs, { kind: 'burst', host: '203.0.113.10', port: 80, count: ctx.requests, concurrency: 32,
    sources: ctx.view.clientsV4, timeoutMs: 5000 });
  const t = tally(r.records);
  const answered = t.total - t.failed;
  ctx.n.say(`${ctx.requests} new connections to web (203.0.113.10:80); the clients were answered by ` +
    `${Object.entries(t.byBackend).sort().map(([b, c]) => `${b} ${c}`).join(', ')}.`);
  // wait for scrapes that include the burst (bounded)
  let delta = new Map<string, number>();
  for (let i = 0; i < 20; i++) {
    await sleep(1000);
    const after = byReal(await queryPrometheus(ctx.view.routerNs, PER_REAL));
    delta = new Map([...after].map(([real, v]) => [real, v - (before.get(real) ?? 0)]));
    if (total(delta) >= answered) break;
  }
  ctx.n.say('Per-real share of new connections over the last minute, asked of Prometheus:');
  await ctx.operator.run(['curl', '-s', '--data-urlencode', `query=${SHARE_QUERY}`, 'http://127.0.0.1:9090/api/v1/query'], {
    show: 0 });
  const shares = await queryPrometheus(ctx.view.routerNs, SHARE_QUERY);
  for (const s of shares.filter((x) => x.value > 0).sort((a, b) => (a.metric.real ?? '').localeCompare(b.metric.real ?? ''))) {
    const node = ctx.view.nodeByAddress.get(s.metric.real ?? '') ?? s.metric.real;
    ctx.n.say(`  ${node} (${s.metric.real}): ${(100 * s.value).toFixed(1)}%   counted in this burst: ${delta.get(s.metric.real ?? '') ?? 0}, answered: ${t.byBackend[node ?? ''] ?? 0}`);
  }
  const mismatched = ctx.view.backendNodes.filter((node) => {
    const addr = [...ctx.view.nodeByAddress].find(([, n]) => n === node)?.[0] ?? '';
    return (delta.get(addr) ?? 0) !== (t.byBackend[node] ?? 0);
  });
  if (mismatched.length === 0) ctx.n.ok('the lb nodes\' per-real counters equal what each backend answered, connection for connection');
  else {
    ctx.failures.push(`Prometheus per-real new connections differ from the clients' tally for ${mismatched.join(', ')}`);
    ctx.n.warn(`per-real counters and the clients' tally differ for ${mismatched.join(', ')}`);
  }
}
