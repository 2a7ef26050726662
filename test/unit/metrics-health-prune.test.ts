// gitlb_health_transitions_total keeps one series per (service, real, state) it ever counted; without pruning, every
// real that config changes added and removed over a daemon's lifetime would stay in /metrics for good.
import test from 'ava';
import { Registry } from 'prom-client';
import { HealthMetrics } from '../../src/reconciler/metrics/health.js';
import type { HealthSnapshot } from '../../src/reconciler/health/checker.js';

const snapshot = (reals: string[]): HealthSnapshot => ({
  services: { web: { reals: Object.fromEntries(reals.map((a) => [a, { state: 'up', since: '2026-01-01T00:00:00.000Z', check: 'tcp' }])) } } as HealthSnapshot['services'],
  stats: { targets: reals.length, inFlight: 0, maxInFlight: 1, peakInFlight: 0, checks: 0, suspected },
});
let suspected = 0;

test('transition counters of reals no longer checked leave /metrics', async (t) => {
  const reg = new Registry();
  const m = new HealthMetrics(reg);
  let reals = ['198.51.100.10', '198.51.100.11'];
  m.attach({ snapshot: () => snapshot(reals), decide: () => null });
  for (const real of reals) m.observeChange({ service: 'web', address: real, from: 'up', to: 'down', at: '2026-01-01T00:00:00.000Z' });
  t.regex(await reg.metrics(), /gitlb_health_transitions_total\{service="web",real="198\.51\.100\.11",to="down"\} 1/);
  reals = ['198.51.100.10'];
  const text = await reg.metrics();
  t.regex(text, /gitlb_health_transitions_total\{service="web",real="198\.51\.100\.10",to="down"\} 1/);
  t.false(text.includes('198.51.100.11'), text);
});

test('gitlb_health_passive_checks_total counts the checks passive signals moved forward', async (t) => {
  const reg = new Registry();
  const m = new HealthMetrics(reg);
  m.attach({ snapshot: () => snapshot(['198.51.100.10']), decide: () => null });
  t.regex(await reg.metrics(), /gitlb_health_passive_checks_total 0/);
  suspected = 3;
  t.regex(await reg.metrics(), /gitlb_health_passive_checks_total 3/);
});
