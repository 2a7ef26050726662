// bench/e2e's peers: the kernel's and haproxy's L4 balancing, set up where the table says they run.
//
// On lb-1 (the rows the comparison with gitlb uses): an operator choosing between gitlb and nftables or haproxy
// runs either on the lb node, so these peers pay the same hop every gitlb packet takes (router -> lb node ->
// backend over the switch). The router routes each peer address to lb-1 with a static /32 for the lab's life.
//   - nftables full NAT: DNAT to the backends (`numgen inc`) and SNAT to an address of lb-1's own (the peer
//     address, as gitlb's snat mode has its own snatAddress), so replies come back through lb-1: the kernel's
//     equivalent of gitlb's `snat` mode.
//   - haproxy in TCP mode: a proxy; it terminates the client's connection on lb-1 and opens its own to a backend.
//   - nftables stateless DSR: a netdev ingress rule on lb-1's interface rewrites the frame's MACs (destination: one
//     backend by a hash of the client address and port) and sends it back out of the same interface, the
//     backends holding the address on lo: the kernel's analogue of gitlb's dsr/l2 and of the XDP floor.
// On the router (information): haproxy TCP mode and nftables DNAT as before; the router is the backends' gateway,
// so neither pays the lb-node hop.
//
// Every nftables ruleset is loaded only for its own measurement (and warm-up) and deleted right after: a NAT table
// turns on connection tracking in its namespace, which would otherwise charge every other target's packets
// through the router or lb-1 as well.
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { labNs, type LabState } from '../../src/lab/lab.js';
import { assertAllowed, inCidr } from '../../src/lab/addr.js';
import { loadConfigModel } from '../../src/lab/load-config.js';
import { exec, nsArgv, run, waitForPort } from '../../src/lab/netns.js';
import { macOf } from './floor.js';

export const BACKEND_PORT = 80;
/** on the router: the client-side address it already has */
export const ROUTER_HAPROXY = { addr: '192.0.2.1', port: 8888 };
// DNAT keeps the port: the backends serve 80, and nothing on the router listens there
export const ROUTER_NFT = { addr: '192.0.2.1', port: 80 };
/**
 * On lb-1: one address on its lo for the full-NAT rule (port 80, also its SNAT source) and haproxy (port 8888;
 * haproxy connects to the backends from lb-1's interface address), one for stateless DSR
 * (on the backends' lo, like a DSR VIP). Both on the lb/backend segment's /24, used by nothing else in the lab (no
 * node, SNAT, router or Git address; not in any lb node's allowedVips, which are 203.0.113.0/24 in the sample):
 * gitlb's XDP program on lb-1 passes them to the kernel as the non-VIP traffic they are.
 */
export const LB_PEER_ADDR = '198.51.100.150';
export const LB_DSR_ADDR = '198.51.100.151';
export const LB_NFT = { addr: LB_PEER_ADDR, port: BACKEND_PORT };
export const LB_HAPROXY = { addr: LB_PEER_ADDR, port: 8888 };
export const LB_DSR = { addr: LB_DSR_ADDR, port: BACKEND_PORT };
/** the lb node the peers run on */
export const PEER_NODE = 'lb-1';

const TABLE_ROUTER = 'gitlb_bench_router';
const TABLE_LB_NAT = 'gitlb_bench_lb_nat';
const TABLE_LB_DSR = 'gitlb_bench_lb_dsr';

export function haproxyConfig(bind: { addr: string; port: number }, backends: string[]): string {
  return [
    'global',
    '  maxconn 8192',
    'defaults',
    '  mode tcp',
    '  timeout connect 3s',
    '  timeout client 10s',
    '  timeout server 10s',
    'frontend fe',
    `  bind ${bind.addr}:${bind.port}`,
    '  default_backend be',
    'backend be',
    '  balance roundrobin',
    ...backends.map((b, i) => `  server be${i + 1} ${b}:${BACKEND_PORT}`),
    '',
  ].join('\n');
}

const roundRobin = (backends: string[]) => `numgen inc mod ${backends.length} map { ${backends.map((b, i) => `${i} : ${b}`).join(', ')} }`;

/** The prerouting chain of a DNAT peer: connections to `to` are DNATed round-robin over the backends and counted (a
 * nat chain sees a connection's first packet only). */
const dnatChain = (to: { addr: string; port: number }, backends: string[]) => [
  '  chain pre {',
  '    type nat hook prerouting priority dstnat;',
  `    ip daddr ${to.addr} tcp dport ${to.port} counter dnat to ${roundRobin(backends)}`,
  '  }',
];

/** nftables DNAT on the router, round-robin over the backends (no SNAT: the router is the backends' gateway). */
export function routerNftRuleset(backends: string[]): string {
  return [`table ip ${TABLE_ROUTER} {`, ...dnatChain(ROUTER_NFT, backends), '}', ''].join('\n');
}

/**
 * nftables full NAT on an lb node: DNAT round-robin over the backends, then SNAT of exactly those connections
 * (`ct status dnat`) to `source`, one of the node's own addresses, so the backends answer the lb node and
 * conntrack turns the replies back. Counters: connections DNATed (the nat chains see a connection's first packet
 * only).
 */
export function lbFullNatRuleset(backends: string[], source: string): string {
  return [
    `table ip ${TABLE_LB_NAT} {`,
    ...dnatChain(LB_NFT, backends),
    '  chain post {',
    '    type nat hook postrouting priority srcnat;',
    `    ct status dnat ip daddr { ${backends.join(', ')} } tcp dport ${BACKEND_PORT} counter snat to ${source}`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/**
 * Stateless DSR in nftables on an lb node: at `dev`'s ingress, a TCP packet to the DSR address and port gets the
 * lb node's MAC as source and one backend's MAC as destination, chosen by a hash of the client address and port
 * (the same flow, the same backend), and leaves by the same interface. No connection tracking, no NAT: the
 * backends hold the address on lo and answer the client directly. The counter counts packets.
 */
export function lbDsrRuleset(dev: string, selfMac: string, backendMacs: string[]): string {
  const map = backendMacs.map((m, i) => `${i} : ${m}`).join(', ');
  return [
    `table netdev ${TABLE_LB_DSR} {`,
    '  chain in {',
    `    type filter hook ingress device "${dev}" priority 0;`,
    `    ip daddr ${LB_DSR.addr} tcp dport ${LB_DSR.port} counter ether saddr set ${selfMac} ether daddr set jhash ip saddr . tcp sport mod ${backendMacs.length} map { ${map} } fwd to "${dev}"`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/** Every address the lab uses: node, SNAT, router, Git, client and lo (VIP) addresses, without prefix lengths. */
function labAddresses(state: LabState): Set<string> {
  const p = state.plan;
  const strip = (a: string) => a.split('/')[0]!;
  return new Set([
    ...p.links.flatMap((l) => [...l.a.addrs, ...l.b.addrs]).map(strip),
    ...p.loAddrs.flatMap((l) => l.addrs).map(strip),
    ...p.nodes.flatMap((n) => n.addresses),
    p.git.address,
    ...p.client.v4,
    p.router.clientSide.v4,
    p.router.segment.v4,
  ]);
}

/**
 * Throws unless the lb-node peer addresses are test addresses that nothing in the lab uses and that are no VIP of
 * `vips` and not in any VIP range in `vipRanges` (an lb node's allowedVips): gitlb's program must see them as the
 * non-VIP traffic it passes.
 */
export function checkPeerAddresses(state: LabState, vips: string[], vipRanges: string[], addrs = [LB_PEER_ADDR, LB_DSR_ADDR]): void {
  const used = labAddresses(state);
  for (const a of addrs) {
    assertAllowed(a, 'bench/e2e peer address');
    if (used.has(a)) throw new Error(`bench/e2e peer address ${a} is already used in the lab`);
    if (vips.includes(a)) throw new Error(`bench/e2e peer address ${a} is a VIP`);
    const range = vipRanges.find((r) => inCidr(a, r));
    if (range) throw new Error(`bench/e2e peer address ${a} is in a VIP range (${range})`);
  }
}

export interface PeerSite {
  client: string;
  clientDev: string;
  /** the client address connections to the router's peers leave from (see placePeers) */
  clientAltSrc: string;
  router: string;
  lb: string;
  lbDev: string;
  /** the lb node's own IPv4 address (the router's next hop, haproxy's source towards the backends) */
  lbAddr: string;
  lbMac: string;
  backendNs: string[];
  backendMacs: string[];
}

/** Where the peers run: the router's and lb-1's namespaces, lb-1's address and MAC, the backends' MACs. */
export async function peerSite(state: LabState, backends: string[]): Promise<PeerSite> {
  const lb = state.plan.nodes.find((n) => n.name === PEER_NODE);
  if (!lb) throw new Error(`bench/e2e: no lb node ${PEER_NODE} in the lab`);
  const byAddr = new Map(state.plan.nodes.filter((n) => n.role === 'backend').map((n) => [n.addresses.find((a) => !a.includes(':'))!, n]));
  const nodes = backends.map((b) => {
    const n = byAddr.get(b);
    if (!n) throw new Error(`bench/e2e: no backend node with address ${b}`);
    return n;
  });
  const clientEnd = state.plan.links.flatMap((l) => [l.a, l.b]).find((e) => e.ns === state.plan.client.ns);
  const alt = state.plan.client.v4[1];
  if (!clientEnd || !alt) throw new Error('bench/e2e: the lab\'s client needs an interface and two IPv4 addresses');
  return {
    client: labNs(state, 'client'),
    clientDev: clientEnd.name,
    clientAltSrc: alt,
    router: labNs(state, 'router'),
    lb: labNs(state, lb.ns),
    lbDev: lb.interface,
    lbAddr: lb.addresses.find((a) => !a.includes(':'))!,
    lbMac: await macOf(state, lb.ns, lb.interface),
    backendNs: nodes.map((n) => labNs(state, n.ns)),
    backendMacs: await Promise.all(nodes.map((n) => macOf(state, n.ns, n.interface))),
  };
}

/**
 * The addresses and routes the peers need, for the lab's life: the peer address on lb-1's lo, the DSR address on
 * every backend's lo (arp_ignore/arp_announce are set there for DSR VIPs), a /32 route for each on the router via
 * lb-1, and in the client namespace a route to the router's peer address with the client's second address as
 * source. Returns the undo.
 *
 * Why that source: the router's DNAT keeps the client's address and port, so a backend sees the very 4-tuple
 * (client address and port, backend:80) that a direct connection had, and direct runs just before. The backend
 * still holds that connection in TIME_WAIT (60 s), and the client's TCP timestamps, offset per address pair, come
 * from another sequence (its peer was 192.0.2.1, not the backend): the backend takes the SYN for an old duplicate,
 * and the connection opens only after the client's 1 s retransmission (measured: 2,500 conn/s right after direct,
 * 9,400 conn/s 65 s later). Every other target reaches the backends with a 4-tuple of its own: a VIP or the DSR
 * address as destination, or lb-1's addresses as source (the full NAT's LB_PEER_ADDR, haproxy's own address).
 */
export async function placePeers(site: PeerSite): Promise<() => Promise<void>> {
  const undo: (() => Promise<unknown>)[] = [];
  try {
    await run(nsArgv(site.client, ['ip', 'route', 'replace', `${ROUTER_NFT.addr}/32`, 'dev', site.clientDev, 'src', site.clientAltSrc]));
    undo.push(() => exec(nsArgv(site.client, ['ip', 'route', 'del', `${ROUTER_NFT.addr}/32`])));
    await run(nsArgv(site.lb, ['ip', 'addr', 'add', `${LB_PEER_ADDR}/32`, 'dev', 'lo']));
    undo.push(() => exec(nsArgv(site.lb, ['ip', 'addr', 'del', `${LB_PEER_ADDR}/32`, 'dev', 'lo'])));
    for (const ns of site.backendNs) {
      await run(nsArgv(ns, ['ip', 'addr', 'add', `${LB_DSR_ADDR}/32`, 'dev', 'lo']));
      undo.push(() => exec(nsArgv(ns, ['ip', 'addr', 'del', `${LB_DSR_ADDR}/32`, 'dev', 'lo'])));
    }
    for (const a of [LB_PEER_ADDR, LB_DSR_ADDR]) {
      await run(nsArgv(site.router, ['ip', 'route', 'replace', `${a}/32`, 'via', site.lbAddr]));
      undo.push(() => exec(nsArgv(site.router, ['ip', 'route', 'del', `${a}/32`])));
    }
  } catch (e) {
    for (const u of undo.reverse()) await u();
    throw e;
  }
  return async () => {
    for (const u of undo.reverse()) await u();
  };
}

/** Loads nftables ruleset `text` in `ns` (the system's nft: see nsArgv). */
export async function nftLoad(ns: string, text: string, dir: string, name: string): Promise<void> {
  const file = join(dir, `${name}.nft`);
  writeFileSync(file, text);
  const r = await exec(nsArgv(ns, ['nft', '-f', file]));
  if (r.code !== 0) throw new Error(`nft -f ${name} failed: ${r.stderr.trim()}`);
}

/** Deletes table `family name` in `ns` if it is there. */
export async function nftDelete(ns: string, family: string, name: string): Promise<void> {
  const l = await exec(nsArgv(ns, ['nft', 'list', 'table', family, name]));
  if (l.code === 0) await run(nsArgv(ns, ['nft', 'delete', 'table', family, name]));
}

/** The packets counted by the rule of table `family name` that matches `ip daddr addr` (null without one). */
export async function nftCounter(ns: string, family: string, name: string, addr: string): Promise<number | null> {
  const out = (await run(nsArgv(ns, ['nft', 'list', 'table', family, name]))).stdout;
  const m = new RegExp(`ip daddr ${addr.replace(/\./g, '\\.')} .*counter packets (\\d+)`).exec(out);
  return m ? Number(m[1]) : null;
}

/** A peer as bench.ts measures it: a URL, and hooks around each measurement and warm-up. */
export interface PeerTarget {
  name: string;
  url: string;
  before: () => Promise<void>;
  after: () => Promise<void>;
}

/** The nftables rulesets: the namespace, the table and its text. */
function nftPeer(ns: string, family: 'ip' | 'netdev', table: string, text: string, addr: string, dir: string) {
  return {
    before: () => nftLoad(ns, text, dir, table),
    // a rule that counted nothing was not on the path measured: fail rather than print that figure
    after: async () => {
      try {
        const n = await nftCounter(ns, family, table, addr);
        if (!n) throw new Error(`bench/e2e: the nftables rule for ${addr} (table ${family} ${table}) counted no packets: the traffic did not pass it`);
      } finally {
        await nftDelete(ns, family, table);
      }
    },
  };
}

/** SIGTERM to a child this module started, and its exit awaited (bounded: SIGKILL after 5 s). */
async function stopChild(c: ChildProcess): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise<void>((res) => c.once('exit', () => res()));
  c.kill('SIGTERM');
  const timer = setTimeout(() => c.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

/** Starts haproxy with `config` in `ns` and waits for its port. */
async function startHaproxy(ns: string, config: string, port: number, file: string): Promise<ChildProcess> {
  writeFileSync(file, config);
  const argv = nsArgv(ns, ['haproxy', '-db', '-f', file]);
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitForPort(ns, port, 'tcp', { timeoutMs: 10_000 });
  return child;
}

/**
 * Sets up every peer in `state`'s lab over `backends` (scratch files in `dir`): haproxy on lb-1 and on the router
 * (running until stop), lb-1's addresses and the router's routes to them; the nftables rulesets are loaded by each
 * target's `before` and removed by its `after`. Rows on lb-1 first, then the router's (information).
 */
export async function startPeers(state: LabState, configDir: string, backends: string[], dir: string): Promise<{ targets: PeerTarget[]; stop: () => Promise<void> }> {
  const model = await loadConfigModel(configDir);
  const vipRanges = model.nodes.flatMap((n) => n.spec.allowedVips ?? []);
  checkPeerAddresses(state, model.services.map((x) => x.spec.vip), vipRanges);
  const site = await peerSite(state, backends);
  const children: ChildProcess[] = [];
  let unplace: (() => Promise<void>) | null = null;
  const stop = async () => {
    await Promise.all(children.splice(0).map(stopChild));
    await unplace?.();
    unplace = null;
    for (const [ns, family, table] of [[site.router, 'ip', TABLE_ROUTER], [site.lb, 'ip', TABLE_LB_NAT], [site.lb, 'netdev', TABLE_LB_DSR]] as const) {
      await nftDelete(ns, family, table).catch(() => {});
    }
  };
  try {
    unplace = await placePeers(site);
    children.push(await startHaproxy(site.lb, haproxyConfig(LB_HAPROXY, backends), LB_HAPROXY.port, join(dir, 'haproxy-lb.cfg')));
    children.push(await startHaproxy(site.router, haproxyConfig(ROUTER_HAPROXY, backends), ROUTER_HAPROXY.port, join(dir, 'haproxy-router.cfg')));
  } catch (e) {
    await stop();
    throw e;
  }
  const url = (b: { addr: string; port: number }) => `http://${b.addr}:${b.port}/`;
  const none = async () => {};
  const targets: PeerTarget[] = [
    { name: `nftables full nat on ${PEER_NODE} (dnat+snat, like snat mode)`, url: url(LB_NFT), ...nftPeer(site.lb, 'ip', TABLE_LB_NAT, lbFullNatRuleset(backends, LB_PEER_ADDR), LB_NFT.addr, dir) },
    { name: `haproxy tcp mode on ${PEER_NODE} (proxy)`, url: url(LB_HAPROXY), before: none, after: none },
    { name: `nftables dsr on ${PEER_NODE} (netdev fwd, stateless, like dsr/l2)`, url: url(LB_DSR), ...nftPeer(site.lb, 'netdev', TABLE_LB_DSR, lbDsrRuleset(site.lbDev, site.lbMac, site.backendMacs), LB_DSR.addr, dir) },
    { name: 'nftables dnat on the router: no lb-node hop (info)', url: url(ROUTER_NFT), ...nftPeer(site.router, 'ip', TABLE_ROUTER, routerNftRuleset(backends), ROUTER_NFT.addr, dir) },
    { name: 'haproxy tcp mode on the router: no lb-node hop (info)', url: url(ROUTER_HAPROXY), before: none, after: none },
  ];
  return { targets, stop };
}
