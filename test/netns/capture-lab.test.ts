// `gitlb capture` on real traffic in a lab: client, lb and two backends on one bridge (test/lib/bridge-lab.ts), a
// dsr-l2 and a dsr-ipip UDP VIP over both backends (ipip decapsulated by the backends' TC program), a UDP server on
// each backend that reports every datagram it got. The CLI captures while the client sends datagrams from distinct
// ports; then:
//   - tcpdump -r reads the pcapng file, frame for frame;
//   - the frames as received are exactly what the client sent, and each frame as it left, with its verdict comment
//     "TX to real X", is exactly what real X's server received (to X's MAC; for ipip, in a tunnel to X);
//   - filters on real traffic: --vip and --client select only that VIP's datagrams from that client prefix;
//   - the rate bound on real traffic: no more than burst + rate x time captured, the rest counted as not captured,
//     and every datagram still reached its real (capture changes what is seen, never what is forwarded).
// docs/datapath.md, "Seeing what XDP does".
import test from 'ava';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ADDR, ADDR6, bridgeLab, sh } from '../lib/bridge-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { readPcapng, type PcapngFrame } from '../../src/bpf/capture/pcapng.js';
import { pinnedXdpLink } from '../../src/bpf/attach.js';
import { LINK_PIN } from '../../src/bpf/dataplane/index.js';
import { native } from '../../src/bpf/addon.js';

const lab = bridgeLab('k');
const NS = lab.ns;
const PIN = { lb: `/sys/fs/bpf/${NS.lb}`, b1: `/sys/fs/bpf/${NS.b1}`, b2: `/sys/fs/bpf/${NS.b2}` };
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const VIP = { l2: '203.0.113.10', ipip: '203.0.113.11' };
const CLIENT2 = '192.0.2.3';
const RING = [1, 2, 2, 1, 2, 1, 1];
const REAL_NS: Record<string, 'b1' | 'b2'> = { [ADDR.b1]: 'b1', [ADDR.b2]: 'b2' };
const STATE = makeState({
  reals: { 1: ADDR.b1, 2: ADDR.b2 }, hashSeed: 7, addresses: [ADDR.lb], mtu: 1500,
  services: [
    { id: 1, vip: VIP.l2, forwarding: 'dsr-l2', ports: [{ port: 53, protocol: 'UDP' }], ring: RING },
    { id: 2, vip: VIP.ipip, forwarding: 'dsr-ipip', ports: [{ port: 53, protocol: 'UDP' }], ring: RING },
  ],
});
const tmp = mkdtempSync(join(tmpdir(), 'gitlb-capture-lab-'));

function runner(ns: string, args: string[], stdin: string): void {
  execFileSync('nsenter', [`--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx',
    new URL('../lib/dp-runner.ts', import.meta.url).pathname, ...args], { input: stdin, timeout: 60_000, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** A UDP server on port 53 of a backend: one line "client port payload" per datagram. */
const received: Record<'b1' | 'b2', string[]> = { b1: [], b2: [] };
function server(name: 'b1' | 'b2'): Promise<void> {
  const code = `const s=require('dgram').createSocket('udp4');s.on('message',(m,r)=>process.stdout.write(r.address+' '+r.port+' '+m+'\\n'));` +
    `s.bind(53,'0.0.0.0',()=>console.log('ready'))`;
  const c = spawn('ip', ['netns', 'exec', NS[name], process.execPath, '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  lab.children.push(c);
  let buf = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server ${name} did not start`)), 15_000);
    c.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n');
      buf = lines.pop()!;
      for (const l of lines) {
        if (l === 'ready') { clearTimeout(timer); resolve(); } else received[name].push(l);
      }
    });
    c.on('exit', (code) => reject(new Error(`server ${name} exited ${code}`)));
  });
}

/** Sends from the client namespace: for each [source address, VIP, first port, count], `count` datagrams, each from
 * its own port (a flow of its own), payload "<tag>-<i>"; `repeat` more from the same port for the rate test. */
function send(flows: Array<{ src: string; vip: string; port: number; count: number; tag: string; repeat?: number; pauseMs?: number }>): void {
  const code = `const d=require('dgram');const flows=${JSON.stringify(flows)};(async()=>{for(const f of flows)for(let i=0;i<f.count;i++){` +
    `const s=d.createSocket('udp4');await new Promise((r,j)=>s.bind(f.port+i,f.src,(e)=>e?j(e):r()));` +
    `for(let k=0;k<(f.repeat||1);k++){await new Promise((r,j)=>s.send(f.tag+'-'+i+(f.repeat?'.'+k:''),53,f.vip,(e)=>e?j(e):r()));if(k%50===49)await new Promise((r)=>setTimeout(r,f.pauseMs||5));}` +
    `s.close();}})().catch((e)=>{console.error(String(e));process.exit(1)})`;
  sh(NS.client, [process.execPath, '-e', code]);
}

/** Waits until the servers hold `n` datagrams in all, at most 30 s. */
async function receivedAll(n: number): Promise<void> {
  for (let i = 0; i < 300 && received.b1.length + received.b2.length < n; i++) await new Promise((r) => setTimeout(r, 100));
}

/** `gitlb capture` on the lb node, running until stopped; resolves once its build runs in the link. */
async function startCapture(args: string[]): Promise<{ child: ChildProcess; stop: () => Promise<{ code: number; stderr: string; stdout: string }> }> {
  const link = join(PIN.lb, LINK_PIN);
  const original = pinnedXdpLink(link)!.progId;
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'capture', '--pin-root', '/sys/fs/bpf', '--node', NS.lb, '--duration', '60', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  lab.children.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  for (let i = 0; i < 300 && pinnedXdpLink(link)!.progId === original && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
  if (pinnedXdpLink(link)!.progId === original) throw new Error(`capture did not start: ${stderr}`);
  return {
    child,
    stop: async () => {
      child.kill('SIGINT');
      const code = await exited;
      if (pinnedXdpLink(link)!.progId !== original) throw new Error('the original program is not back');
      return { code, stderr, stdout };
    },
  };
}

interface Udp { src: string; dst: string; sport: number; payload: string; outer?: { src: string; dst: string } }
/** The UDP datagram in an Ethernet frame, inside one IPv4-in-IPv4 tunnel or not. */
function udpOf(f: Buffer): Udp | null {
  const ip4 = (o: number) => [...f.subarray(o, o + 4)].join('.');
  if (f.readUInt16BE(12) !== 0x0800) return null;
  let o = 14;
  let outer: Udp['outer'];
  if (f[o + 9] === 4) {
    outer = { src: ip4(o + 12), dst: ip4(o + 16) };
    o += (f[o]! & 0xf) * 4;
  }
  if (f[o + 9] !== 17) return null;
  const l4 = o + (f[o]! & 0xf) * 4;
  return { src: ip4(o + 12), dst: ip4(o + 16), sport: f.readUInt16BE(l4), payload: f.subarray(l4 + 8, l4 + f.readUInt16BE(l4 + 4)).toString(), outer };
}

/** The program id a pinned link (XDP or tcx) runs. */
function linkProgram(path: string): number {
  const fd = native().objGet(path);
  try {
    return native().linkInfo(fd).progId;
  } finally {
    native().closeFd(fd);
  }
}

const macOf = (ns: string) => (JSON.parse(sh(ns, ['ip', '-j', 'link', 'show', 'dev', 'eth0'])) as Array<{ address: string }>)[0]!.address;
const macText = (f: Buffer, o: number) => [...f.subarray(o, o + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');

test.before(async () => {
  lab.teardown(Object.values(PIN));
  lab.setup();
  sh(NS.client, ['ip', 'addr', 'add', `${CLIENT2}/24`, 'dev', 'eth0']);
  sh(NS.client, ['ethtool', '-K', 'eth0', 'tx', 'off', 'gso', 'off', 'tso', 'off']);
  for (const b of [NS.b1, NS.b2]) {
    sh(b, ['ip', 'route', 'add', '192.0.2.0/24', 'dev', 'eth0']);
    sh(b, ['sysctl', '-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2', 'net.ipv4.conf.all.rp_filter=0',
      'net.ipv4.conf.eth0.rp_filter=0', 'net.ipv4.conf.lo.rp_filter=0']);
    for (const v of Object.values(VIP)) sh(b, ['ip', 'addr', 'add', `${v}/32`, 'dev', 'lo']);
  }
  sh(NS.lb, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
  for (const a of [ADDR.b1, ADDR.b2]) sh(NS.lb, ['ping', '-c', '1', '-W', '2', a]);
  await Promise.all([server('b1'), server('b2')]);
  const backendJson = (own: string[]) => JSON.stringify({ ...stateToJson(STATE) as object, addresses: own, lbAddresses: [ADDR.lb, ADDR6.lb] });
  runner(NS.b1, ['backend', PIN.b1, 'eth0'], backendJson([ADDR.b1]));
  runner(NS.b2, ['backend', PIN.b2, 'eth0'], backendJson([ADDR.b2]));
  runner(NS.lb, ['lb', PIN.lb, 'eth0', 'generic'], JSON.stringify(stateToJson(STATE)));
});
test.after.always(() => {
  lab.teardown(Object.values(PIN));
  rmSync(tmp, { recursive: true, force: true });
});

const reset = () => { received.b1.length = 0; received.b2.length = 0; };

test.serial('the pcapng file: tcpdump reads it; frames and verdicts match what the client sent and what each real received', async (t) => {
  reset();
  const file = join(tmp, 'lab.pcapng');
  const cap = await startCapture(['-w', file, '--vip', VIP.l2, '--vip', VIP.ipip, '--rate', '0']);
  send([{ src: ADDR.client, vip: VIP.l2, port: 41000, count: 30, tag: 'l2' }, { src: ADDR.client, vip: VIP.ipip, port: 42000, count: 30, tag: 'ipip' }]);
  await receivedAll(60);
  const { code, stderr } = await cap.stop();
  t.is(code, 0, stderr);
  t.is(received.b1.length + received.b2.length, 60, 'every datagram reached a real');
  t.true(received.b1.length > 0 && received.b2.length > 0, 'both reals got some');
  t.regex(stderr, /60 matched, 60 captured, 0 not captured/);

  const { interfaces, frames } = readPcapng(readFileSync(file));
  t.deepEqual(interfaces.map((i) => i.linkType), [1]);
  t.is(frames.length, 120, 'each datagram as received and as sent on');
  const dump = execFileSync('tcpdump', ['-nn', '-q', '-r', file], { stdio: ['ignore', 'pipe', 'pipe'] }).toString().trim().split('\n');
  t.is(dump.length, 120, 'tcpdump reads every frame');
  t.regex(dump.join('\n'), /IP 192\.0\.2\.2\.41000 > 203\.0\.113\.10\.53: UDP/);
  t.regex(dump.join('\n'), /IP 198\.51\.100\.1 > 198\.51\.100\.1[12]: IP 192\.0\.2\.2\.42000 > 203\.0\.113\.11\.53: UDP/);

  // as received: exactly what the client sent (source, port, VIP, payload), to the lb's MAC
  const entries = frames.filter((f) => f.direction === 'inbound');
  const exits = frames.filter((f) => f.direction === 'outbound');
  const lbMac = macOf(NS.lb);
  const sent = [...Array.from({ length: 30 }, (_, i) => `${ADDR.client} ${41000 + i} ${VIP.l2} l2-${i}`),
    ...Array.from({ length: 30 }, (_, i) => `${ADDR.client} ${42000 + i} ${VIP.ipip} ipip-${i}`)];
  t.deepEqual(entries.map((f) => { const u = udpOf(f.frame)!; return `${u.src} ${u.sport} ${u.dst} ${u.payload}`; }).sort(), sent.sort());
  for (const f of entries) t.is(macText(f.frame, 0), lbMac);

  // as it left, by its verdict: each real's server got exactly the datagrams whose comment names that real
  const macs = { b1: macOf(NS.b1), b2: macOf(NS.b2) };
  const byReal: Record<'b1' | 'b2', string[]> = { b1: [], b2: [] };
  for (const f of exits) {
    const m = /^exit: TX to real (\S+) \(id \d\) \[ct_miss tx\]$/.exec(f.comment ?? '');
    t.truthy(m, `verdict comment: ${f.comment}`);
    if (!m) continue;
    const real = REAL_NS[m[1]!]!;
    const u = udpOf(f.frame)!;
    t.is(macText(f.frame, 0), macs[real], 'sent to the real\'s MAC');
    if (u.dst === VIP.ipip) t.deepEqual(u.outer, { src: ADDR.lb, dst: m[1] }, 'in a tunnel to the real');
    else t.is(u.outer, undefined);
    byReal[real].push(`${u.src} ${u.sport} ${u.payload}`);
  }
  for (const f of entries) t.regex(f.comment ?? '', /^entry: TX to real /);
  for (const r of ['b1', 'b2'] as const) t.deepEqual(byReal[r].sort(), [...received[r]].sort(), `what ${r} received`);
});

test.serial('filters on real traffic: --vip and --client select only that VIP\'s datagrams from that prefix', async (t) => {
  reset();
  const cap = await startCapture(['--vip', VIP.ipip, '--client', `${CLIENT2}/32`, '--rate', '0']);
  send([
    { src: ADDR.client, vip: VIP.l2, port: 43000, count: 10, tag: 'a' }, { src: ADDR.client, vip: VIP.ipip, port: 43100, count: 10, tag: 'b' },
    { src: CLIENT2, vip: VIP.l2, port: 43200, count: 10, tag: 'c' }, { src: CLIENT2, vip: VIP.ipip, port: 43300, count: 10, tag: 'd' },
  ]);
  await receivedAll(40);
  const { code, stdout, stderr } = await cap.stop();
  t.is(code, 0, stderr);
  t.is(received.b1.length + received.b2.length, 40);
  const exits = stdout.trim().split('\n').filter((l) => / exit /.test(l));
  const entries = stdout.trim().split('\n').filter((l) => / entry /.test(l));
  t.is(exits.length, 10, stdout);
  t.is(entries.length, 10);
  for (const l of [...entries, ...exits]) t.regex(l, /IPv4 192\.0\.2\.3:433\d\d > 203\.0\.113\.11:53 UDP/);
  for (const l of exits) t.regex(l, /\| TX to real 198\.51\.100\.1[12] \(id [12]\)/);
  t.regex(stderr, /10 matched, 10 captured, 0 not captured/);
});

test.serial('--real on real traffic: only the frames the balancer sent to that real, all of them; an address no real has is refused', async (t) => {
  reset();
  const cap = await startCapture(['--real', ADDR.b2, '--point', 'exit', '--rate', '0']);
  send([{ src: ADDR.client, vip: VIP.l2, port: 46000, count: 20, tag: 'x' }, { src: ADDR.client, vip: VIP.ipip, port: 46100, count: 20, tag: 'y' }]);
  await receivedAll(40);
  const { code, stdout, stderr } = await cap.stop();
  t.is(code, 0, stderr);
  t.is(received.b1.length + received.b2.length, 40);
  const lines = stdout.trim().split('\n').filter(Boolean);
  t.is(lines.length, received.b2.length, stdout);
  for (const l of lines) t.regex(l, / exit  TX .*\| TX to real 198\.51\.100\.12 \(id 2\)/);
  t.deepEqual(lines.map((l) => /192\.0\.2\.2:(\d+) >/.exec(l)![1]).sort(), received.b2.map((l) => l.split(' ')[1]).sort());
  const unknown = await new Promise<{ code: number; stderr: string }>((resolve) => {
    const c = spawn(process.execPath, ['--import', 'tsx', MAIN, 'capture', '--pin-root', '/sys/fs/bpf', '--node', NS.lb, '--real', '198.51.100.99'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    c.stderr!.on('data', (d) => (err += d));
    c.on('close', (code) => resolve({ code: code ?? -1, stderr: err }));
  });
  t.is(unknown.code, 1);
  t.regex(unknown.stderr, /--real 198\.51\.100\.99: the running data plane has no real with this address/);
});

test.serial('the rate bound on real traffic: at most burst + rate x time captured, the rest counted, every datagram forwarded', async (t) => {
  reset();
  const started = Date.now();
  const cap = await startCapture(['--vip', VIP.l2, '--rate', '20', '--burst', '5']);
  // 600 datagrams over about 1.2 s (a 100 ms pause every 50)
  send([{ src: ADDR.client, vip: VIP.l2, port: 44000, count: 4, tag: 'r', repeat: 150, pauseMs: 100 }]);
  await receivedAll(600);
  const { code, stdout, stderr } = await cap.stop();
  const seconds = (Date.now() - started) / 1000;
  t.is(code, 0, stderr);
  t.is(received.b1.length + received.b2.length, 600, 'capture changes what is seen, never what is forwarded');
  const captured = stdout.trim().split('\n').filter((l) => / exit /.test(l)).length;
  const bound = 5 + Math.ceil(20 * seconds);
  t.true(captured >= 5 && captured <= bound, `captured ${captured} of 600 in ${seconds.toFixed(1)} s (bound ${bound})`);
  // the program's own count: every matching datagram captured or counted as turned away by the bucket
  const m = /600 matched, (\d+) captured, (\d+) not captured \(0 sampled out, (\d+) over the rate bound, 0 refused by a full buffer\)/.exec(stderr);
  t.truthy(m, stderr);
  t.is(Number(m?.[1]), captured);
  t.is(Number(m?.[2]), 600 - captured);
  t.is(Number(m?.[3]), 600 - captured);
  t.log(`rate 20/s burst 5: ${captured} of 600 datagrams captured in ${seconds.toFixed(1)} s of capture`);
});

test.serial('on a backend: its TC programs captured the same way, each tunnel as it came and as decapsulated, --reason with its counters', async (t) => {
  reset();
  const file = join(tmp, 'backend.pcapng');
  const link = join(PIN.b1, 'tc_ingress_link');
  const original = linkProgram(link);
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'capture', '--pin-root', '/sys/fs/bpf', '--node', NS.b1, '--duration', '60',
    '--reason', 'decap_ipip4', '--rate', '0', '-w', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  lab.children.push(child);
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  for (let i = 0; i < 300 && linkProgram(link) === original && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
  t.not(linkProgram(link), original, `the capture build runs in the backend's ingress link: ${stderr}`);
  send([{ src: ADDR.client, vip: VIP.ipip, port: 45000, count: 20, tag: 'be' }, { src: ADDR.client, vip: VIP.l2, port: 45100, count: 20, tag: 'l2' }]);
  await receivedAll(40);
  child.kill('SIGINT');
  t.is(await exited, 0, stderr);
  t.is(linkProgram(link), original, 'the backend\'s program is back');
  t.regex(stderr, /original programs \(id \d+, \d+\) restored/);
  t.is(received.b1.length + received.b2.length, 40, 'every datagram reached a real');
  const tunnelled = received.b1.filter((l) => / be-\d+$/.test(l));
  t.true(tunnelled.length > 0, 'b1 got some of the tunnelled datagrams');
  const { frames } = readPcapng(readFileSync(file));
  t.is(frames.length, 2 * tunnelled.length, 'every decapsulated datagram, as it came and as handed on; nothing else (--reason)');
  const got: string[] = [];
  for (let i = 0; i + 1 < frames.length; i += 2) {
    const [came, went] = [frames[i]!, frames[i + 1]!];
    t.is(came.comment, 'entry: tc-ingress OK [rx_packets decap_ipip4]');
    t.is(went.comment, 'exit: tc-ingress OK [rx_packets decap_ipip4]');
    t.is(came.direction, 'inbound');
    const outer = udpOf(came.frame)!;
    const inner = udpOf(went.frame)!;
    t.deepEqual(outer.outer, { src: ADDR.lb, dst: ADDR.b1 }, 'as it came: the tunnel from the lb node');
    t.is(inner.outer, undefined, 'as handed on: the client\'s datagram alone');
    t.deepEqual({ ...outer, outer: undefined }, inner);
    got.push(`${inner.src} ${inner.sport} ${inner.payload}`);
  }
  t.deepEqual(got.sort(), [...tunnelled].sort(), 'what b1\'s server received');
});
