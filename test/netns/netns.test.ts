// Network-namespace library: real namespaces, veth pairs, bridges, processes and sysctls, cleaned up afterwards.
// Serial: cleanupRun() removes everything this process made, so tests must not overlap.
import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import { anchorArgv } from '../../src/lab/lab.js';
import { statSync } from 'node:fs';
import {
  addMultipathRoute,
  addRoute,
  cleanStale,
  cleanupRun,
  createBridge,
  createNetns,
  createdNetns,
  creatorPid,
  deleteNetns,
  enableForwarding,
  getSysctl,
  isListening,
  listNetns,
  addrAddArgs,
  ipBatch,
  nsArgv,
  nsExec,
  routeAddArgs,
  setSysctls,
  nsName,
  nsSpawn,
  netnsPids,
  sleep,
  pidAlive,
  runPrefix,
  setEcmpHashPolicy,
  setSysctl,
  vethPair,
  waitForPort,
  waitForTcp,
} from '../../src/lab/netns.js';

test.after.always(async () => {
  await cleanupRun();
  // Nothing with this run's prefix may survive the test file.
  const left = listNetns().filter((n) => n.startsWith(runPrefix()));
  for (const n of left) await deleteNetns(n);
});

test.serial('runPrefix names this process; creatorPid reads it back', (t) => {
  t.is(runPrefix(), `glb${process.pid}-`);
  t.is(nsName('lb1'), `glb${process.pid}-lb1`);
  t.is(creatorPid(nsName('x')), process.pid);
  t.is(creatorPid('glbabc-x'), null);
  t.is(creatorPid('other123-x'), null);
});

test.serial('createNetns refuses names without the project prefix', async (t) => {
  await t.throwsAsync(() => createNetns('notours-1'), { message: /must start with 'glb'/ });
  t.false(listNetns().includes('notours-1'));
});

test.serial('create and delete a namespace; loopback is up', async (t) => {
  const ns = nsName('t-basic');
  await createNetns(ns);
  t.true(listNetns().includes(ns));
  t.true(createdNetns().includes(ns));
  const lo = await nsExec(ns, ['ip', '-br', 'link', 'show', 'lo']);
  t.regex(lo.stdout, /UNKNOWN|UP/);
  await deleteNetns(ns);
  t.false(listNetns().includes(ns));
  await deleteNetns(ns); // idempotent
});

test.serial('veth pair carries IPv4 and IPv6 between two namespaces', async (t) => {
  const a = nsName('t-va');
  const b = nsName('t-vb');
  await createNetns(a);
  await createNetns(b);
  try {
    await vethPair(
      { ns: a, name: 'eth0', addrs: ['192.0.2.1/24', '2001:db8:1::1/64'] },
      { ns: b, name: 'eth0', addrs: ['192.0.2.2/24', '2001:db8:1::2/64'] },
    );
    const p4 = await nsExec(a, ['ping', '-c', '2', '-i', '0.2', '-W', '3', '192.0.2.2']);
    t.is(p4.code, 0, p4.stdout + p4.stderr);
    const p6 = await nsExec(a, ['ping', '-6', '-c', '2', '-i', '0.2', '-W', '3', '2001:db8:1::2']);
    t.is(p6.code, 0, p6.stdout + p6.stderr);
    // The pair never appeared in the host namespace.
    const host = spawnSync('ip', ['-br', 'addr'], { encoding: 'utf8' }).stdout;
    t.false(host.includes('192.0.2.1'));
  } finally {
    await deleteNetns(a);
    await deleteNetns(b);
  }
});

test.serial('a bridge in its own namespace joins three namespaces on one L2 segment', async (t) => {
  const sw = nsName('t-sw');
  const hosts = [nsName('t-h1'), nsName('t-h2'), nsName('t-h3')];
  for (const ns of [sw, ...hosts]) await createNetns(ns);
  try {
    await createBridge(sw, 'br0');
    for (const [i, ns] of hosts.entries()) {
      await vethPair({ ns: sw, name: `p${i + 1}`, master: 'br0' }, { ns, name: 'eth0', addrs: [`198.51.100.${i + 1}/24`] });
    }
    const r = await nsExec(hosts[0]!, ['ping', '-c', '2', '-i', '0.2', '-W', '3', '198.51.100.3']);
    t.is(r.code, 0, r.stdout + r.stderr);
    const br = await nsExec(sw, ['bridge', 'link']);
    t.is(br.stdout.trim().split('\n').length, 3);
  } finally {
    for (const ns of [sw, ...hosts]) await deleteNetns(ns);
  }
});

test.serial('sysctls are per namespace; ECMP multipath route through a router', async (t) => {
  const c = nsName('t-cl');
  const r = nsName('t-rt');
  const l1 = nsName('t-l1');
  const l2 = nsName('t-l2');
  for (const ns of [c, r, l1, l2]) await createNetns(ns);
  const hostPolicy = spawnSync('sysctl', ['-n', 'net.ipv4.fib_multipath_hash_policy'], { encoding: 'utf8' }).stdout.trim();
  try {
    await vethPair({ ns: c, name: 'eth0', addrs: ['192.0.2.10/24'] }, { ns: r, name: 'c0', addrs: ['192.0.2.1/24'] });
    await vethPair({ ns: r, name: 'l1', addrs: ['198.51.100.1/28'] }, { ns: l1, name: 'eth0', addrs: ['198.51.100.2/28'] });
    await vethPair({ ns: r, name: 'l2', addrs: ['198.51.100.17/28'] }, { ns: l2, name: 'eth0', addrs: ['198.51.100.18/28'] });
    await enableForwarding(r);
    await setEcmpHashPolicy(r, 'l4');
    t.is(await getSysctl(r, 'net.ipv4.fib_multipath_hash_policy'), '3');
    t.is(await getSysctl(r, 'net.ipv6.fib_multipath_hash_fields'), '55'); // 0x0037, printed in decimal
    t.is(spawnSync('sysctl', ['-n', 'net.ipv4.fib_multipath_hash_policy'], { encoding: 'utf8' }).stdout.trim(), hostPolicy);
    await addMultipathRoute(r, '203.0.113.0/24', [
      { via: '198.51.100.2', dev: 'l1' },
      { via: '198.51.100.18', dev: 'l2' },
    ]);
    const routes = (await nsExec(r, ['ip', 'route', 'show', '203.0.113.0/24'])).stdout;
    t.regex(routes, /nexthop via 198\.51\.100\.2 dev l1/);
    t.regex(routes, /nexthop via 198\.51\.100\.18 dev l2/);
    // Both LB namespaces hold the same VIP; with L4 hashing, different source ports reach different next hops.
    for (const ns of [l1, l2]) {
      await nsExec(ns, ['ip', 'addr', 'add', '203.0.113.10/32', 'dev', 'lo']);
      await addRoute(ns, '192.0.2.0/24', ['via', ns === l1 ? '198.51.100.1' : '198.51.100.17']);
    }
    await addRoute(c, '0.0.0.0/0', ['via', '192.0.2.1']);
    const hops = new Set<string>();
    for (let sport = 40000; sport < 40032; sport++) {
      const g = await nsExec(r, ['ip', 'route', 'get', '203.0.113.10', 'from', '192.0.2.10', 'iif', 'c0', 'ipproto', 'tcp', 'sport', String(sport), 'dport', '80']);
      const m = /dev (l[12])/.exec(g.stdout);
      if (m) hops.add(m[1]!);
    }
    t.deepEqual([...hops].sort(), ['l1', 'l2']);
    const p = await nsExec(c, ['ping', '-c', '2', '-i', '0.2', '-W', '3', '203.0.113.10']);
    t.is(p.code, 0, p.stdout + p.stderr);
    await t.throwsAsync(() => setSysctl(r, 'bad key;rm', '1'), { message: /bad sysctl key/ });
  } finally {
    for (const ns of [c, r, l1, l2]) await deleteNetns(ns);
  }
});

test.serial('nsSpawn runs a server inside a namespace; waitForPort/waitForTcp see it; cleanupRun stops it', async (t) => {
  const a = nsName('t-sa');
  const b = nsName('t-sb');
  await createNetns(a);
  await createNetns(b);
  await vethPair({ ns: a, name: 'eth0', addrs: ['198.51.100.1/24'] }, { ns: b, name: 'eth0', addrs: ['198.51.100.2/24'] });
  // (socket errors ignored: waitForTcp's probe connects and resets at once)
  const script = `require('net').createServer((s) => { s.on('error', () => {}); s.end('hello from ns\\n'); }).listen(8080, '198.51.100.1');`;
  const child = nsSpawn(a, [process.execPath, '-e', script]);
  t.false(await isListening(b, 8080));
  await waitForPort(a, 8080, 'tcp', { timeoutMs: 10_000 });
  await waitForTcp(b, '198.51.100.1', 8080, { timeoutMs: 5000 });
  const r = await nsExec(b, ['timeout', '5', 'bash', '-c', 'cat < /dev/tcp/198.51.100.1/8080']);
  t.is(r.stdout, 'hello from ns\n', `exit ${r.code}: ${r.stderr}`);
  // The child's pid is the server itself (nsenter execs in place), so killing it stops the server.
  t.true(pidAlive(child.pid!));
  const done = await cleanupRun();
  t.true(done.killed >= 1);
  t.true(done.namespaces.includes(a) && done.namespaces.includes(b));
  t.false(pidAlive(child.pid!));
  t.false(listNetns().includes(a));
  await t.throwsAsync(() => waitForPort(a, 8080, 'tcp', { timeoutMs: 300 }));
});

test.serial('ipBatch runs many ip commands in one process; setSysctls sets several at once', async (t) => {
  const ns = nsName('t-batch');
  await createNetns(ns);
  try {
    await ipBatch(ns, [
      ['link', 'add', 'd0', 'type', 'bridge'], // (no dummy module on this kernel)
      addrAddArgs('d0', '198.51.100.7/24'),
      addrAddArgs('d0', '2001:db8:7::7/64'),
      ['link', 'set', 'd0', 'up'],
      routeAddArgs('203.0.113.0/24', [], 'unreachable'),
      routeAddArgs('::/0', ['via', '2001:db8:7::1']),
    ]);
    const addrs = (await nsExec(ns, ['ip', '-br', 'addr', 'show', 'd0'])).stdout;
    t.regex(addrs, /198\.51\.100\.7\/24/);
    t.regex(addrs, /2001:db8:7::7\/64/);
    t.regex((await nsExec(ns, ['ip', 'route', 'show', '203.0.113.0/24'])).stdout, /unreachable 203\.0\.113\.0\/24/);
    t.regex((await nsExec(ns, ['ip', '-6', 'route', 'show', 'default'])).stdout, /via 2001:db8:7::1/);
    // A failing line stops the batch with the line number in the error.
    await t.throwsAsync(() => ipBatch(ns, [['link', 'set', 'nosuchdev', 'up']]), { message: /Command failed -:1|Cannot find device/ });
    await t.throwsAsync(() => ipBatch(ns, [['link', 'set', 'a b', 'up']]), { message: /needs quoting/ });
    await setSysctls(ns, [['net.ipv4.ip_forward', '1'], ['net.ipv4.conf.all.rp_filter', '2']]);
    t.is(await getSysctl(ns, 'net.ipv4.ip_forward'), '1');
    t.is(await getSysctl(ns, 'net.ipv4.conf.all.rp_filter'), '2');
    await t.throwsAsync(() => setSysctls(ns, [['net.ipv4.ip_forward', '1; reboot']]), { message: /bad sysctl value/ });
  } finally {
    await deleteNetns(ns);
  }
});

test.serial('nsExec enters the network namespace only: the host bpffs stays visible for pinning', async (t) => {
  const ns = nsName('t-enter');
  await createNetns(ns);
  try {
    const inode = statSync(`/run/netns/${ns}`).ino;
    const r = await nsExec(ns, ['readlink', '/proc/self/ns/net']);
    t.is(r.stdout.trim(), `net:[${inode}]`);
    const hostBpffs = spawnSync('mountpoint', ['-q', '/sys/fs/bpf']).status === 0;
    const inner = await nsExec(ns, ['mountpoint', '-q', '/sys/fs/bpf']);
    t.is(inner.code === 0, hostBpffs);
    // `sysfs: true` (ip netns exec) gives the namespace's own /sys instead, without bpffs.
    const viaIp = await nsExec(ns, ['ls', '/sys/class/net'], { sysfs: true });
    t.is(viaIp.stdout.trim(), 'lo');
    t.throws(() => nsArgv('../etc', ['true']), { message: /bad netns name/ });
  } finally {
    await deleteNetns(ns);
  }
});

test.serial('cleanStale removes only prefixed namespaces whose creator is dead', async (t) => {
  // A pid that certainly existed and is now dead: a child that has exited and been reaped.
  const dead = spawnSync('true').pid!;
  t.false(pidAlive(dead));
  // A prefix of this test's own: a sweep over plain 'glb' would race with other tests' labs tearing down.
  const prefix = 'glbcs';
  const staleNs = `${prefix}${dead}-t-stale`;
  const liveNs = `${prefix}${process.pid}-t-live`;
  const keptNs = `${prefix}${dead}-t-kept`;
  const foreignNs = `x${prefix}${dead}-t-foreign`; // not our prefix: must never be touched
  spawnSync('ip', ['netns', 'add', staleNs]);
  spawnSync('ip', ['netns', 'add', keptNs]);
  spawnSync('ip', ['netns', 'add', foreignNs]);
  await createNetns(liveNs);
  try {
    const preview = await cleanStale(prefix, { dryRun: true, keep: [keptNs] });
    t.true(preview.includes(staleNs));
    t.true(listNetns().includes(staleNs));
    const removed = await cleanStale(prefix, { keep: [keptNs] });
    t.true(removed.includes(staleNs));
    t.false(removed.includes(liveNs));
    t.false(removed.includes(keptNs));
    t.false(removed.includes(foreignNs));
    const now = listNetns();
    t.false(now.includes(staleNs));
    t.true(now.includes(liveNs));
    t.true(now.includes(keptNs));
    t.true(now.includes(foreignNs));
  } finally {
    for (const n of [staleNs, keptNs, foreignNs]) spawnSync('ip', ['netns', 'del', n]);
    await deleteNetns(liveNs);
  }
});

test.serial('cleanStale kills what still runs in a stale namespace (a killed test\'s daemons), never in a live one', async (t) => {
  const dead = spawnSync('true').pid!;
  const prefix = 'glbck';
  const staleNs = `${prefix}${dead}-t-stale`;
  const liveNs = `${prefix}${process.pid}-t-live`;
  spawnSync('ip', ['netns', 'add', staleNs]);
  await createNetns(liveNs);
  const inStale = spawn('ip', ['netns', 'exec', staleNs, 'sleep', '300'], { detached: true, stdio: 'ignore' });
  const inLive = spawn('ip', ['netns', 'exec', liveNs, 'sleep', '300'], { detached: true, stdio: 'ignore' });
  try {
    for (let i = 0; i < 50 && !((await netnsPids(staleNs)).length && (await netnsPids(liveNs)).length); i++) await sleep(100);
    t.true((await netnsPids(staleNs)).includes(inStale.pid!), 'a process runs in the stale namespace');
    const removed = await cleanStale(prefix);
    t.deepEqual(removed, [staleNs]);
    for (let i = 0; i < 50 && pidAlive(inStale.pid!); i++) await sleep(100);
    t.false(pidAlive(inStale.pid!), 'killed with its namespace');
    t.true(pidAlive(inLive.pid!), 'benign: the live namespace\'s process runs on');
  } finally {
    for (const c of [inStale, inLive]) c.kill('SIGKILL');
    spawnSync('ip', ['netns', 'del', staleNs]);
    await deleteNetns(liveNs);
  }
});

test.serial('a lab anchor with an owner ends within seconds of its owner\'s death; without one it lives on', async (t) => {
  const owner = spawn('sleep', ['1'], { stdio: 'ignore' });
  const watching = spawn(anchorArgv(owner.pid!)[0]!, anchorArgv(owner.pid!).slice(1), { stdio: 'ignore' });
  const forever = spawn(anchorArgv(null)[0]!, anchorArgv(null).slice(1), { stdio: 'ignore' });
  try {
    const ended = new Promise<void>((resolve) => watching.once('exit', () => resolve()));
    t.true(pidAlive(watching.pid!), 'alive while its owner runs');
    await new Promise<void>((resolve) => owner.once('exit', () => resolve()));
    const gone = await Promise.race([ended.then(() => true), sleep(10_000).then(() => false)]);
    t.true(gone, 'the anchor ended after its owner did');
    t.true(pidAlive(forever.pid!), 'benign: gitlb lab up\'s anchor (no owner) lives on');
  } finally {
    watching.kill('SIGKILL');
    forever.kill('SIGKILL');
  }
});
