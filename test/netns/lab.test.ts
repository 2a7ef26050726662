// The lab: a pure plan checked for addresses and routes, then a real lab built, used and torn down.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bytesToAddr, addrToBytes, inCidr, isAllowedTestAddress } from '../../src/lab/addr.js';
import { labAlive, labClean, labDown, labNs, labStatus, labUp, readLabState, startDaemons, PROJECT_ROOT } from '../../src/lab/lab.js';
import { listNetns, nsExec } from '../../src/lab/netns.js';
import { loadConfigModel } from '../../src/lab/load-config.js';
import { isAlive, stopLabProcess } from '../../src/lab/processes.js';
import { labSpecFromModel, planAddresses, planLab, type LabNode, type LabSpec } from '../../src/lab/topology.js';

const VIP4 = '203.0.113.10';
const VIP6 = '2001:db8:113::10';
const SAMPLE_VIP6 = '2001:db8:ff::10';

function lbNode(n: number): LabNode {
  return {
    name: `lb-${n}`,
    role: 'lb',
    interface: 'eth0',
    addresses: [`198.51.100.1${n}`, `2001:db8:100::1${n}`],
    snatAddress: `198.51.100.11${n}`,
    allowedVips: ['203.0.113.0/24', '2001:db8:113::/64'],
    vips: [],
    tcpPorts: [],
    udpPorts: [],
  };
}
function beNode(n: number): LabNode {
  return {
    name: `be-${n}`,
    role: 'backend',
    interface: 'eth0',
    addresses: [`198.51.100.2${n}`, `2001:db8:100::2${n}`],
    allowedVips: [],
    vips: [VIP4, VIP6],
    tcpPorts: [80],
    udpPorts: [9000],
  };
}
const fullSpec: LabSpec = { nodes: [lbNode(1), lbNode(2), beNode(1), beNode(2), beNode(3)], clientCount: 3 };

const stateDirs: string[] = [];
function newStateDir(tag: string): string {
  const dir = `/tmp/gitlb-labtest-${process.pid}-${tag}`;
  stateDirs.push(dir);
  return dir;
}
/** A tiny config directory for the Git server to serve (these tests pass the lab spec directly). */
function configDir(): string {
  const dir = `/tmp/gitlb-labtest-${process.pid}-config`;
  stateDirs.push(dir);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'README.md'), 'lab test config\n');
  return dir;
}

test.after.always(async () => {
  for (const dir of stateDirs) {
    await labDown(dir).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
});

test('address helpers', (t) => {
  t.is(bytesToAddr(addrToBytes('2001:db8:0:0:0:0:0:1')), '2001:db8::1');
  t.is(bytesToAddr(addrToBytes('2001:db8:1:0:0:1:0:0')), '2001:db8:1::1:0:0');
  t.is(bytesToAddr(addrToBytes('192.0.2.7')), '192.0.2.7');
  t.true(inCidr('203.0.113.10', '203.0.113.0/24'));
  t.false(inCidr('203.0.114.10', '203.0.113.0/24'));
  t.true(inCidr('2001:db8:113::/64', '2001:db8::/32'));
  t.false(isAllowedTestAddress('10.0.0.1'));
  t.false(isAllowedTestAddress('2001:db9::1'));
  t.throws(() => addrToBytes('1.2.3'), { message: /bad IPv4/ });
  t.throws(() => addrToBytes('1::2::3'), { message: /bad IPv6/ });
});

test('plan: every address is in the test ranges; ECMP over both lb nodes; backends route clients via the router', (t) => {
  const plan = planLab(fullSpec);
  for (const a of planAddresses(plan)) t.true(isAllowedTestAddress(a), a);
  t.deepEqual(
    plan.namespaces.map((n) => n.short),
    ['client', 'router', 'sw', 'git', 'lb1', 'lb2', 'be1', 'be2', 'be3'],
  );
  t.deepEqual(plan.multipath, [
    { ns: 'router', dest: '2001:db8:113::/64', hops: [{ via: '2001:db8:100::11', dev: 'sw0' }, { via: '2001:db8:100::12', dev: 'sw0' }] },
    { ns: 'router', dest: '203.0.113.0/24', hops: [{ via: '198.51.100.11', dev: 'sw0' }, { via: '198.51.100.12', dev: 'sw0' }] },
  ]);
  t.deepEqual(plan.routes.find((r) => r.ns === 'be2' && r.dest === 'default'), { ns: 'be2', dest: 'default', spec: ['via', '198.51.100.1'] });
  t.deepEqual(plan.client.v4, ['192.0.2.10', '192.0.2.11', '192.0.2.12']);
  t.deepEqual(plan.client.v6, ['2001:db8:c1::10', '2001:db8:c1::11', '2001:db8:c1::12']);
  t.true(plan.sysctls.some((s) => s.ns === 'router' && s.key === 'net.ipv4.fib_multipath_hash_policy' && s.value === '3'));
  t.true(plan.sysctls.some((s) => s.ns === 'lb1' && s.key === 'net.ipv4.ip_forward' && s.value === '1'));
  t.true(plan.sysctls.some((s) => s.ns === 'be1' && s.key === 'net.ipv4.conf.all.arp_ignore' && s.value === '1'));
  t.deepEqual(plan.loAddrs.find((l) => l.ns === 'be3'), { ns: 'be3', addrs: [`${VIP4}/32`, `${VIP6}/128`] });
});

test('plan: refuses addresses outside the test ranges or off the segment, and duplicates', (t) => {
  const bad = (patch: Partial<LabNode>) => ({ ...fullSpec, nodes: [lbNode(1), { ...beNode(1), ...patch }] });
  t.throws(() => planLab(bad({ addresses: ['10.1.2.3'] })), { message: /be-1 address: 10\.1\.2\.3 is outside the test ranges/ });
  t.throws(() => planLab(bad({ addresses: ['192.0.2.50'] })), { message: /not on the lab's lb\/backend segment/ });
  t.throws(() => planLab(bad({ addresses: ['198.51.100.11'] })), { message: /already used by lb-1/ });
  t.throws(() => planLab(bad({ addresses: ['198.51.100.1'] })), { message: /already used by router/ });
  t.throws(() => planLab(bad({ vips: ['8.8.8.8'] })), { message: /VIP: 8\.8\.8\.8 is outside/ });
  t.throws(() => planLab({ ...fullSpec, nodes: [beNode(1)] }), { message: /no node with role lb/ });
});

test('plan from sample-config-repo: ports, VIPs on lo for DSR services only, ECMP over the VIP ranges', async (t) => {
  const spec = labSpecFromModel(await loadConfigModel(join(PROJECT_ROOT, 'sample-config-repo')));
  // The sample config has BGP settings: the router learns the VIPs from the lb nodes' BIRDs, no static routes.
  const bgpPlan = planLab(spec);
  t.deepEqual(bgpPlan.multipath, []);
  t.deepEqual(bgpPlan.bird!.sessions.map((x) => [x.node, x.lbAddress, x.routerAddress]), [
    ['lb-1', '198.51.100.11', '198.51.100.1'],
    ['lb-1', '2001:db8:1::11', '2001:db8:1::1'],
    ['lb-2', '198.51.100.12', '198.51.100.1'],
    ['lb-2', '2001:db8:1::12', '2001:db8:1::1'],
  ]);
  t.is(bgpPlan.bird!.routerAsn, 65000);
  for (const a of planAddresses(bgpPlan)) t.true(isAllowedTestAddress(a), a);
  t.throws(() => planLab({ ...spec, bgp: { ...spec.bgp!, lbs: [{ node: 'lb-1', routerId: '198.51.100.11', peers: [{ address: '198.51.100.9', asn: 65000 }] }] } }), {
    message: /lb-1: BGP peer 198\.51\.100\.9 is not the lab router/,
  });
  // Without them (or with routing 'static'), static ECMP routes over the VIP ranges.
  const plan = planLab({ ...spec, bgp: undefined });
  for (const a of planAddresses(plan)) t.true(isAllowedTestAddress(a), a);
  const be = (name: string) => spec.nodes.find((n) => n.name === name)!;
  t.true(be('be-1').tcpPorts.includes(80) && be('be-1').tcpPorts.includes(8080) && be('be-1').tcpPorts.includes(5353));
  t.true(be('be-1').udpPorts.includes(5353));
  t.false(be('be-3').udpPorts.includes(5353)); // be-3 is not a real of the dns service
  t.true(be('be-1').vips.includes(VIP4));
  t.true(be('be-1').vips.includes(SAMPLE_VIP6));
  t.false(be('be-1').vips.includes('203.0.113.40')); // dns is SNAT: the reals do not hold its VIP
  t.deepEqual(plan.multipath.map((m) => [m.dest, m.hops.map((h) => h.via)]), [
    ['2001:db8:ff::/64', ['2001:db8:1::11', '2001:db8:1::12']],
    ['203.0.113.0/24', ['198.51.100.11', '198.51.100.12']],
  ]);
  t.true(plan.routes.some((r) => r.ns === 'lb2' && r.dest === '203.0.113.0/24' && r.type === 'unreachable'));
});

test.serial('lab up from sample-config-repo (no daemons): routed client->backend traffic, ECMP, status, daemons, down', async (t) => {
  const stateDir = newStateDir('full');
  const state = await labUp({ configDir: join(PROJECT_ROOT, 'sample-config-repo'), stateDir, daemons: false, clientCount: 3, routing: 'static' });
  const prefix = state.prefix;
  const client = labNs(state, 'client');
  try {
    t.regex(prefix, /^glb\d+-$/);
    const mine = listNetns().filter((n) => n.startsWith(prefix)).sort();
    t.deepEqual(mine, state.namespaces.slice().sort());
    t.is(mine.length, 9);

    // Each backend's HTTP server answers the client over the routed path (client -> router -> segment),
    // from a chosen client source address, and names itself; the reply comes back via the router.
    for (const [i, be] of ['be-1', 'be-2', 'be-3'].entries()) {
      const r = await nsExec(client, ['curl', '-sS', '-m', '3', '--interface', '192.0.2.11', `http://198.51.100.2${i + 1}/`]);
      t.is(r.code, 0, r.stderr);
      t.regex(r.stdout, new RegExp(`^backend=${be} local=198\\.51\\.100\\.2${i + 1}:80 client=192\\.0\\.2\\.11:\\d+\\n$`));
    }
    const r6 = await nsExec(client, ['curl', '-sS', '-m', '3', 'http://[2001:db8:1::22]:8080/']);
    t.regex(r6.stdout, /^backend=be-2 local=\[2001:db8:1::22\]:8080 client=\[2001:db8:c1::1[0-2]\]:\d+\n$/);
    // UDP echo names the backend too (dns's targetPort 5353 on be-1, game's 7777 on be-3).
    const u = await nsExec(client, ['nc', '-u', '-w', '1', '198.51.100.21', '5353'], { input: 'ping-123' });
    t.is(u.stdout, 'backend=be-1 echo=ping-123');
    const u3 = await nsExec(client, ['nc', '-u', '-w', '1', '198.51.100.23', '7777'], { input: 'x' });
    t.is(u3.stdout, 'backend=be-3 echo=x');
    // DSR groundwork: a backend holds the VIP on lo and answers UDP from it (one socket per local address).
    const vipUdp = await nsExec(labNs(state, 'be-1'), ['nc', '-u', '-w', '1', VIP4, '7777'], { input: 'v' });
    t.is(vipUdp.stdout, 'backend=be-1 echo=v');
    // Backends reach clients via the router, not via an lb node (DSR replies bypass the lb nodes).
    const back = await nsExec(labNs(state, 'be-1'), ['ip', 'route', 'get', '192.0.2.10']);
    t.regex(back.stdout, /via 198\.51\.100\.1 dev eth0/);
    // lb nodes know every backend's MAC already (the XDP program needs neighbour entries).
    const neigh = (await nsExec(labNs(state, 'lb-1'), ['ip', 'neigh', 'show', '198.51.100.23'])).stdout;
    t.regex(neigh, /lladdr/);

    // ECMP: the multipath routes exist with both lb nodes, and the 5-tuple hash spreads flows over both.
    const router = labNs(state, 'router');
    const route = (await nsExec(router, ['ip', 'route', 'show', '203.0.113.0/24'])).stdout;
    t.regex(route, /nexthop via 198\.51\.100\.11 dev sw0/);
    t.regex(route, /nexthop via 198\.51\.100\.12 dev sw0/);
    const route6 = (await nsExec(router, ['ip', '-6', 'route', 'show', '2001:db8:ff::/64'])).stdout;
    t.regex(route6, /nexthop via 2001:db8:1::11 dev sw0/);
    t.regex(route6, /nexthop via 2001:db8:1::12 dev sw0/);
    const hops = new Set<string>();
    for (let sport = 50000; sport < 50024; sport++) {
      const g = await nsExec(router, ['ip', 'route', 'get', VIP4, 'from', '192.0.2.10', 'iif', 'cli0', 'ipproto', 'tcp', 'sport', String(sport), 'dport', '80']);
      const m = /via (198\.51\.100\.1[12])/.exec(g.stdout);
      if (m) hops.add(m[1]!);
    }
    t.deepEqual([...hops].sort(), ['198.51.100.11', '198.51.100.12']);

    // The Git server serves the config repository to the nodes.
    const lsRemote = await nsExec(labNs(state, 'lb-2'), ['git', 'ls-remote', state.git!.repoUrl]);
    t.is(lsRemote.code, 0, lsRemote.stderr);
    t.regex(lsRemote.stdout, /refs\/heads\/main/);

    // Status reads the kernel: all namespaces, their addresses, live processes, the ECMP routes.
    const s = (await labStatus(stateDir))!;
    t.true(s.up);
    t.true(s.complete);
    t.deepEqual(s.namespaces.map((n) => n.exists), Array(9).fill(true));
    t.true(s.namespaces.find((n) => n.node === 'lb-1')!.addrs.includes('eth0 198.51.100.111/32'));
    t.true(s.namespaces.find((n) => n.node === 'be-2')!.addrs.includes(`lo ${VIP4}/32`));
    t.deepEqual(s.processes.map((p) => [p.role, p.node ?? '', p.alive]), [
      ['anchor', '', true],
      ['git-server', '', true],
      ['backend-server', 'be-1', true],
      ['backend-server', 'be-2', true],
      ['backend-server', 'be-3', true],
    ]);
    t.is(s.ecmp.length, 2);
    // The same through the CLI.
    const cli = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'lab', 'status', '--state-dir', stateDir], {
      cwd: PROJECT_ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    });
    t.is(cli.status, 0, cli.stderr);
    t.regex(cli.stdout, new RegExp(`${prefix}be3 +be-3`));
    t.regex(cli.stdout, /backend-server +be-1 +pid \d+ +running/);
    t.regex(cli.stdout, /none \(started with --no-daemons\)/);

    // A running lab is never "stale".
    const cleaned = await labClean(stateDir);
    t.is(cleaned.lab, null);
    t.false(cleaned.namespaces.some((n) => n.startsWith(prefix)));
    t.false(cleaned.pins.some((n) => n.includes(prefix)), 'nor are its pins');

    // The integration step: `gitlb run` in every lb and backend namespace. Every daemon must be running, inside
    // its own node's network namespace; a daemon that exits at once is a failure, not an outcome.
    const reports = await startDaemons(readLabState(stateDir)!, { poll: '60' });
    t.deepEqual(reports.map((r) => r.node), ['lb-1', 'lb-2', 'be-1', 'be-2', 'be-3']);
    const after = readLabState(stateDir)!;
    for (const r of reports) {
      t.true(r.started, `${r.node}: ${r.reason ?? ''}`);
      const proc = after.processes.find((p) => p.role === 'daemon' && p.node === r.node)!;
      t.truthy(proc, r.node);
      t.true(proc.argv.includes('--repo') && proc.argv.includes(after.git!.repoUrl) && proc.argv.includes(r.node));
      t.true(isAlive(proc), `${r.node} still running`);
      const inode = statSync(`/run/netns/${labNs(after, r.node)}`).ino;
      t.is(readlinkSync(`/proc/${proc.pid}/ns/net`), `net:[${inode}]`, r.node);
    }
  } finally {
    const recorded = readLabState(stateDir)!;
    const down = await labDown(stateDir);
    t.truthy(down);
    t.deepEqual(listNetns().filter((n) => n.startsWith(prefix)), []);
    t.true(recorded.processes.every((p) => !isAlive(p)));
    t.true(recorded.pinRoots.every((dir) => !existsSync(dir)));
    t.false(existsSync(join(stateDir, 'state.json')));
    t.is(await labDown(stateDir), null); // idempotent
  }
});

test.serial('clean removes a lab whose anchor died, and nothing else', async (t) => {
  const stateDir = newStateDir('dead');
  const spec: LabSpec = { nodes: [lbNode(1), beNode(1)], clientCount: 1 };
  const state = await labUp({ spec, stateDir, daemons: false, configDir: configDir() });
  const server = state.processes.find((p) => p.role === 'backend-server')!;
  t.true(isAlive(server));
  // The anchor dies (e.g. killed by hand): the lab is now stale.
  await stopLabProcess(state.processes.find((p) => p.role === 'anchor')!);
  t.false(labAlive(readLabState(stateDir)!));
  const r = await labClean(stateDir);
  t.is(r.lab, state.prefix);
  t.deepEqual(listNetns().filter((n) => n.startsWith(state.prefix)), []);
  t.false(isAlive(server));
  t.is(readLabState(stateDir), null);
});
