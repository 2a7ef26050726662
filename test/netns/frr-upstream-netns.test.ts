// FRR as the upstream router (issue 24): the lab variant where the router the lb nodes' BIRD peers with is FRR
// (Debian frr: bgpd + zebra, `maximum-paths`, src/lab/frr.ts), so the announcements gitlb renders are proven against
// a routing daemon other than the one the lb nodes run. Real daemons (gitlb run --flow-sync on every lb node, BIRD on
// the lb nodes, FRR on the router), real traffic through the namespaces, one lab for the file:
// - both lb nodes' sessions are Established at FRR, and zebra installed one multipath kernel route per VIP (both lb
//   nodes as next hops, proto bgp), IPv4 and IPv6; requests through the VIP are answered;
// - lb-1's BIRD killed: FRR drops its paths as the session closes (graceful restart is off: no stale path kept), and
//   takes them again when BIRD is back;
// - taking the lab down stops zebra and bgpd and removes what they left (their crash-log directories).
// Connections through drains, daemon kills and node loss under FRR: the survival matrix,
// test/netns/flow-sync-lab-frr.test.ts (test/lib/survival-matrix.ts).
import test from 'ava';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { labNs, restartBird, routerSessions } from '../../src/lab/lab.js';
import { isAlive } from '../../src/lab/processes.js';
import { nsExec } from '../../src/lab/netns.js';
import { routerNextHops, waitForHops } from '../../src/demo/failover.js';
import { runTraffic } from '../../src/demo/traffic.js';
import { startE2eLab, type E2eLab } from '../e2e-lab.js';

const LB1 = '198.51.100.11';
const LB2 = '198.51.100.12';
const BOTH6 = ['2001:db8:1::11', '2001:db8:1::12'];
const WEB = '203.0.113.10'; // web: dsr, encap l2
const VIPS4 = [WEB, '203.0.113.20', '203.0.113.30', '203.0.113.40', '203.0.113.50'];
const VIP6 = '2001:db8:ff::10';
const SECRET = 'c/oKnaUUmR4gXaBF/NAYotixhNqp8pwYwXJSE1iXSKk='; // test-only peer secret
const both = (h: string[], vip: string) => (vip.includes(':') ? h.join() === BOTH6.join() : h.join() === [LB1, LB2].join());

let lab: E2eLab | null = null;
let labError: Error | null = null;
const need = () => {
  if (!lab) throw new Error(`the lab did not come up: ${labError?.message ?? 'unknown'}`);
  return lab;
};

test.before(async (t) => {
  t.timeout(240_000);
  try {
    lab = await startE2eLab((s) => t.log(s), {
      routing: 'bgp',
      router: 'frr',
      daemonArgs: (scratch) => {
        const file = join(scratch, 'peer.secret');
        writeFileSync(file, `${SECRET}\n`, { mode: 0o600 });
        return ['--flow-sync', '--peer-secret-file', file];
      },
    });
    const ms = await waitForHops(lab.state, [...VIPS4, VIP6], both, 60_000, 200);
    if (ms === null) throw new Error(`FRR did not learn every VIP from both lb nodes within 60 s: ${JSON.stringify(await routerSessions(lab.state))}`);
  } catch (err) {
    labError = err as Error;
  }
});

test.after.always(async () => {
  await lab?.close();
});

test.serial('FRR on the router: four Established sessions, one multipath kernel route per VIP over both lb nodes, traffic answered', async (t) => {
  const l = need();
  t.is(l.state.plan.bird?.router, 'frr');
  t.false(l.state.processes.some((p) => p.role === 'bird' && !p.node), 'no BIRD on the router');
  t.deepEqual(l.state.processes.filter((p) => p.role === 'frr').map((p) => p.argv[0]!.split('/').pop()).sort(), ['bgpd', 'zebra']);
  const sessions = await routerSessions(l.state);
  t.deepEqual(Object.keys(sessions).sort(), [LB1, LB2, ...BOTH6].sort());
  t.true(Object.values(sessions).every((s) => s === 'Established'), JSON.stringify(sessions));
  const route = (await nsExec(labNs(l.state, 'router'), ['ip', 'route', 'show', `${WEB}/32`])).stdout;
  t.log(`router: ${route.replace(/\s+/g, ' ').trim()}`);
  t.regex(route, /proto bgp/, 'installed by zebra');
  t.regex(route, new RegExp(`nexthop via ${LB1.replace(/\./g, '\\.')} `));
  t.regex(route, new RegExp(`nexthop via ${LB2.replace(/\./g, '\\.')} `));
  for (const vip of VIPS4) t.deepEqual(await routerNextHops(l.state, vip), [LB1, LB2], vip);
  t.deepEqual(await routerNextHops(l.state, VIP6), BOTH6);
  const r = await runTraffic(l.view.clientNs, { kind: 'burst', host: WEB, port: 80, count: 20, concurrency: 4, sources: l.view.clientsV4, timeoutMs: 5000 });
  t.is(r.records.filter((x) => x.backend).length, 20, 'every request through the VIP answered');
});

test.serial('lb-1 BIRD killed (kill -9): FRR drops its path when the session closes, not after a graceful-restart hold; back once BIRD is restarted', async (t) => {
  t.timeout(120_000);
  const l = need();
  t.not(await waitForHops(l.state, [WEB], both, 60_000, 200), null, 'both paths before the kill');
  const bird = [...l.state.processes].reverse().find((p) => p.role === 'bird' && p.node === 'lb-1')!;
  const killedAt = Date.now();
  process.kill(bird.pid, 'SIGKILL');
  const ms = await waitForHops(l.state, [WEB, VIP6], (h, v) => !h.includes(v.includes(':') ? BOTH6[0]! : LB1), 30_000, 50);
  t.log(`lb-1's path gone ${ms} ms after its BIRD was killed (${Date.now() - killedAt} ms with the last poll)`);
  // graceful restart would keep the stale path for its restart time (120 s by default); bounded well below that
  t.not(ms, null, 'FRR dropped lb-1\'s paths');
  t.deepEqual(await routerNextHops(l.state, WEB), [LB2]);
  const r = await runTraffic(l.view.clientNs, { kind: 'burst', host: WEB, port: 80, count: 20, concurrency: 4, sources: l.view.clientsV4, timeoutMs: 5000 });
  t.is(r.records.filter((x) => x.backend).length, 20, 'requests answered through lb-2');
  await restartBird(l.state, 'lb-1');
  t.not(await waitForHops(l.state, [...VIPS4, VIP6], both, 60_000, 200), null, 'lb-1 announces again');
});

test.serial('lab down stops zebra and bgpd and removes their crash-log directories', async (t) => {
  const l = need();
  const frr = l.state.processes.filter((p) => p.role === 'frr');
  t.is(frr.length, 2);
  t.true(frr.every((p) => isAlive(p)));
  await l.close();
  lab = null;
  for (const p of frr) {
    t.false(isAlive(p), `${p.argv[0]} (pid ${p.pid}) stopped`);
    t.false(existsSync(`/var/tmp/frr/${p.argv[0]!.split('/').pop()}.${p.pid}`));
  }
});
