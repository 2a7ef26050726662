// The lab's FRR router files (src/lab/frr.ts), as text: what test/netns/frr-upstream-netns.test.ts proves against
// the real bgpd and zebra, pinned here line by line so a change to the rendering is seen without a lab.
import test from 'ava';
import { frrDaemonArgv, routerBgpdConfig, routerZebraConfig } from '../../src/lab/frr.js';
import { routerRouteProto, type PlannedBird } from '../../src/lab/topology.js';

const session = (node: string, family: 4 | 6, lbAddress: string) =>
  ({ node, family, lbAddress, routerAddress: family === 4 ? '198.51.100.1' : '2001:db8:1::1', lbAsn: 65001 });
const plan: PlannedBird = {
  routerId: '198.51.100.1', routerAsn: 65000, holdTime: 3, keepaliveTime: 1, router: 'frr',
  sessions: [session('lb-1', 4, '198.51.100.11'), session('lb-1', 6, '2001:db8:1::11'), session('lb-2', 4, '198.51.100.12'),
    session('lb-2', 6, '2001:db8:1::12')],
  lbs: [{ node: 'lb-1', ns: 'lb1', routerId: '198.51.100.11' }, { node: 'lb-2', ns: 'lb2', routerId: '198.51.100.12' }],
};

/** The lines of one `address-family ipvN unicast` block. */
function family(text: string, v: 4 | 6): string[] {
  const lines = text.split('\n');
  const start = lines.indexOf(` address-family ipv${v} unicast`);
  if (start < 0) return [];
  return lines.slice(start + 1, lines.indexOf(' exit-address-family', start));
}

test('bgpd: every lb session with the plan\'s timers, ECMP over up to 16 paths per family, VIP host routes in, nothing out', (t) => {
  const c = routerBgpdConfig(plan);
  t.regex(c, /^router bgp 65000\n bgp router-id 198\.51\.100\.1\n/m);
  t.regex(c, /^ timers bgp 1 3$/m);
  t.regex(c, /^ bgp graceful-restart-disable$/m, 'a dropped session takes its routes at once');
  for (const s of plan.sessions) {
    t.true(c.includes(` neighbor ${s.lbAddress} remote-as 65001\n`), s.lbAddress);
    t.true(c.includes(` neighbor ${s.lbAddress} timers 1 3\n`), s.lbAddress);
    t.true(c.includes(` neighbor ${s.lbAddress} timers connect 3\n`), s.lbAddress);
  }
  for (const v of [4, 6] as const) {
    const f = family(c, v);
    t.true(f.includes('  maximum-paths 16'), `IPv${v}: multipath`);
    const mine = plan.sessions.filter((s) => s.family === v).map((s) => s.lbAddress);
    const named = [...new Set(f.flatMap((l) => /neighbor (\S+)/.exec(l)?.[1] ?? []))];
    t.deepEqual(named, mine, `IPv${v}: only that family's sessions`);
    for (const a of mine) {
      t.true(f.includes(`  neighbor ${a} activate`));
      t.true(f.includes(`  neighbor ${a} route-map gitlb-in-v${v} in`));
      t.true(f.includes(`  neighbor ${a} route-map gitlb-out out`));
    }
  }
  t.regex(c, /^ip prefix-list gitlb-vips4 seq 5 permit 0\.0\.0\.0\/0 ge 32$/m);
  t.regex(c, /^ipv6 prefix-list gitlb-vips6 seq 5 permit ::\/0 ge 128$/m);
  t.regex(c, /^route-map gitlb-out deny 10$/m);
  t.regex(c, /^route-map gitlb-in-v6 permit 10\n match ipv6 address prefix-list gitlb-vips6\n set ipv6 next-hop prefer-global\n/m);
});

test('bgpd: an IPv4-only plan has no IPv6 address family; zebra\'s file routes nothing itself', (t) => {
  const c = routerBgpdConfig({ ...plan, sessions: plan.sessions.filter((s) => s.family === 4) });
  t.deepEqual(family(c, 6), []);
  t.true(family(c, 4).includes('  maximum-paths 16'));
  t.notRegex(routerZebraConfig(plan), /^(ip route|ipv6 route|router|neighbor)/m);
});

test('daemons: every path under the lab\'s directory (nothing in /etc/frr or /run/frr), no TCP vty; routes read as proto bgp', (t) => {
  for (const d of ['zebra', 'bgpd'] as const) {
    const argv = frrDaemonArgv(d, '/lab/frr');
    t.is(argv[0], `/usr/lib/frr/${d}`);
    for (const flag of ['-f', '-i', '-z', '--vty_socket']) t.true(argv[argv.indexOf(flag) + 1]!.startsWith('/lab/frr'), `${d} ${flag}`);
    t.is(argv[argv.indexOf('-P') + 1], '0');
    t.false(argv.some((a) => a.startsWith('/etc/frr') || a.startsWith('/run/frr') || a.startsWith('/var/run/frr')));
  }
  t.is(routerRouteProto(plan), 'bgp');
  t.is(routerRouteProto({ ...plan, router: 'bird' }), 'bird');
  t.is(routerRouteProto({ ...plan, router: undefined }), 'bird', 'state files from before the variant: BIRD');
});
