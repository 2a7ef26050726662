// The SNAT address handover made visible and configurable (issue 24): `gitlb run --snat-handback-limit` (validated,
// the flag named in the refusal) and the metric gitlb_snat_handback_pending. The takeover's report itself is tested in
// test/unit/snat-takeover.test.ts, the status lines in test/unit/flows-status.test.ts and status-verdict.test.ts.
import test from 'ava';
import { Registry } from 'prom-client';
import { FlowSyncMetrics } from '../../src/reconciler/metrics/flow-sync.js';
import type { HandbackReport } from '../../src/reconciler/flows/snat-takeover.js';
import { holdSeconds } from '../../src/cli/commands/run.js';
import { gitlbInProcess } from '../helpers/cli-repo.js';

test('gitlb_snat_handback_pending is 1 per address held for a returned owner, and absent once given back', async (t) => {
  const reg = new Registry();
  const m = new FlowSyncMetrics(reg);
  let handback: Record<string, HandbackReport> = { '198.51.100.111': { owner: 'lb-1', since: '2026-12-01T12:00:00.000Z', waitingFor: ['sync-spoke'],
    limitSeconds: 120, giveBackBy: '2026-12-01T12:02:00.000Z' } };
  m.attach(() => ({}), { serving: () => ({ '198.51.100.111': 'lb-1', '198.51.100.113': 'lb-3' }), handback: () => handback });
  const held = await reg.metrics();
  t.regex(held, /^gitlb_snat_handback_pending\{address="198\.51\.100\.111",owner="lb-1"\} 1$/m);
  t.false(/gitlb_snat_handback_pending\{[^}]*lb-3/.test(held), 'a lost owner is served, not pending');
  t.regex(held, /^gitlb_snat_takeover_serving\{address="198\.51\.100\.111",owner="lb-1"\} 1$/m, 'still served meanwhile');
  handback = {};
  t.false(/^gitlb_snat_handback_pending\{/m.test(await reg.metrics()), 'given back: no series');
});

test('--snat-handback-limit takes whole seconds from 0 to 3600 (benign: 0, 120, 3600)', (t) => {
  t.is(holdSeconds('0'), 0);
  t.is(holdSeconds('120'), 120);
  t.is(holdSeconds('3600'), 3600);
  for (const bad of ['-1', '3601', '1.5', '', 'abc', '1e3', ' 5']) t.throws(() => holdSeconds(bad), { message: /is not a number of seconds from 0 to 3600/ }, bad);
});

test('gitlb run refuses a bad --snat-handback-limit before starting anything, naming the flag (exit 2)', async (t) => {
  for (const bad of ['-5', '3601', 'soon']) {
    const r = await gitlbInProcess(['run', '--node', 'lb-1', '--repo', '/nonexistent/gitlb-repo', '--interface', 'gitlbnone0', '--metrics', 'off',
      '--snat-handback-limit', bad, '--once']);
    t.is(r.code, 2, r.stdout + r.stderr);
    t.regex(r.stderr, /--snat-handback-limit/, r.stderr);
    t.regex(r.stderr, /from 0 to 3600/);
  }
});
