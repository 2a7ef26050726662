// bench/e2e's floor lab: xdp_l2_floor.c (a MAC rewrite and XDP_TX, nothing else) built for one VIP and attached
// to the lb nodes of a lab without gitlb, so the table shows what the lab's extra hop through an XDP_TX costs by
// itself, beside gitlb's modes.
import { join } from 'node:path';
import { PROJECT_ROOT, labNs, type LabState } from '../../src/lab/lab.js';
import { exec, nsArgv, run } from '../../src/lab/netns.js';

const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;

/** The MAC address of a node's interface inside its namespace. */
export async function macOf(state: LabState, nsShort: string, dev: string): Promise<string> {
  const r = await run(nsArgv(labNs(state, nsShort), ['ip', '-j', 'link', 'show', 'dev', dev]));
  const mac = (JSON.parse(r.stdout) as { address?: string }[])[0]?.address;
  if (!mac || !MAC.test(mac)) throw new Error(`no MAC address for ${dev} in ${nsShort}`);
  return mac;
}

/**
 * Builds bench/e2e/xdp_l2_floor.c for `url`'s VIP and port, the backends' MACs compiled in, in the order of
 * `backends`. Returns the object's path.
 */
export async function buildFloor(state: LabState, backends: string[], url: string, dir: string): Promise<string> {
  const u = new URL(url);
  const byAddr = new Map(state.plan.nodes.filter((n) => n.role === 'backend').map((n) => [n.addresses.find((a) => !a.includes(':'))!, n]));
  const macs: string[] = [];
  for (const b of backends) {
    const n = byAddr.get(b);
    if (!n) throw new Error(`floor: no backend node with address ${b}`);
    macs.push(await macOf(state, n.ns, n.interface));
  }
  // the reply leg's next hop: the router's interface on the segment (routerThroughLbNodes)
  return compileFloor(u.hostname, Number(u.port || 80), macs, dir, await macOf(state, state.plan.router.ns, ROUTER_SEGMENT_DEV));
}

/** The router's interface on the lab's segment (topology.ts). */
const ROUTER_SEGMENT_DEV = 'sw0';
const CLIENTS_V4 = '192.0.2.0/24';

/**
 * For the time of a measurement the backends reach the clients through the lb nodes (a multipath route over both,
 * hashed by L4 so flows spread as the router spreads them), not straight through the router: the path a SNAT
 * balancer's replies take. With the floor program's reply leg, the lb nodes send the answers on to the router
 * with an XDP_TX. Returns the undo.
 */
export async function repliesThroughLbNodes(state: LabState): Promise<() => Promise<void>> {
  const lbs = state.plan.nodes.filter((n) => n.role === 'lb').map((n) => n.addresses.find((a) => !a.includes(':'))!);
  const backends = state.plan.nodes.filter((n) => n.role === 'backend');
  for (const b of backends) {
    const ns = labNs(state, b.ns);
    await run(nsArgv(ns, ['sysctl', '-q', '-w', 'net.ipv4.fib_multipath_hash_policy=1']));
    await run(nsArgv(ns, ['ip', 'route', 'replace', CLIENTS_V4, ...lbs.flatMap((a) => ['nexthop', 'via', a, 'dev', b.interface])]));
  }
  return async () => {
    for (const b of backends) {
      const ns = labNs(state, b.ns);
      await run(nsArgv(ns, ['ip', 'route', 'del', CLIENTS_V4]));
      await run(nsArgv(ns, ['sysctl', '-q', '-w', 'net.ipv4.fib_multipath_hash_policy=0']));
    }
  };
}

/** Compiles xdp_l2_floor.c for VIP `vip4`:`port`/TCP over backends with MACs `macs` into `dir`, with the reply leg
 * to `routerMac` when given; returns the object. */
export async function compileFloor(vip4: string, port: number, macs: string[], dir: string, routerMac?: string): Promise<string> {
  const octets = vip4.split('.').map(Number);
  if (octets.length !== 4 || octets.some((o) => !Number.isInteger(o) || o < 0 || o > 255)) throw new Error(`floor: bad IPv4 VIP '${vip4}'`);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`floor: bad port ${port}`);
  if (macs.length === 0 || macs.some((m) => !MAC.test(m))) throw new Error(`floor: bad MAC list ${macs.join(', ')}`);
  const vip = octets.reduce((a, o) => a * 256 + o, 0);
  if (routerMac !== undefined && !MAC.test(routerMac)) throw new Error(`floor: bad router MAC ${routerMac}`);
  const cMac = (m: string) => `{${m.split(':').map((x) => `0x${x}`).join(',')}}`;
  const cMacs = macs.map(cMac).join(',');
  const obj = join(dir, 'xdp_l2_floor.o');
  await run(['clang', '-O2', '-g', '-Wall', '-target', 'bpf', '-I/usr/include/x86_64-linux-gnu',
    `-DFLOOR_VIP=0x${vip.toString(16)}u`, `-DFLOOR_PORT=${port}`, `-DFLOOR_MACS=${cMacs}`,
    ...(routerMac ? [`-DFLOOR_ROUTER_MAC=${cMac(routerMac)}`] : []),
    '-c', join(PROJECT_ROOT, 'bench', 'e2e', 'xdp_l2_floor.c'), '-o', obj]);
  return obj;
}

/** Attaches the floor program to every lb node's interface in `mode` (replacing whatever XDP program is there). */
export async function attachFloor(state: LabState, obj: string, mode: 'native' | 'generic'): Promise<void> {
  for (const n of state.plan.nodes.filter((x) => x.role === 'lb')) {
    const ns = labNs(state, n.ns);
    for (const kind of ['xdpgeneric', 'xdpdrv']) await exec(nsArgv(ns, ['ip', 'link', 'set', 'dev', n.interface, kind, 'off']));
    // `ip netns exec` (sysfs): iproute2's bpffs work directories then stay out of the host's /sys/fs/bpf
    await run(nsArgv(ns, ['ip', 'link', 'set', 'dev', n.interface, mode === 'native' ? 'xdpdrv' : 'xdpgeneric', 'obj', obj, 'sec', 'xdp'], { sysfs: true }));
  }
}
