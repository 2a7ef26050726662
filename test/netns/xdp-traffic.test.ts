// Real traffic through the XDP load balancer, one lab of network namespaces for all three DSR modes (IPv4 and
// IPv6):
// client, LB and two backends on one bridge; the client reaches the VIPs through the LB (its route), the
// backends answer the client directly. l2: VIP on the backends' lo; ipip: decapsulated by the backend TC
// program (src/bpf/progs/tc_backend.c); ipopt: backend TC program records the option and rewrites replies.
// Each request uses a fixed client port so the answering backend is predicted from the documented hash;
// a capture on the LB proves that no reply crosses it.
import test from 'ava';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { ADDR, ADDR6, bridgeLab, sh } from '../lib/bridge-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { flowHash } from '../../src/bpf/dataplane/flow-hash.js';
import { DEFAULT_GUE_PORT } from '../../src/render/model.js';

const lab = bridgeLab('t');
const NS = lab.ns;
const children = lab.children;
const PIN = { lb: `/sys/fs/bpf/${NS.lb}`, b1: `/sys/fs/bpf/${NS.b1}`, b2: `/sys/fs/bpf/${NS.b2}` };
const SEED = 0x5eed;
const VIP = { l2: '203.0.113.10', ipip: '203.0.113.11', ipopt: '203.0.113.12', l2v6: '2001:db8:f::10', ipipv6: '2001:db8:f::11', ipoptv6: '2001:db8:f::12',
  gue: '203.0.113.13', guev6: '2001:db8:f::13' };
type Mode = keyof typeof VIP;
const SERVICE_OF: Record<Mode, number> = { l2: 1, ipip: 2, ipopt: 3, l2v6: 4, ipipv6: 5, ipoptv6: 6, gue: 7, guev6: 8 };
const RING = [1, 2, 2, 1, 2, 1, 1];
const RING6 = RING.map((r) => r + 2);
const REAL_NAME: Record<number, string> = { 1: 'b1', 2: 'b2', 3: 'b1', 4: 'b2' };
const STATE = makeState({
  reals: { 1: ADDR.b1, 2: ADDR.b2, 3: ADDR6.b1, 4: ADDR6.b2 }, hashSeed: SEED, addresses: [ADDR.lb, ADDR6.lb], mtu: 1500,
  services: [
    { id: 1, vip: VIP.l2, forwarding: 'dsr-l2', ring: RING },
    { id: 2, vip: VIP.ipip, forwarding: 'dsr-ipip', ring: RING },
    { id: 3, vip: VIP.ipopt, forwarding: 'dsr-ipopt', ring: RING, ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] },
    { id: 4, vip: VIP.l2v6, forwarding: 'dsr-l2', ring: RING6 },
    { id: 5, vip: VIP.ipipv6, forwarding: 'dsr-ipip', ring: RING6 },
    { id: 6, vip: VIP.ipoptv6, forwarding: 'dsr-ipopt', ring: RING6, ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] },
    { id: 7, vip: VIP.gue, forwarding: 'dsr-gue', ring: RING },
    { id: 8, vip: VIP.guev6, forwarding: 'dsr-gue', ring: RING6 },
  ],
});

function runner(ns: string, args: string[], stdin?: string): string {
  try {
    // nsenter --net keeps the host's /sys/fs/bpf (ip netns exec remounts /sys), so the pins outlive the runner
    return execFileSync('nsenter', [`--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx',
      new URL('../lib/dp-runner.ts', import.meta.url).pathname, ...args], { input: stdin ?? '', timeout: 60_000, stdio: ['pipe', 'pipe', 'pipe'] }).toString();
  } catch (e) {
    throw new Error(`dp-runner ${args.join(' ')} in ${ns} failed: ${String((e as { stderr?: Buffer }).stderr ?? e).slice(0, 2000)}`);
  }
}

const teardown = () => lab.teardown(Object.values(PIN));

/** A tiny HTTP server answering with the backend's name, in `ns`, on `port`. */
function server(ns: string, name: string, port: number): Promise<void> {
  // GET answers the backend's name; POST answers name:bytes received (for the path-MTU test)
  const code = `require('http').createServer((q,s)=>{let n=0;q.on('data',(d)=>{n+=d.length});q.on('end',()=>{` +
    `s.setHeader('connection','close');s.end(q.method==='POST'?${JSON.stringify(name)}+':'+n:${JSON.stringify(name)})})})` +
    `.listen(${port},'::',()=>console.log('ready'))`;
  const c = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(c);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server ${name}:${port} did not start`)), 15_000);
    c.stdout!.on('data', () => { clearTimeout(timer); resolve(); });
    c.on('exit', (code) => reject(new Error(`server ${name}:${port} exited ${code}`)));
  });
}

test.before(async () => {
  teardown();
  lab.setup(); // namespaces, bridge, addresses, the client's routes via the LB (test/lib/bridge-lab.ts)
  // full checksums and no segmentation offload: veth would otherwise hand generic XDP 64 KB GSO packets
  sh(NS.client, ['ethtool', '-K', 'eth0', 'tx', 'off', 'gso', 'off', 'tso', 'off']);
  for (const b of [NS.b1, NS.b2]) {
    sh(b, ['ip', 'route', 'add', '192.0.2.0/24', 'dev', 'eth0']);
    sh(b, ['ip', '-6', 'route', 'add', '2001:db8:c::/64', 'dev', 'eth0']);
    for (const v of [VIP.l2v6, VIP.ipipv6, VIP.guev6]) sh(b, ['ip', 'addr', 'add', `${v}/128`, 'dev', 'lo', 'nodad']);
    sh(b, ['sysctl', '-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2', 'net.ipv4.conf.all.rp_filter=0',
      'net.ipv4.conf.eth0.rp_filter=0', 'net.ipv4.conf.lo.rp_filter=0']);
    for (const v of [VIP.l2, VIP.ipip, VIP.gue]) sh(b, ['ip', 'addr', 'add', `${v}/32`, 'dev', 'lo']);
  }
  sh(NS.lb, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
  // next hops must be resolved for bpf_fib_lookup (in production the health checks keep them fresh)
  for (const a of [ADDR.b1, ADDR.b2, ADDR6.b1, ADDR6.b2]) sh(NS.lb, ['ping', '-c', '1', '-W', '2', a]);
  await Promise.all([server(NS.b1, 'b1', 80), server(NS.b1, 'b1', 8080), server(NS.b2, 'b2', 80), server(NS.b2, 'b2', 8080)]);
  const json = JSON.stringify(stateToJson(STATE));
  // a backend decapsulates only tunnels from the lb node's addresses to its own (docs/backend.md)
  const backendJson = (own: string[]) => JSON.stringify({ ...stateToJson(STATE) as object, addresses: own, lbAddresses: [ADDR.lb, ADDR6.lb], guePort: DEFAULT_GUE_PORT });
  runner(NS.b1, ['backend', PIN.b1, 'eth0'], backendJson([ADDR.b1, ADDR6.b1]));
  runner(NS.b2, ['backend', PIN.b2, 'eth0'], backendJson([ADDR.b2, ADDR6.b2]));
  runner(NS.lb, ['lb', PIN.lb, 'eth0', 'generic'], json);
});

test.after.always(teardown);

function expectedBackend(vip: string, sport: number): string {
  const src = vip.includes(':') ? ADDR6.client : ADDR.client;
  return REAL_NAME[RING[flowHash({ src, dst: vip, sport, dport: 80, proto: 6 }, true, SEED) % RING.length]!]!;
}

const captureOnLb = () => {
  const c = spawn('ip', ['netns', 'exec', NS.lb, 'tcpdump', '-i', 'eth0', '-n', '-l', 'src net 203.0.113.0/24 or src net 2001:db8:f::/64'], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(c);
  let lines = 0;
  c.stdout!.on('data', (d: Buffer) => { lines += d.toString().split('\n').filter(Boolean).length; });
  const ready = new Promise<void>((resolve) => c.stderr!.on('data', (d: Buffer) => { if (d.toString().includes('listening')) resolve(); }));
  return { ready, stop: async () => { c.kill('SIGINT'); await new Promise((r) => c.once('exit', r)); return lines; } };
};

for (const mode of ['l2', 'ipip', 'ipopt', 'l2v6', 'ipipv6', 'ipoptv6', 'gue', 'guev6'] as const) {
  test.serial(`dsr-${mode}: a real TCP client gets answers through the VIP from the predicted backend, replies bypass the LB`, async (t) => {
    const before = JSON.parse(runner(NS.lb, ['lb-counters', PIN.lb]));
    const cap = captureOnLb();
    await Promise.race([cap.ready, new Promise((r) => setTimeout(r, 5000))]);
    const got: string[] = [];
    const want: string[] = [];
    // three client ports the hash sends to b1 and three it sends to b2
    const base = { l2: 41000, ipip: 42000, ipopt: 43000, l2v6: 44000, ipipv6: 45000, ipoptv6: 47000, gue: 48000, guev6: 49000 }[mode];
    const ports: number[] = [];
    for (const name of ['b1', 'b2']) {
      for (let p = base, n = 0; n < 3; p++) if (expectedBackend(VIP[mode], p) === name && !ports.includes(p)) { ports.push(p); n++; }
    }
    for (const sport of ports) {
      want.push(expectedBackend(VIP[mode], sport));
      const url = VIP[mode].includes(':') ? `http://[${VIP[mode]}]/` : `http://${VIP[mode]}/`;
      got.push(sh(NS.client, ['curl', '-g', '-s', '--max-time', '5', '--local-port', String(sport), url]).trim());
    }
    // Positive control: two echo requests from a VIP address (b1 holds it on lo) to the LB's own address do cross
    // the LB's port, so a capture that could not see VIP-sourced frames would fail here instead of passing.
    spawnSync('ip', ['netns', 'exec', NS.b1, 'ping', '-c', '2', '-i', '0.2', '-W', '1', '-I', VIP.l2, ADDR.lb], { stdio: 'ignore' });
    const captured = await cap.stop();
    t.true(captured >= 2, `the capture saw the control's frames (${captured})`);
    const replies = captured - 2;
    const after = JSON.parse(runner(NS.lb, ['lb-counters', PIN.lb]));
    t.deepEqual(got, want);
    t.is(new Set(got).size, 2, 'both backends answered');
    t.is(replies, 0, 'no packet from a VIP crossed the LB');
    const svc = SERVICE_OF[mode];
    const newFlows = after[`service:${svc}`].newFlows - (before[`service:${svc}`]?.newFlows ?? 0);
    t.is(newFlows, 6, 'one new flow per connection in the LB service stats');
    t.true(after.tx - before.tx >= 6 * 3, `LB forwarded the client's packets (tx +${after.tx - before.tx})`);
    t.log(`dsr-${mode}: answers ${got.join(',')}; LB tx +${after.tx - before.tx}, ct_hit +${after.ct_hit - before.ct_hit}`);
  });
}

test.serial('path MTU: a client sending full-size segments to an ipip VIP learns MTU-20 from our ICMP and completes', async (t) => {
  const before = JSON.parse(runner(NS.lb, ['lb-counters', PIN.lb]));
  const body = Buffer.alloc(20_000, 0x61);
  const sport = 46000;
  const out = execFileSync('ip', ['netns', 'exec', NS.client, 'curl', '-s', '--max-time', '15', '--local-port', String(sport),
    '--data-binary', '@-', `http://${VIP.ipip}/`], { input: body, timeout: 30_000 }).toString().trim();
  const after = JSON.parse(runner(NS.lb, ['lb-counters', PIN.lb]));
  t.is(out, `${expectedBackend(VIP.ipip, sport)}:${body.length}`, 'the whole body arrived at the backend');
  t.true(after.icmp_sent > before.icmp_sent, 'the LB answered with ICMP fragmentation-needed');
  const route = sh(NS.client, ['ip', 'route', 'get', VIP.ipip]);
  t.regex(route, /mtu 1480/, `client's route cache: ${route}`);
  t.log(`icmp_sent +${after.icmp_sent - before.icmp_sent}; client route: ${route.trim().split('\n').join(' ')}`);
});

test.serial('ping a VIP: the real ping gets its echo replies from the VIP through the LB, IPv4 and IPv6', async (t) => {
  const before = JSON.parse(runner(NS.lb, ['lb-counters', PIN.lb]));
  for (const vip of [VIP.l2, VIP.ipopt, VIP.l2v6]) {
    // -c 3 -W 2: three requests, each answered or the command fails (exit 1); the summary line must say 0% loss
    const out = sh(NS.client, ['ping', '-n', '-c', '3', '-i', '0.2', '-W', '2', vip]);
    t.regex(out, /3 packets transmitted, 3 received/, out);
    t.regex(out, new RegExp(`from ${vip.replace(/[.:]/g, (c) => `\\${c}`)}`), 'answered by the VIP itself');
  }
  const after = JSON.parse(runner(NS.lb, ['lb-counters', PIN.lb]));
  t.is(after.icmp_echo_reply - (before.icmp_echo_reply ?? 0), 9, 'the LB answered all nine (icmp_echo_reply)');
});
