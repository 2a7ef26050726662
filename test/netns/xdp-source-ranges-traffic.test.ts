// Source ranges with real traffic: client, LB (xdp_lb, generic XDP) and two dsr-l2 backends on one bridge
// (test/lib/bridge-lab.ts). The client holds two addresses of each family; the services list only the first. A
// real TCP client from the listed address gets its answer through the VIP, from the other address it gets nothing
// and the LB counts the drops (drop_source_range), IPv4 and IPv6; a service without ranges answers both; an apply
// that adds the second address lets it in.
import test from 'ava';
import { spawn } from 'node:child_process';
import { ADDR, ADDR6, bridgeLab, sh } from '../lib/bridge-lab.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';

const lab = bridgeLab('r');
const NS = lab.ns;
const PIN = `/sys/fs/bpf/${NS.lb}`;
const OTHER = { v4: '192.0.2.3', v6: '2001:db8:c::3' }; // the client's second addresses
const VIP = { v4: '203.0.113.10', v6: '2001:db8:f::10', open: '203.0.113.11' };
const RING = [1, 2, 2, 1, 2, 1, 1];
const services = (extra: boolean): SvcSpec[] => [
  { id: 1, vip: VIP.v4, forwarding: 'dsr-l2', ring: RING, sourceRanges: [`${ADDR.client}/32`, ...(extra ? [`${OTHER.v4}/32`] : [])] },
  { id: 2, vip: VIP.v6, forwarding: 'dsr-l2', ring: RING.map((r) => r + 2), sourceRanges: [`${ADDR6.client}/128`, ...(extra ? [`${OTHER.v6}/128`] : [])] },
  { id: 3, vip: VIP.open, forwarding: 'dsr-l2', ring: RING },
];
const state = (extra: boolean) => makeState({
  reals: { 1: ADDR.b1, 2: ADDR.b2, 3: ADDR6.b1, 4: ADDR6.b2 }, hashSeed: 0x5eed, addresses: [ADDR.lb, ADDR6.lb], services: services(extra),
});

function runner(args: string[], stdin = ''): string {
  // nsenter --net keeps the host's /sys/fs/bpf, so the pins outlive the runner
  return sh(null, ['nsenter', `--net=/run/netns/${NS.lb}`, process.execPath, '--import', 'tsx',
    new URL('../lib/dp-runner.ts', import.meta.url).pathname, ...args], stdin);
}
const apply = (extra: boolean) => runner(['lb', PIN, 'eth0', 'generic'], JSON.stringify(stateToJson(state(extra))));
const dropped = (): number => JSON.parse(runner(['lb-counters', PIN])).drop_source_range ?? 0;

function server(ns: string, name: string): Promise<void> {
  const code = `require('http').createServer((q,s)=>{s.setHeader('connection','close');s.end(${JSON.stringify(name)})})` +
    `.listen(80,'::',()=>console.log('ready'))`;
  const c = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  lab.children.push(c);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server ${name} did not start`)), 15_000);
    c.stdout!.on('data', () => { clearTimeout(timer); resolve(); });
    c.on('exit', (code) => reject(new Error(`server ${name} exited ${code}`)));
  });
}

/** curl from `src` to `vip`: the backend's name, or '' when nothing answered within 2 s. */
function get(src: string, vip: string): string {
  const url = vip.includes(':') ? `http://[${vip}]/` : `http://${vip}/`;
  try {
    return sh(NS.client, ['curl', '-g', '-s', '--max-time', '2', '--interface', src, url]).trim();
  } catch {
    return '';
  }
}

const teardown = () => lab.teardown([PIN]);

test.before(async () => {
  teardown();
  lab.setup();
  sh(NS.client, ['ip', 'addr', 'add', `${OTHER.v4}/24`, 'dev', 'eth0']);
  sh(NS.client, ['ip', 'addr', 'add', `${OTHER.v6}/64`, 'dev', 'eth0', 'nodad']);
  sh(NS.client, ['ethtool', '-K', 'eth0', 'tx', 'off', 'gso', 'off', 'tso', 'off']);
  for (const b of [NS.b1, NS.b2]) {
    sh(b, ['ip', 'route', 'add', '192.0.2.0/24', 'dev', 'eth0']);
    sh(b, ['ip', '-6', 'route', 'add', '2001:db8:c::/64', 'dev', 'eth0']);
    sh(b, ['sysctl', '-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2', 'net.ipv4.conf.all.rp_filter=0',
      'net.ipv4.conf.eth0.rp_filter=0', 'net.ipv4.conf.lo.rp_filter=0']);
    for (const v of [VIP.v4, VIP.open]) sh(b, ['ip', 'addr', 'add', `${v}/32`, 'dev', 'lo']);
    sh(b, ['ip', 'addr', 'add', `${VIP.v6}/128`, 'dev', 'lo', 'nodad']);
  }
  sh(NS.lb, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
  for (const a of [ADDR.b1, ADDR.b2, ADDR6.b1, ADDR6.b2]) sh(NS.lb, ['ping', '-c', '1', '-W', '2', a]);
  await Promise.all([server(NS.b1, 'b1'), server(NS.b2, 'b2')]);
  apply(false);
});

test.after.always(teardown);

test.serial('a listed client reaches the VIP; the other address of the same host is dropped and counted (IPv4, IPv6)', async (t) => {
  for (const [family, listed, other, vip] of [['v4', ADDR.client, OTHER.v4, VIP.v4], ['v6', ADDR6.client, OTHER.v6, VIP.v6]] as const) {
    const before = dropped();
    t.regex(get(listed, vip), /^b[12]$/, `${family}: the listed client got an answer`);
    t.is(dropped(), before, `${family}: nothing dropped for it`);
    t.is(get(other, vip), '', `${family}: no answer outside the ranges`);
    const n = dropped() - before;
    t.true(n >= 1, `${family}: drop_source_range +${n} (the SYN and its retransmissions)`);
  }
});

test.serial('a service without ranges answers both addresses', (t) => {
  t.regex(get(ADDR.client, VIP.open), /^b[12]$/);
  const before = dropped();
  t.regex(get(OTHER.v4, VIP.open), /^b[12]$/);
  t.is(dropped(), before);
});

test.serial('an apply that lists the second address lets it in', (t) => {
  apply(true);
  t.regex(get(OTHER.v4, VIP.v4), /^b[12]$/);
  t.regex(get(OTHER.v6, VIP.v6), /^b[12]$/);
  t.regex(get(ADDR.client, VIP.v4), /^b[12]$/, 'the first stays in');
});
