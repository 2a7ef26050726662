// Real traffic through XDP SNAT and hybrid: client, LB and two backends on one bridge, each in a namespace
// of this run (glb<pid>-s*), the LB program attached in generic mode to the LB namespace's veth only.
// The client reaches the VIPs through the LB. SNAT: the backends see the LB's snatAddress as the peer and
// answer it; the reply crosses the LB, whose XDP program sends it to the client from VIP:port. Hybrid: TCP by
// dsr-l2 (the answer bypasses the LB), UDP by SNAT (the answer crosses it), one VIP. Every request uses a
// fixed client port, so the answering backend is predicted from the documented flow hash.
import test from 'ava';
import { execFileSync, spawn } from 'node:child_process';
import { ADDR, ADDR6, bridgeLab, sh } from '../lib/bridge-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { flowHash } from '../../src/bpf/dataplane/flow-hash.js';
import type { DesiredState } from '../../src/render/state.js';

const lab = bridgeLab('s');
const NS = lab.ns;
const children = lab.children;
const PIN = `/sys/fs/bpf/${NS.lb}`;
const SEED = 0x5a7;
const VIP = { snat: '203.0.113.20', hybrid: '203.0.113.21', snat6: '2001:db8:f::20' };
const RING = [1, 2, 2, 1, 2, 1, 1];
const REAL_NAME: Record<number, string> = { 1: 'b1', 2: 'b2', 3: 'b1', 4: 'b2' };
// kept apart from the kernel's ephemeral ports: the snatAddress is the LB's own address
const SNAT_PORTS = { min: 20000, max: 29999 };

function lbState(snatAddress: string): DesiredState {
  const s = makeState({
    reals: { 1: ADDR.b1, 2: ADDR.b2, 3: ADDR6.b1, 4: ADDR6.b2 }, hashSeed: SEED, addresses: [ADDR.lb, ADDR6.lb],
    services: [
      { id: 1, vip: VIP.snat, forwarding: 'snat', ring: RING,
        ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP', targetPort: 5353 }] },
      { id: 2, vip: VIP.hybrid, forwarding: 'dsr-l2', ring: RING, ports: [{ port: 80, protocol: 'TCP' }, { port: 5353, protocol: 'UDP' }] },
      { id: 3, vip: VIP.snat6, forwarding: 'snat', ring: RING.map((r) => r + 2),
        ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP', targetPort: 5353 }] },
    ],
  });
  // hybrid as render resolves it: TCP by dsr (encap l2), UDP by snat
  s.vips = s.vips.map((v) => (v.vip === VIP.hybrid && v.protocol === 'UDP' ? { ...v, forwarding: 'snat' } : v));
  return { ...s, snatAddress, snatPorts: SNAT_PORTS };
}

function runner(args: string[], stdin?: string): any {
  try {
    return JSON.parse(execFileSync('nsenter', [`--net=/run/netns/${NS.lb}`, process.execPath, '--import', 'tsx',
      new URL('../lib/dp-runner.ts', import.meta.url).pathname, ...args], { input: stdin ?? '', timeout: 60_000, stdio: ['pipe', 'pipe', 'pipe'] }).toString());
  } catch (e) {
    throw new Error(`dp-runner ${args.join(' ')} failed: ${String((e as { stderr?: Buffer }).stderr ?? e).slice(0, 2000)}`);
  }
}
const counters = () => runner(['lb-counters', PIN]);
const applyLb = (s: DesiredState) => runner(['lb', PIN, 'eth0', 'generic'], JSON.stringify(stateToJson(s)));

const teardown = () => lab.teardown([PIN]);

/** HTTP on 80 and 8080 and UDP echo on 5353, each answering "<backend>|<peer address it saw>". */
function servers(ns: string, name: string): Promise<void> {
  const code = `const n=${JSON.stringify(name)};let up=0;const ok=()=>{if(++up===3)console.log('ready')};` +
    `const h=(q,s)=>{s.setHeader('connection','close');s.end(n+'|'+q.socket.remoteAddress.replace(/^::ffff:/,''))};` +
    `require('http').createServer(h).listen(80,'::',ok);require('http').createServer(h).listen(8080,'::',ok);` +
    `const u=require('dgram').createSocket({type:'udp6'});u.on('message',(m,r)=>u.send(n+'|'+r.address.replace(/^::ffff:/,''),r.port,r.address));` +
    `u.bind(5353,'::',ok);`;
  const c = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(c);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`servers in ${name} did not start`)), 15_000);
    c.stdout!.on('data', () => { clearTimeout(timer); resolve(); });
    c.on('exit', (code) => reject(new Error(`servers in ${name} exited ${code}`)));
  });
}

/** One UDP request from a fixed port on a socket connected to VIP:port; prints "<answer>@<source address>:<port>" or "timeout". */
function udpAsk(vip: string, port: number, sport: number): string {
  const code = `const s=require('dgram').createSocket(${JSON.stringify(vip.includes(':') ? 'udp6' : 'udp4')});` +
    `const t=setTimeout(()=>{console.log('timeout');process.exit(0)},3000);` +
    `s.on('message',(m,r)=>{clearTimeout(t);console.log(m.toString()+'@'+r.address+':'+r.port);process.exit(0)});` +
    `s.bind(${sport},()=>s.connect(${port},${JSON.stringify(vip)},()=>s.send('hello')));`;
  return sh(NS.client, [process.execPath, '-e', code]).trim();
}

function tcpAsk(vip: string, sport: number): string {
  const url = vip.includes(':') ? `http://[${vip}]/` : `http://${vip}/`;
  return sh(NS.client, ['curl', '-g', '-s', '--max-time', '5', '--local-port', String(sport), url]).trim();
}

function expected(vip: string, sport: number, dport: number, proto: number, hashPort = true): string {
  const src = vip.includes(':') ? ADDR6.client : ADDR.client;
  return REAL_NAME[RING[flowHash({ src, dst: vip, sport, dport, proto }, hashPort, SEED) % RING.length]! + (vip.includes(':') ? 2 : 0)]!;
}

/** Client ports the hash sends to b1 and to b2 (n of each). */
function portsForBoth(vip: string, dport: number, proto: number, base: number, n: number): number[] {
  const out: number[] = [];
  for (const name of ['b1', 'b2']) for (let p = base, k = 0; k < n; p++) if (expected(vip, p, dport, proto) === name && !out.includes(p)) { out.push(p); k++; }
  return out;
}

/** Counts packets matching `filter` that the LB sends while `fn` runs. Captured on the bridge port of the LB
 * (packets the bridge receives from it): tcpdump inside the LB does not see frames XDP consumes or transmits. */
async function capture<T>(filter: string, fn: () => T): Promise<{ result: T; packets: number }> {
  const c = spawn('ip', ['netns', 'exec', NS.br, 'tcpdump', '-i', 'plb', '-n', '-l', '-Q', 'in', filter], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(c);
  let lines = 0;
  c.stdout!.on('data', (d: Buffer) => { lines += d.toString().split('\n').filter(Boolean).length; });
  await Promise.race([new Promise<void>((resolve) => c.stderr!.on('data', (d: Buffer) => { if (d.toString().includes('listening')) resolve(); })),
    new Promise((r) => setTimeout(r, 5000))]);
  const result = fn();
  await new Promise((r) => setTimeout(r, 300));
  c.kill('SIGINT');
  await new Promise((r) => c.once('exit', r));
  return { result, packets: lines };
}

test.before(async () => {
  teardown();
  lab.setup(); // namespaces, bridge, addresses, the client's routes via the LB (test/lib/bridge-lab.ts)
  // full checksums, no segmentation offload: the LB rewrites checksums incrementally, which needs complete ones
  for (const ns of [NS.client, NS.b1, NS.b2]) sh(ns, ['ethtool', '-K', 'eth0', 'tx', 'off', 'gso', 'off', 'tso', 'off']);
  for (const b of [NS.b1, NS.b2]) {
    // hybrid's TCP side is dsr-l2: the backends own the VIP on lo and answer the client directly
    sh(b, ['ip', 'route', 'add', '192.0.2.0/24', 'dev', 'eth0']);
    sh(b, ['sysctl', '-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2']);
    sh(b, ['ip', 'addr', 'add', `${VIP.hybrid}/32`, 'dev', 'lo']);
  }
  sh(NS.lb, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
  // next hops resolved for bpf_fib_lookup: the backends and the client
  for (const a of [ADDR.b1, ADDR.b2, ADDR6.b1, ADDR6.b2, ADDR.client, ADDR6.client]) sh(NS.lb, ['ping', '-c', '1', '-W', '2', a]);
  await Promise.all([servers(NS.b1, 'b1'), servers(NS.b2, 'b2')]);
  applyLb(lbState(ADDR.lb));
});

test.after.always(teardown);

test.serial('snat TCP: answers through VIP:80 from the predicted backend, which saw the snatAddress; replies cross the LB', async (t) => {
  const before = counters();
  const ports = portsForBoth(VIP.snat, 80, 6, 30100, 2);
  const { result, packets } = await capture(`src host ${VIP.snat} and tcp src port 80`, () => ports.map((p) => tcpAsk(VIP.snat, p)));
  const after = counters();
  t.deepEqual(result, ports.map((p) => `${expected(VIP.snat, p, 80, 6)}|${ADDR.lb}`));
  t.true(packets > 0, 'replies from the VIP left the LB');
  t.is(after.snat_new - before.snat_new, ports.length, 'one translation per connection');
  t.true(after.snat_reply - before.snat_reply >= ports.length * 3, `replies translated (+${after.snat_reply - before.snat_reply})`);
  t.log(`answers ${result.join(', ')}; replies leaving the LB from the VIP: ${packets}`);
});

test.serial('snat UDP: the answer comes from VIP:53 (connected socket) and the backend saw the snatAddress', async (t) => {
  const before = counters();
  const ports = portsForBoth(VIP.snat, 53, 17, 30200, 2);
  const { result, packets } = await capture(`src host ${VIP.snat} and udp src port 53`, () => ports.map((p) => udpAsk(VIP.snat, 53, p)));
  const after = counters();
  t.deepEqual(result, ports.map((p) => `${expected(VIP.snat, p, 53, 17)}|${ADDR.lb}@${VIP.snat}:53`));
  t.is(packets, ports.length, 'each answer crossed the LB from the VIP');
  t.is(after.snat_new - before.snat_new, ports.length);
});

test.serial('snat: a UDP datagram to a closed port comes back as ICMP port unreachable the client\'s socket sees', async (t) => {
  // the backend answers "port unreachable" about the translated datagram; the LB translates the error back
  // (a state whose UDP targetPort has no listener)
  const s = lbState(ADDR.lb);
  s.vips = s.vips.map((v) => (v.vip === VIP.snat && v.protocol === 'UDP' ? { ...v, targetPort: 5999 } : v));
  applyLb(s);
  try {
    const before = counters();
    const py = 'import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(("",30300))\n' +
      `s.connect(("${VIP.snat}",53))\ns.settimeout(3)\ns.send(b"x")\n` +
      'try:\n  s.recv(100); print("answer")\nexcept ConnectionRefusedError: print("refused")\nexcept socket.timeout: print("timeout")\n';
    const out = sh(NS.client, ['python3', '-c', py]).trim();
    const after = counters();
    t.is(out, 'refused', 'the client socket got the port-unreachable error');
    t.true(after.snat_icmp > before.snat_icmp, 'the LB translated the ICMP error');
  } finally {
    applyLb(lbState(ADDR.lb));
  }
});

test.serial('hybrid: TCP by DSR (answers bypass the LB) and UDP by SNAT (answers cross it) on one VIP', async (t) => {
  const before = counters();
  const tcpPorts = portsForBoth(VIP.hybrid, 80, 6, 30400, 2);
  const tcpRun = await capture(`src host ${VIP.hybrid} and tcp`, () => tcpPorts.map((p) => tcpAsk(VIP.hybrid, p)));
  // dsr: the backend sees the client itself
  t.deepEqual(tcpRun.result, tcpPorts.map((p) => `${expected(VIP.hybrid, p, 80, 6)}|${ADDR.client}`));
  t.is(tcpRun.packets, 0, 'no TCP answer from the VIP crossed the LB');
  const udpPorts = portsForBoth(VIP.hybrid, 5353, 17, 30500, 2);
  const udpRun = await capture(`src host ${VIP.hybrid} and udp`, () => udpPorts.map((p) => udpAsk(VIP.hybrid, 5353, p)));
  t.deepEqual(udpRun.result, udpPorts.map((p) => `${expected(VIP.hybrid, p, 5353, 17)}|${ADDR.lb}@${VIP.hybrid}:5353`));
  t.is(udpRun.packets, udpPorts.length, 'each UDP answer crossed the LB from the VIP');
  const after = counters();
  t.is(after.snat_new - before.snat_new, udpPorts.length, 'only the UDP flows were translated');
  t.log(`TCP ${tcpRun.result.join(', ')} (LB saw ${tcpRun.packets} VIP packets); UDP ${udpRun.result.join(', ')} (LB sent ${udpRun.packets})`);
});

test.serial('snat IPv6: TCP and UDP through the VIP with an IPv6 snatAddress', async (t) => {
  applyLb(lbState(ADDR6.lb));
  // neighbour entries the LB's bpf_fib_lookup needs, refreshed (earlier tests may have let them age)
  for (const a of [ADDR6.b1, ADDR6.b2, ADDR6.client]) sh(NS.lb, ['ping', '-6', '-c', '1', '-W', '2', a]);
  const before = counters();
  try {
    const tcpPorts = portsForBoth(VIP.snat6, 80, 6, 30600, 1);
    const tcpRun = await capture(`src host ${VIP.snat6} and tcp`, () => tcpPorts.map((p) => {
      try {
        return tcpAsk(VIP.snat6, p);
      } catch (e) {
        const c = counters();
        const moved = Object.fromEntries(Object.entries(c).filter(([k, v]) => typeof v === 'number' && v !== before[k]).map(([k, v]) => [k, (v as number) - (before[k] ?? 0)]));
        throw new Error(`curl from port ${p} failed; LB counters moved: ${JSON.stringify(moved)}; LB neighbours: ${sh(NS.lb, ['ip', '-6', 'neigh'])}`);
      }
    }));
    t.deepEqual(tcpRun.result, tcpPorts.map((p) => `${expected(VIP.snat6, p, 80, 6)}|${ADDR6.lb}`));
    t.true(tcpRun.packets > 0);
    const udpPorts = portsForBoth(VIP.snat6, 53, 17, 30700, 1);
    const udpRun = await capture(`src host ${VIP.snat6} and udp`, () => udpPorts.map((p) => udpAsk(VIP.snat6, 53, p)));
    t.deepEqual(udpRun.result, udpPorts.map((p) => `${expected(VIP.snat6, p, 53, 17)}|${ADDR6.lb}@${VIP.snat6}:53`));
  } finally {
    applyLb(lbState(ADDR.lb));
  }
});
