// QUIC connection-ID routing with real datagrams: client, LB (xdp_lb, generic XDP) and two dsr-l2 backends on one
// bridge (test/lib/bridge-lab.ts). Each backend runs a small QUIC-shaped UDP server: it answers a client Initial with
// the connection ID it chose, which carries its server id in Katran's layout, and answers a short-header packet
// saying whether it issued the packet's connection ID (a real QUIC server drops packets of connections it does not
// know). The client opens a connection (Initial, by the table), then sends short-header packets to the server's
// connection ID. The connection keeps its server
//   - across a real added to the service, with the lb's connection table emptied (as an lb node that never saw
//     the connection, or lost its state, would have it), although the table now sends the connection's 5-tuple to
//     the new real;
//   - across a client source-port change (migration, NAT rebinding) to a port the table sends elsewhere;
//   - across a weight change that gives the other real most of the table.
// Each step has its control: an Initial from the same 5-tuple (the client's own connection ID, so the table decides)
// reaches the other backend, so the test fails if the datagrams followed the table. IPv4 and IPv6.
import test from 'ava';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ADDR, ADDR6, bridgeLab, sh } from '../lib/bridge-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { QUIC_V1, cidWithServerId, quicLong, quicShort, serverIdOf } from '../lib/quic.js';
import { ringSlot } from '../../src/bpf/dataplane/flow-hash.js';
import { BpfMap } from '../../src/bpf/libbpf.js';

const lab = bridgeLab('q');
const NS = lab.ns;
const PIN = `/sys/fs/bpf/${NS.lb}`;
const VIP = '203.0.113.30';
const VIP6 = '2001:db8:f::30';
const PORT = 443;
type Family = 4 | 6;
const vipOf = (f: Family) => (f === 4 ? VIP : VIP6);
const clientOf = (f: Family) => (f === 4 ? ADDR.client : ADDR6.client);
const SEED = 0x5eed;
const SIZE = 7;
const SERVER_ID: Record<number, number> = { 1: 101, 2: 202 };
const NAME: Record<number, string> = { 1: 'b1', 2: 'b2' };
/** Each backend's connection ID: its server id in CID version 1, then its own bytes. */
const CID: Record<number, Buffer> = { 1: cidWithServerId(1, SERVER_ID[1]!, 8, 0x11), 2: cidWithServerId(1, SERVER_ID[2]!, 8, 0x22) };

let family: Family = 4;
const slotOf = (sport: number) => ringSlot({ src: clientOf(family), dst: vipOf(family), sport, dport: PORT, proto: 17 }, true, SEED, SIZE);
/** A state whose ring is `ring` and whose QUIC server ids are those of `reals`: service 1 on the IPv4 VIP (reals 1,
 * 2), service 2 on the IPv6 one (reals 3, 4 = the same backends' IPv6 addresses), the one of the family under test
 * with `ring`, the other with b1 only. */
const state = (ring: number[], reals: number[]) => {
  const ids = (off: number) => Object.fromEntries(reals.map((r) => [SERVER_ID[r]!, r + off]));
  const onlyB1 = Array.from({ length: SIZE }, () => 1);
  return makeState({
    reals: { 1: ADDR.b1, 2: ADDR.b2, 3: ADDR6.b1, 4: ADDR6.b2 }, hashSeed: SEED, addresses: [ADDR.lb, ADDR6.lb],
    services: [
      { id: 1, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: PORT, protocol: 'UDP' }], ring: family === 4 ? ring : onlyB1, quic: family === 4 ? ids(0) : { [SERVER_ID[1]!]: 1 } },
      { id: 2, vip: VIP6, forwarding: 'dsr-l2', ports: [{ port: PORT, protocol: 'UDP' }], ring: (family === 6 ? ring : onlyB1).map((r) => r + 2),
        quic: family === 6 ? ids(2) : { [SERVER_ID[1]!]: 3 } },
    ],
  });
};

function runner(args: string[], stdin = ''): string {
  // nsenter --net keeps the host's /sys/fs/bpf, so the pins outlive the runner
  return sh(null, ['nsenter', `--net=/run/netns/${NS.lb}`, process.execPath, '--import', 'tsx',
    new URL('../lib/dp-runner.ts', import.meta.url).pathname, ...args], stdin);
}
const apply = (ring: number[], reals: number[]) => runner(['lb', PIN, 'eth0', 'generic'], JSON.stringify(stateToJson(state(ring, reals))));
const counters = (): Record<string, number> => JSON.parse(runner(['lb-counters', PIN]));
/** Empties the lb's connection table (its pin is on the host's bpffs). */
function clearConntrack(): void {
  const ct = BpfMap.open(join(PIN, 'lb_conntrack'), 'lb_conntrack');
  try {
    for (const k of ct.keys()) ct.delete(k);
  } finally {
    ct.close();
  }
}

/** The QUIC-shaped server: `|name|initial|<its CID>` for an Initial, `|name|known` or `|name|unknown` for a short header
 * by whether it issued the packet's destination connection ID. Bound to VIP:443 (the VIP is on lo: DSR). */
const SERVER = `const d=require('dgram');const [name,cidHex,vip,port,type]=process.argv.slice(1);const cid=Buffer.from(cidHex,'hex');
const s=d.createSocket(type);s.on('message',(m,r)=>{let kind;if(m.length&&(m[0]&0x80))kind=(m[0]&0x30)===0?'initial|'+cidHex:'long';
else kind=m.subarray(1,1+cid.length).equals(cid)?'known':'unknown';s.send(Buffer.from('|'+name+'|'+kind),r.port,r.address);});
s.bind(Number(port),vip,()=>console.log('ready'));`;

function server(ns: string, real: number, f: Family): Promise<void> {
  const c = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', SERVER, NAME[real]!, CID[real]!.toString('hex'), vipOf(f), String(PORT), `udp${f}`],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  lab.children.push(c);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server ${NAME[real]} did not start`)), 15_000);
    c.stdout!.on('data', () => { clearTimeout(timer); resolve(); });
    c.on('exit', (code) => reject(new Error(`server ${NAME[real]} exited ${code}`)));
  });
}

/** The client: sends one datagram from ADDR.client:sport (up to 3 tries, 0.7 s apart) and prints the answer. */
const CLIENT = `const d=require('dgram');const [src,sport,vip,port,hex,type]=process.argv.slice(1);const s=d.createSocket({type,reuseAddr:true});
s.on('message',(m)=>{console.log(m.toString('latin1').slice(1));process.exit(0);});
s.bind(Number(sport),src,()=>{let n=0;const send=()=>{if(n++>=3){console.log('');process.exit(0);}s.send(Buffer.from(hex,'hex'),Number(port),vip);setTimeout(send,700);};send();});`;

/** One exchange: the answering backend's reply (`b1|known`, ...), '' when none came. */
const exchange = (sport: number, packet: Buffer): string =>
  sh(NS.client, [process.execPath, '-e', CLIENT, clientOf(family), String(sport), vipOf(family), String(PORT), packet.toString('hex'), `udp${family}`]).trim();
/** A client Initial: its own random-looking destination connection ID, so the table decides. */
const initial = () => quicLong({ type: 0x00, version: QUIC_V1, dcid: Buffer.from('c1c2c3c4c5c6c7c8', 'hex'), scid: Buffer.alloc(8, 0xcc) });
const oneRtt = (dcid: Buffer, n: number) => quicShort(dcid, Buffer.from(`packet ${n}`));

/** A source port (from `from` on) whose flow `ring` sends to `real`. */
function portTo(ring: number[], real: number, from: number): number {
  for (let p = from; p < from + 5000; p++) if (ring[slotOf(p)] === real) return p;
  throw new Error(`no port to real ${real}`);
}

const teardown = () => lab.teardown([PIN]);

test.before(async () => {
  teardown();
  lab.setup();
  sh(NS.client, ['ethtool', '-K', 'eth0', 'tx', 'off', 'gso', 'off', 'tso', 'off']);
  for (const b of [NS.b1, NS.b2]) {
    sh(b, ['ip', 'route', 'add', '192.0.2.0/24', 'dev', 'eth0']);
    sh(b, ['ip', '-6', 'route', 'add', '2001:db8:c::/64', 'dev', 'eth0']);
    sh(b, ['sysctl', '-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2', 'net.ipv4.conf.all.rp_filter=0',
      'net.ipv4.conf.eth0.rp_filter=0', 'net.ipv4.conf.lo.rp_filter=0']);
    sh(b, ['ip', 'addr', 'add', `${VIP}/32`, 'dev', 'lo']);
    sh(b, ['ip', 'addr', 'add', `${VIP6}/128`, 'dev', 'lo', 'nodad']);
  }
  sh(NS.lb, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
  for (const a of [ADDR.b1, ADDR.b2, ADDR6.b1, ADDR6.b2]) sh(NS.lb, ['ping', '-c', '1', '-W', '2', a]);
  await Promise.all([server(NS.b1, 1, 4), server(NS.b2, 2, 4), server(NS.b1, 1, 6), server(NS.b2, 2, 6)]);
});

test.after.always(teardown);

for (const f of [4, 6] as const) test.serial(`IPv${f}: a QUIC connection keeps its server across a real added, a client port change and a weight change`, (t) => {
  family = f;
  // 1. only b1 is in the service: the connection opens on b1 and learns b1's connection ID
  const onlyB1 = Array.from({ length: SIZE }, () => 1);
  apply(onlyB1, [1]);
  const sport = 41000;
  const opened = exchange(sport, initial());
  t.is(opened, `b1|initial|${CID[1]!.toString('hex')}`, 'the Initial went by the table to b1');
  const cid = Buffer.from(opened.split('|')[2]!, 'hex');
  t.is(serverIdOf(cid), SERVER_ID[1], 'b1 chose a connection ID carrying its server id');
  t.is(exchange(sport, oneRtt(cid, 1)), 'b1|known');

  // 2. b2 is added, and the table now gives the connection's 5-tuple to b2; the lb forgets its connection table
  const added = Array.from({ length: SIZE }, (_, i) => (i === slotOf(sport) || i % 2 ? 2 : 1));
  t.is(added[slotOf(sport)], 2);
  apply(added, [1, 2]);
  clearConntrack();
  let before = counters();
  t.is(exchange(sport, oneRtt(cid, 2)), 'b1|known', 'the connection stays on b1');
  let after = counters();
  t.true((after.quic_routed ?? 0) > (before.quic_routed ?? 0), 'routed by its connection ID');
  t.is(exchange(sport, initial()), 'b2|initial|' + CID[2]!.toString('hex'), 'control: the same 5-tuple without a server id goes to b2');

  // 3. the client migrates to another source port, one the table sends to b2
  const migrated = portTo(added, 2, 42000);
  t.is(exchange(migrated, oneRtt(cid, 3)), 'b1|known', 'after the port change the connection is still on b1');
  t.is(exchange(migrated, oneRtt(cid, 4)), 'b1|known');
  t.is(exchange(migrated, initial()), 'b2|initial|' + CID[2]!.toString('hex'), 'control: that port without a server id goes to b2');

  // 4. a weight change gives b2 all but one entry of the table
  const heavy = Array.from({ length: SIZE }, (_, i) => (i === (slotOf(sport) + 1) % SIZE && i !== slotOf(migrated) ? 1 : 2));
  apply(heavy, [1, 2]);
  clearConntrack();
  before = counters();
  for (const [n, port] of [[5, sport], [6, migrated], [7, portTo(heavy, 2, 43000)]] as const)
    t.is(exchange(port, oneRtt(cid, n)), 'b1|known', `port ${port} after the weight change`);
  after = counters();
  t.true((after.quic_routed ?? 0) - (before.quic_routed ?? 0) >= 3, JSON.stringify(after));
  t.is(exchange(migrated, initial()), 'b2|initial|' + CID[2]!.toString('hex'), 'control: the table sends new flows to b2');

  // b1's connection ID at b2's server would be refused: the answers above came from the server that issued it
  t.is(exchange(portTo(heavy, 2, 44000), oneRtt(Buffer.from('4000000000000000', 'hex'), 8)), 'b2|unknown',
    'a connection ID without a server id goes by the table, to a server that does not know it');
});
