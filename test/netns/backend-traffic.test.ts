// Real traffic through the backend TC programs, in network namespaces:
//
//   client (c0) ---- (r0) router (r1) ---- (b0) backend
//   198.51.100.2       .1      203.0.113.1     203.0.113.2       VIPs 192.0.2.10 (ipip), 192.0.2.20:80 (ipopt -> 8080)
//   2001:db8:2::2      ::1     2001:db8:1::1   2001:db8:1::2          2001:db8:f::10 (ipip), 2001:db8:f::20:80 (ipopt)
//
// The backend is set up the way the daemon does it (withBackendVips(openBackendDataPlane()).apply, run inside the
// backend namespace). There is no LB: a test-only TC egress program on the client's veth (test/bpf/
// tc_lab_client.c) does the LB's part, IP-in-IP encapsulation or the ipopt rewrite, so requests reach the backend
// exactly as an LB would send them and replies go straight back (DSR). Senders have checksum offload off, so
// every receiver verifies the checksums the programs produced.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BpfMap } from '../../src/bpf/libbpf.js';
import type { StatName } from '../../src/bpf/backend/codec.js';
import { readBackendStats } from '../../src/bpf/dataplane/pinned-stats.js';
import { packageRoot } from '../../src/bpf/paths.js';
import { ensurePinDir } from '../../src/bpf/bpffs.js';
import type { DesiredState, DesiredVip } from '../../src/render/state.js';
import {
  addRoute,
  cleanupRun,
  createNetns,
  enableForwarding,
  nsExec,
  nsName,
  nsSpawn,
  run,
  runPrefix,
  setSysctl,
  vethPair,
  waitForPort,
} from '../../src/lab/netns.js';
import type { ClientArgs, LabTarget } from '../lib/backend-lab-node.js';

const ROOT = packageRoot();
const NS = { client: nsName('bt-client'), router: nsName('bt-router'), backend: nsName('bt-backend') };
const A4 = { client: '198.51.100.2', real: '203.0.113.2', ipipVip: '192.0.2.10', optVip: '192.0.2.20' };
const A6 = { client: '2001:db8:2::2', real: '2001:db8:1::2', ipipVip: '2001:db8:f::10', optVip: '2001:db8:f::20' };
const VIP_PORT = 80;
const TARGET_PORT = 8080;

const work = mkdtempSync(join(tmpdir(), `${runPrefix()}backend-`));
const pinBase = `/sys/fs/bpf/gitlb-test-${runPrefix()}backend-traffic`;
const pins = { backend: join(pinBase, 'backend'), client: join(pinBase, 'client') };

function vip(v: string, family: 4 | 6, protocol: 'TCP' | 'UDP', forwarding: DesiredVip['forwarding']): DesiredVip {
  const port = VIP_PORT;
  return { vip: v, family, port, protocol, targetPort: forwarding === 'dsr-ipopt' ? TARGET_PORT : port, serviceId: 1, forwarding, hashSourcePort: false };
}

const desired: DesiredState = {
  node: 'be1',
  role: 'backend',
  interface: 'b0',
  mtu: 1500,
  hashSeed: 0,
  conntrackMaxEntries: 1024,
  reals: [],
  services: [],
  vips: [
    vip(A4.ipipVip, 4, 'TCP', 'dsr-ipip'),
    vip(A4.optVip, 4, 'TCP', 'dsr-ipopt'),
    vip(A4.optVip, 4, 'UDP', 'dsr-ipopt'),
    vip(A6.ipipVip, 6, 'TCP', 'dsr-ipip'),
    vip(A6.optVip, 6, 'TCP', 'dsr-ipopt'),
    vip(A6.optVip, 6, 'UDP', 'dsr-ipopt'),
  ],
  localVips: [A4.ipipVip, A6.ipipVip],
  // the client namespace plays the LB here: tunnels are accepted from it, to this node's own addresses
  addresses: [A4.real, A6.real],
  lbAddresses: [A4.client, A6.client],
};

function target(family: 4 | 6, protocol: 'TCP' | 'UDP', mode: 'ipip' | 'ipopt'): LabTarget {
  const a = family === 4 ? A4 : A6;
  return { vip: mode === 'ipip' ? a.ipipVip : a.optVip, family, port: VIP_PORT, protocol, real: a.real, outerSrc: a.client, targetPort: mode === 'ipip' ? VIP_PORT : TARGET_PORT, mode };
}

/** Runs test/lib/backend-lab-node.ts inside `ns`. */
async function labNode(ns: string, role: 'backend' | 'client', args: unknown): Promise<any> {
  const r = await nsExec(ns, [process.execPath, '--import', 'tsx', join(ROOT, 'test/lib/backend-lab-node.ts'), role, JSON.stringify(args)], {
    cwd: ROOT,
    timeoutMs: 60_000,
  });
  if (r.code !== 0) throw new Error(`backend-lab-node ${role} in ${ns} failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
}

// Server on the backend: TCP on both ports (dual stack), UDP on 8080 for IPv4 and IPv6. Answers say where they landed.
const SERVER = `
const net = require('net'), dgram = require('dgram');
for (const p of [${VIP_PORT}, ${TARGET_PORT}])
  net.createServer((s) => s.once('data', (d) => s.end('hello ' + s.localAddress + ' ' + s.localPort + ' got ' + d))).listen(p, '::');
for (const type of ['udp4', 'udp6']) {
  const u = dgram.createSocket({ type, ipv6Only: type === 'udp6' });
  u.on('message', (m, r) => u.send('pong ' + m, r.port, r.address));
  u.bind(${TARGET_PORT});
}
setTimeout(() => process.exit(0), 300000);
`;

const TCP_CLIENT = `
const net = require('net'); const [h, p] = process.argv.slice(1);
const s = net.connect({ host: h, port: +p }); let d = '';
s.setTimeout(4000, () => { console.error('timeout'); process.exit(2); });
s.on('connect', () => s.write('hi')); s.on('data', (x) => (d += x));
s.on('end', () => { console.log(JSON.stringify({ data: d, remote: s.remoteAddress + ' ' + s.remotePort })); process.exit(0); });
s.on('error', (e) => { console.error(e.message); process.exit(3); });
`;

const UDP_CLIENT = `
const dgram = require('dgram'); const [h, p] = process.argv.slice(1);
const u = dgram.createSocket(h.includes(':') ? 'udp6' : 'udp4');
u.on('message', (m, r) => { console.log(JSON.stringify({ data: String(m), from: r.address + ' ' + r.port })); process.exit(0); });
let tries = 0; const send = () => { if (tries++ < 3) { u.send('ping', +p, h); setTimeout(send, 1000); } else { console.error('timeout'); process.exit(2); } };
send();
`;

async function clientRun(code: string, host: string, port: number): Promise<any> {
  const r = await nsExec(NS.client, [process.execPath, '-e', code, host, String(port)], { timeoutMs: 10_000 });
  if (r.code !== 0) throw new Error(`client to ${host}:${port} failed (${r.code}): ${r.stderr.trim()}`);
  return JSON.parse(r.stdout.trim());
}

/** One counter of the pinned backend data plane, read as /metrics and `gitlb top` read it. */
function stat(name: StatName): number {
  const s = readBackendStats(pins.backend);
  if (!s) throw new Error(`no backend data plane pinned at ${pins.backend}`);
  return s.counters[name];
}

let backendSetup: any;

test.before(async () => {
  execFileSync('clang', ['-O2', '-g', '-Wall', '-Werror', '-target', 'bpf', '-I/usr/include/x86_64-linux-gnu', `-I${join(ROOT, 'src/bpf/include')}`,
    '-c', join(ROOT, 'test/bpf/tc_lab_client.c'), '-o', join(work, 'tc_lab_client.o')]);
  ensurePinDir(pinBase);
  for (const ns of Object.values(NS)) await createNetns(ns);
  await vethPair({ ns: NS.client, name: 'c0', addrs: [`${A4.client}/24`, `${A6.client}/64`] },
    { ns: NS.router, name: 'r0', addrs: ['198.51.100.1/24', '2001:db8:2::1/64'] });
  await vethPair({ ns: NS.router, name: 'r1', addrs: ['203.0.113.1/24', '2001:db8:1::1/64'] },
    { ns: NS.backend, name: 'b0', addrs: [`${A4.real}/24`, `${A6.real}/64`] });
  await enableForwarding(NS.router);
  for (const k of ['all', 'default', 'r0', 'r1']) await setSysctl(NS.router, `net.ipv4.conf.${k}.rp_filter`, '0');
  await addRoute(NS.client, 'default', ['via', '198.51.100.1']);
  await addRoute(NS.client, '::/0', ['via', '2001:db8:2::1']);
  await addRoute(NS.backend, 'default', ['via', '203.0.113.1']);
  await addRoute(NS.backend, '::/0', ['via', '2001:db8:1::1']);
  // Software checksums on the senders, so receivers check what the programs wrote (no CHECKSUM_PARTIAL shortcut);
  // no segmentation offload, so the emulator sees real-sized packets.
  await run(['ip', 'netns', 'exec', NS.client, 'ethtool', '-K', 'c0', 'tx', 'off', 'tso', 'off', 'gso', 'off']);
  await run(['ip', 'netns', 'exec', NS.backend, 'ethtool', '-K', 'b0', 'tx', 'off', 'tso', 'off', 'gso', 'off']);

  nsSpawn(NS.backend, [process.execPath, '-e', SERVER]);
  await waitForPort(NS.backend, TARGET_PORT);
  await waitForPort(NS.backend, VIP_PORT);

  backendSetup = await labNode(NS.backend, 'backend', { pinRoot: pins.backend, stateFile: join(work, 'backend-vips.json'), desired });
  const clientArgs: ClientArgs = {
    objectPath: join(work, 'tc_lab_client.o'),
    pinRoot: pins.client,
    interface: 'c0',
    targets: [4, 6].flatMap((f) => [target(f as 4 | 6, 'TCP', 'ipip'), target(f as 4 | 6, 'TCP', 'ipopt'), target(f as 4 | 6, 'UDP', 'ipopt')]),
  };
  await labNode(NS.client, 'client', clientArgs);
});

test.after.always(async () => {
  await cleanupRun(); // kills the server, deletes the namespaces (their tcx links go with the interfaces)
  rmSync(pinBase, { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
});

test.serial('the backend set-up installed both programs, wrote the VIP map and made the ipip VIPs local', async (t) => {
  t.true(backendSetup.attached);
  // Every DSR VIP gets an address entry and a listener per port (any encap, docs/backend.md): 2 ipip VIPs x (1 + 1),
  // 2 ipopt VIPs x (1 + 2), and 4 tunnel endpoints.
  t.is(backendSetup.report.mapWrites, 14);
  t.deepEqual(backendSetup.owned.addresses, [A4.ipipVip, A6.ipipVip], 'ownership recorded');
  t.true(backendSetup.deviceAddrs.includes(A4.ipipVip) && backendSetup.deviceAddrs.includes(A6.ipipVip));
  t.false(backendSetup.deviceAddrs.includes(A4.optVip), 'ipopt VIPs stay off the host');
  const arpIgnore = await nsExec(NS.backend, ['sysctl', '-n', 'net.ipv4.conf.b0.arp_ignore']);
  t.is(arpIgnore.stdout.trim(), '1');
  // Applying the same state again (a restarted daemon) writes nothing and re-adopts the pinned links.
  const again = await labNode(NS.backend, 'backend', { pinRoot: pins.backend, stateFile: join(work, 'backend-vips.json'), desired });
  t.is(again.report.mapWrites, 0);
  t.is(again.report.mapDeletes, 0);
  t.deepEqual(again.deviceAddrs, backendSetup.deviceAddrs);
  t.deepEqual(again.tc.ingress.map((p: { name: string }) => p.name), ['backend_ingress'], 'one ingress program, not two');
  t.deepEqual(again.tc.egress.map((p: { name: string }) => p.name), ['backend_egress']);
});

for (const fam of [4, 6] as const) {
  const a = fam === 4 ? A4 : A6;

  test.serial(`IPv${fam}-in-IPv${fam}: TCP to the VIP is decapsulated on the backend and answered from the VIP`, async (t) => {
    const before = stat(fam === 4 ? 'decap_ipip4' : 'decap_ipip6');
    const r = await clientRun(TCP_CLIENT, a.ipipVip, VIP_PORT);
    t.is(r.remote, `${a.ipipVip} ${VIP_PORT}`);
    // The server saw the connection on the VIP itself (delivered locally after decapsulation).
    t.regex(r.data, new RegExp(`^hello (::ffff:)?${a.ipipVip.replace(/\./g, '\\.')} ${VIP_PORT} got hi$`));
    t.true(stat(fam === 4 ? 'decap_ipip4' : 'decap_ipip6') - before >= 3, 'handshake, data and FIN were decapsulated');
  });

  test.serial(`IPv${fam} ipopt: TCP served on real:${TARGET_PORT}, the client talks to VIP:${VIP_PORT} only`, async (t) => {
    const before = { opt: stat(fam === 4 ? 'ipopt4' : 'ipopt6'), rw: stat(fam === 4 ? 'reply4_rewrite' : 'reply6_rewrite') };
    const r = await clientRun(TCP_CLIENT, a.optVip, VIP_PORT);
    t.is(r.remote, `${a.optVip} ${VIP_PORT}`);
    // The backend's socket is on its own address and the target port; the client never saw either.
    t.regex(r.data, new RegExp(`^hello (::ffff:)?${a.real.replace(/\./g, '\\.')} ${TARGET_PORT} got hi$`));
    t.true(stat(fam === 4 ? 'ipopt4' : 'ipopt6') - before.opt >= 1);
    t.true(stat(fam === 4 ? 'reply4_rewrite' : 'reply6_rewrite') - before.rw >= 2, 'SYN-ACK and data rewritten');
  });

  test.serial(`IPv${fam} ipopt: a UDP answer arrives from VIP:${VIP_PORT}`, async (t) => {
    const r = await clientRun(UDP_CLIENT, a.optVip, VIP_PORT);
    t.is(r.data, 'pong ping');
    t.is(r.from, `${a.optVip} ${VIP_PORT}`);
    const conns = BpfMap.open(join(pins.backend, 'be_conns'));
    try {
      t.true(conns.keys().length >= 1);
    } finally {
      conns.close();
    }
  });
}

test.serial('no packet was dropped by a failed rewrite or adjust', (t) => {
  t.is(stat('rewrite_fail'), 0);
  t.is(stat('adjust_fail'), 0);
  t.is(stat('ipopt_not_vip'), 0);
});

test.serial('a service leaving: its entries are deleted, its VIP released, and tunnelled traffic to it is no longer taken in', async (t) => {
  const without = { ...desired, vips: desired.vips.filter((v) => v.vip !== A6.ipipVip), localVips: [A4.ipipVip] };
  const r = await labNode(NS.backend, 'backend', { pinRoot: pins.backend, stateFile: join(work, 'backend-vips.json'), desired: without });
  t.is(r.report.mapWrites, 0);
  t.is(r.report.mapDeletes, 2); // its address entry and its TCP listener
  t.false(r.deviceAddrs.includes(A6.ipipVip), 'VIP released');
  t.deepEqual(r.owned.addresses, [A4.ipipVip]);
  t.is(r.counters.vip_entries, 8);
  t.false(r.live.vips.some((v: DesiredVip) => v.vip === A6.ipipVip));
  const before = stat('ipip_not_vip');
  await t.throwsAsync(clientRun(TCP_CLIENT, A6.ipipVip, VIP_PORT));
  t.true(stat('ipip_not_vip') > before, 'the tunnelled SYN was seen and passed untouched');
  // And back: the VIP works again.
  const back = await labNode(NS.backend, 'backend', { pinRoot: pins.backend, stateFile: join(work, 'backend-vips.json'), desired });
  t.is(back.report.mapWrites, 2);
  const ok = await clientRun(TCP_CLIENT, A6.ipipVip, VIP_PORT);
  t.is(ok.remote, `${A6.ipipVip} ${VIP_PORT}`);
});

test.serial('a targetPort nothing listens on (8080 -> 8099), applied by the backend while the lb still sends 8080: every client is answered; then the revert', async (t) => {
  // The lb emulator on the client keeps rewriting to 8080, as lb nodes do that have not applied the revision (or
  // refused it): before the backend kept the previous port, its options were refused and the replies left from
  // real:8080, so no connection completed until the revert reached the backend (docs/health.md, Probation).
  const BAD = 8099;
  const args = (d: DesiredState) => ({ pinRoot: pins.backend, stateFile: join(work, 'backend-vips.json'), desired: d });
  const bad: DesiredState = { ...desired, vips: desired.vips.map((v) => (v.forwarding === 'dsr-ipopt' ? { ...v, targetPort: BAD } : v)) };
  const listeners = (r: any) => (r.entries as Array<{ port: number; flags: number; targetPort: number; previousTargetPort?: number }>)
    .filter((e) => e.port === VIP_PORT && (e.flags & 0x02) && e.targetPort !== VIP_PORT);
  const notVip = stat('ipopt_not_vip');
  const r = await labNode(NS.backend, 'backend', args(bad));
  t.is(r.report.mapWrites, 4, 'the four ipopt listeners moved');
  t.deepEqual(listeners(r).map((e) => [e.targetPort, e.previousTargetPort]), Array(4).fill([BAD, TARGET_PORT]));
  const prev = stat('ipopt_prev_target');
  for (const a of [A4, A6]) {
    const tcpAnswer = await clientRun(TCP_CLIENT, a.optVip, VIP_PORT);
    t.is(tcpAnswer.remote, `${a.optVip} ${VIP_PORT}`);
    t.regex(tcpAnswer.data, new RegExp(`^hello (::ffff:)?${a.real.replace(/\./g, '\\.')} ${TARGET_PORT} got hi$`), 'served by the socket on the old port');
    const udpAnswer = await clientRun(UDP_CLIENT, a.optVip, VIP_PORT);
    t.is(udpAnswer.from, `${a.optVip} ${VIP_PORT}`);
  }
  t.true(stat('ipopt_prev_target') - prev >= 4, 'the options arrived at the previous port and were trusted');
  t.is(stat('ipopt_not_vip'), notVip, 'none refused');

  // The revert reaches the backend: 8080 is current again, 8099 the previous one; the lb's 8080 goes on working.
  const back = await labNode(NS.backend, 'backend', args(desired));
  t.is(back.report.mapWrites, 4);
  t.deepEqual(listeners(back).map((e) => [e.targetPort, e.previousTargetPort]), Array(4).fill([TARGET_PORT, BAD]));
  const prevAfter = stat('ipopt_prev_target');
  for (const a of [A4, A6]) t.is((await clientRun(TCP_CLIENT, a.optVip, VIP_PORT)).remote, `${a.optVip} ${VIP_PORT}`);
  t.is(stat('ipopt_prev_target'), prevAfter, 'at the current port again');
  t.is(stat('ipopt_not_vip'), notVip);
});
