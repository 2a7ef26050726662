// Demo chapter (issue 14): drain an lb node by commit. The router learns the VIPs by BGP from BIRD on each lb
// node; `state: drain` makes lb-1 withdraw them, the router's route goes from two next hops to one, and the
// connections that were open keep working (same Maglev table on lb-2, conntrack consulted first on lb-1).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DemoContext } from './chapters.js';
import { measureFailover, waitForHops } from './failover.js';

const VIP = '203.0.113.10';

export async function chapterDrain(ctx: DemoContext): Promise<void> {
  const { state } = ctx.view;
  if (!state.plan.bird) return; // a config without BGP settings: static ECMP, nothing to drain by BGP
  ctx.n.chapter('Drain an lb node by pull request');
  ctx.n.say('The router learns each VIP by BGP from BIRD on lb-1 and lb-2 (gitlb renders their BIRD configuration)\n' +
    'and merges the two paths into one ECMP route:');
  await ctx.operator.run(['ip', 'route', 'show', `${VIP}/32`]);
  const lb1 = state.plan.nodes.find((x) => x.name === 'lb-1')!.addresses.find((a) => !a.includes(':'))!;
  ctx.n.say('The operator sets lb-1 to `state: drain` and pushes, while 100 long-lived connections (a request every\n' +
    '500 ms each) run through the VIP:');
  const file = join(ctx.clone, 'nodes', 'lb-1.yaml');
  const before = readFileSync(file, 'utf8');
  writeFileSync(file, before.replace(/state: active/, 'state: drain'));
  await ctx.operator.run(['git', 'diff'], { cwd: ctx.clone });
  const res = await measureFailover(state, {
    vip: VIP,
    port: 80,
    leaving: lb1,
    flows: 100,
    durationMs: 12_000,
    intervalMs: 500,
    settleMs: 2000,
    routeTimeoutMs: 60_000,
    event: async () => {
      await ctx.operator.run(['git', 'commit', '--quiet', '-am', 'Drain lb-1'], { cwd: ctx.clone, show: 0 });
      await ctx.operator.run(['git', 'push', '--quiet', 'origin', 'main'], { cwd: ctx.clone, show: 0 });
    },
  });
  ctx.n.say(`lb-1's daemon applied the commit and withdrew the VIPs; the router's route ${res.routeChangeMs === null ? 'did NOT change' : `changed ${res.routeChangeMs} ms after the push`}:`);
  await ctx.operator.run(['ip', 'route', 'show', `${VIP}/32`]);
  const share = res.survived / Math.max(1, res.flows);
  ctx.n.say(`${res.survived} of ${res.flows} connections opened before the drain completed without an error (${(share * 100).toFixed(1)}%); ${res.switchedBackend} changed backend.`);
  if (res.routeChangeMs === null || res.hopsAfter.includes(lb1) || share < 0.99) {
    ctx.failures.push(`drain: route ${res.hopsBefore.join(',')} -> ${res.hopsAfter.join(',')}, ${res.survived}/${res.flows} connections survived`);
    ctx.n.warn('the drain did not go as expected');
  } else ctx.n.ok('new flows go to lb-2 only; the open connections kept their backends');

  ctx.n.say('Undrain: `git revert` the commit; lb-1 announces again.');
  await ctx.operator.run(['git', 'revert', '--no-edit', 'HEAD'], { cwd: ctx.clone, show: 1 });
  await ctx.operator.run(['git', 'push', '--quiet', 'origin', 'main'], { cwd: ctx.clone, show: 0 });
  const back = await waitForHops(state, [VIP], (h) => h.includes(lb1) && h.length === 2, 60_000, 200);
  await ctx.operator.run(['ip', 'route', 'show', `${VIP}/32`]);
  if (back === null) {
    ctx.failures.push('undrain: lb-1 did not announce again within 60 s');
    ctx.n.warn('lb-1 did not come back into the route');
  } else ctx.n.ok('two next hops again');
}
