// bench/e2e's per-mode comparison (bench/e2e/table.ts comparisons): each gitlb mode against its own path's floor
// and the kernel's balancer for that path on lb-1, as differences of ratios to direct.
import test from 'ava';
import { comparisons, type Line } from '../../bench/e2e/table.js';

const line = (name: string, rps: number | null, cps: number | null): Line => ({
  name, errors: 0, latencyMs: 1,
  rps: { value: 1, ratio: rps, low: rps, high: rps },
  cps: { value: 1, ratio: cps, low: cps, high: cps },
});

test('dsr modes against the l2 floor and the nftables DSR rule; snat against its own path\'s floor and full NAT', (t) => {
  const out = comparisons([
    line('direct, 3 backends [lab 1]', 1, 1),
    line('nftables full nat on lb-1 (dnat+snat, like snat mode) [lab 1]', 0.6, 0.65),
    line('haproxy tcp mode on lb-1 (proxy) [lab 1]', 0.54, 0.39),
    line('nftables dsr on lb-1 (netdev fwd, stateless, like dsr/l2) [lab 1]', 0.8, 0.77),
    line('web  dsr/l2 [native]', 0.75, 0.76),
    line('dns  snat (tcp) [native]', 0.79, 0.66),
    line('web  dsr/l2 [generic]', 0.5, 0.5),
    line('xdp l2 floor (web\'s VIP) [native]', 0.65, 0.74),
    line('xdp floor, replies via the lb too (SNAT\'s path) [native]', 0.56, 0.65),
  ]);
  const row = (name: string) => out.find((l) => l.startsWith(name))!.slice(28).trim().replace(/\s+/g, ' ');
  t.is(row('web  dsr/l2 [native]'), '+0.10 / +0.02 -0.05 / -0.01 +0.21 / +0.37');
  t.is(row('dns  snat (tcp) [native]'), '+0.23 / +0.01 +0.19 / +0.01 +0.25 / +0.27');
  // no generic floor in this run: that column is empty, the peers are still compared
  t.is(row('web  dsr/l2 [generic]'), '- / - -0.30 / -0.27 -0.04 / +0.11');
  t.is(out.filter((l) => /\[(native|generic)\]/.test(l)).length, 3, 'peers, floors and direct are not modes');
});

test('a run without gitlb modes prints no comparison', (t) => {
  t.deepEqual(comparisons([line('direct, 3 backends [lab 1]', 1, 1), line('xdp l2 floor (web\'s VIP) [native]', 0.65, 0.74)]), []);
});
