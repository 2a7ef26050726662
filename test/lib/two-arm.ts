// Checks on SNAT traffic through bench/e2e/two-arm-lab.ts's lb node with two interfaces, shared by the tests that
// attach xdp_lb there at start (xdp-two-arm) and on a config change (xdp-egress-change).
import type { ExecutionContext } from 'ava';
import { TWO_ARM, lbResets, requests, type TwoArmLab } from '../../bench/e2e/two-arm-lab.js';

/** 20 SNAT connections, each on its own: all answered by b1 and b2, which saw the snatAddress; one translation each,
 * the replies translated by xdp_lb, and no reset from the lb node's kernel (where an untranslated reply lands). */
export function snatConnectionsOk(t: ExecutionContext, lab: TwoArmLab, label: string): void {
  lab.refreshNeighbours();
  const before = { c: lab.counters(), rsts: lbResets(lab) };
  const got = requests(lab, TWO_ARM.vip.snat, 20);
  const after = { c: lab.counters(), rsts: lbResets(lab) };
  t.deepEqual(got.filter((a) => !new RegExp(`^backend=b[12] local=198\\.51\\.100\\.1[12]:80 client=${TWO_ARM.lb.replace(/\./g, '\\.')}:\\d+$`).test(a)), [],
    `${label}: every SNAT connection answered by a backend that saw the snatAddress`);
  t.deepEqual([...new Set(got.map((a) => a.slice(0, 10)))].sort(), ['backend=b1', 'backend=b2'], `${label}: both backends`);
  t.is(after.c.snat_new! - before.c.snat_new!, 20, `${label}: one translation per SNAT connection`);
  t.true(after.c.snat_reply! - before.c.snat_reply! >= 40, `${label}: the replies were translated by xdp_lb (+${after.c.snat_reply! - before.c.snat_reply!})`);
  t.is(after.rsts - before.rsts, 0, `${label}: the lb node's kernel reset nothing`);
}
