// The two-arm lab (bench/e2e/two-arm-run, test/netns/xdp-two-arm.test.ts): one lb node with two interfaces, the
// shape of an independent lab issue 26 reported (one lb node, two backends), unlike src/lab's lb nodes, which have
// one interface on a shared segment.
//
//   client (cl) eth0 192.0.2.2 ---- eth0 192.0.2.1  lb  eth1 198.51.100.1 ---- br0 (sw) ---- b1 198.51.100.11
//                                   xdp_lb (native)                                     \--- b2 198.51.100.12
//
// The client reaches the VIPs (203.0.113.0/24) and the backends (direct) through the lb node, whose kernel forwards
// between its arms; the backends' default route is the lb node. gitlb's data plane is loaded in the lb node the
// way the daemon loads it (openLbDataPlane + converge, test/lib/dp-runner.ts) on eth0, with an `snat` service
// (snatAddress: the lb's eth1 address) and a `dsr-l2` service (the backends hold its VIP on lo), both over both
// backends. Native XDP on veth needs NAPI on the peer of every interface it sends out of (docs/datapath.md):
// `egressNapi: false` leaves the backend-side bridge port without it, the condition under which native redirects
// into eth1 were dropped silently.
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeState } from '../../test/lib/lb-state.js';
import { stateToJson } from '../../test/lib/xdp-harness.js';
import { backendHaproxyConfig } from '../../src/lab/servers/backend-haproxy.js';
import { assertAllowed } from '../../src/lab/addr.js';
import type { DesiredState } from '../../src/render/state.js';

export const TWO_ARM = {
  client: '192.0.2.2', lbClientSide: '192.0.2.1', lb: '198.51.100.1', backends: ['198.51.100.11', '198.51.100.12'],
  vip: { l2: '203.0.113.10', snat: '203.0.113.20' }, port: 80,
} as const;
// the product's default Node.spec.snatPorts (schemas/node.schema.json)
const SNAT_PORTS = { min: 32768, max: 60999 };
const RING_SIZE = 251; // prime, as the product's tables are
// the schema's default conntrack.maxEntries (schemas/cluster.schema.json), which also sizes the SNAT tables: with a
// smaller one, one-request connections at a few thousand per second fill the SNAT table within the closing-flow
// timeout and new ones are dropped (`snat_drop_table_full`)
const CONNTRACK_MAX_ENTRIES = 65536;

export interface TwoArmLab {
  ns: { client: string; lb: string; sw: string; backends: string[] };
  pinRoot: string;
  /** Loads (or re-applies) gitlb's data plane on the lb node's eth0 in `mode`; returns dp-runner's report or throws
   * with its error (an error carries `code`, e.g. ENOTSUP when native cannot forward). */
  applyDataPlane(mode: 'native' | 'generic' | 'auto'): unknown;
  counters(): Record<string, number>;
  /** Pings every next hop from the lb node: bpf_fib_lookup needs neighbour entries it never creates. */
  refreshNeighbours(): void;
  /** `ip -d link`'s xdp attachment of an lb interface: 'xdp' (native), 'xdpgeneric' or null. */
  xdpOn(dev: string): string | null;
  /** Starts haproxy (HTTP, answers `backend=<name> ... client=<peer>`) on both backends. */
  startServers(dir: string): void;
  teardown(): void;
}

export const sh = (ns: string, argv: string[], input?: string): string =>
  execFileSync('ip', ['netns', 'exec', ns, ...argv], { stdio: ['pipe', 'pipe', 'pipe'], timeout: 60_000, input: input ?? '' }).toString();

/** A counter of a /proc/net table in `ns` (`file`: snmp or netstat; `prefix`: its row, e.g. `Tcp:`, `TcpExt:`), 0
 * when the kernel has no such field. */
export function procCounter(ns: string, file: 'snmp' | 'netstat', prefix: string, field: string): number {
  const lines = sh(ns, ['cat', `/proc/net/${file}`]).split('\n').filter((l) => l.startsWith(prefix));
  return Number(lines[1]!.split(/\s+/)[lines[0]!.split(/\s+/).indexOf(field)] ?? 0);
}

/** TCP resets the lb node's kernel sent (a SNAT reply reaching the kernel instead of xdp_lb is answered so). */
export const lbResets = (lab: TwoArmLab): number => procCounter(lab.ns.lb, 'snmp', 'Tcp:', 'OutRsts');

/** Frames the lb node's veths dropped on receive: where a native redirect into an interface that cannot take XDP
 * frames lands (the driver counts it on the receiving side, `ethtool -S`). */
export function lbRxDrops(lab: TwoArmLab): number {
  let rx = 0;
  for (const d of ['eth0', 'eth1']) for (const m of sh(lab.ns.lb, ['ethtool', '-S', d]).matchAll(/rx_queue_\d+_drops:\s*(\d+)/g)) rx += Number(m[1]);
  return rx;
}

/** The pin of xdp_lb's egress link on the lb node's `dev` (egress-links.ts: xdp_egress<ifindex>_link). */
export function egressLinkPin(lab: TwoArmLab, dev = 'eth1'): string {
  const [l] = JSON.parse(sh(lab.ns.lb, ['ip', '-j', 'link', 'show', 'dev', dev])) as Array<{ ifindex: number }>;
  return join(lab.pinRoot, `xdp_egress${l!.ifindex}_link`);
}

/** `n` HTTP requests from the client to `vip`, each on a new connection; the answers (`backend=.. local=..
 * client=..`) or `FAIL`. */
export function requests(lab: TwoArmLab, vip: string, n: number): string[] {
  const script = `for i in $(seq ${n}); do curl -s --max-time 5 http://${vip}:${TWO_ARM.port}/ || echo FAIL; done`;
  return sh(lab.ns.client, ['bash', '-c', script]).trim().split('\n');
}

/** The desired state of the lb node: dsr-l2 and snat services over both backends, equal shares. */
export function twoArmState(): DesiredState {
  const ring = Array.from({ length: RING_SIZE }, (_, i) => (i % 2) + 1);
  const s = makeState({ reals: { 1: TWO_ARM.backends[0], 2: TWO_ARM.backends[1] }, addresses: [TWO_ARM.lb], conntrackMaxEntries: CONNTRACK_MAX_ENTRIES, services: [
    { id: 1, vip: TWO_ARM.vip.l2, forwarding: 'dsr-l2', ring },
    { id: 2, vip: TWO_ARM.vip.snat, forwarding: 'snat', ring },
  ] });
  return { ...s, interface: 'eth0', snatAddress: TWO_ARM.lb, snatPorts: SNAT_PORTS };
}

/** Builds the lab under namespace prefix `prefix` (e.g. `glb<pid>-2a`). */
export function twoArmLab(prefix: string, opts: { egressNapi: boolean }): TwoArmLab {
  for (const a of [TWO_ARM.client, TWO_ARM.lbClientSide, TWO_ARM.lb, ...TWO_ARM.backends, ...Object.values(TWO_ARM.vip)]) assertAllowed(a, 'two-arm lab');
  const ns = { client: `${prefix}cl`, lb: `${prefix}lb`, sw: `${prefix}sw`, backends: [`${prefix}b1`, `${prefix}b2`] };
  const pinRoot = `/sys/fs/bpf/${ns.lb}`;
  const children: number[] = [];
  const all = [ns.client, ns.lb, ns.sw, ...ns.backends];
  const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const runner = (args: string[], input = '') => {
    const r = execFileSync('nsenter', [`--net=/run/netns/${ns.lb}`, process.execPath, '--import', 'tsx',
      new URL('../../test/lib/dp-runner.ts', import.meta.url).pathname, ...args], { input, timeout: 120_000, stdio: ['pipe', 'pipe', 'pipe'] });
    return JSON.parse(r.toString());
  };
  const lab: TwoArmLab = {
    ns, pinRoot,
    applyDataPlane(mode) {
      try {
        return runner(['lb', pinRoot, 'eth0', mode], JSON.stringify(stateToJson(twoArmState())));
      } catch (e) {
        const err = String((e as { stderr?: Buffer }).stderr ?? e);
        const code = /code: '(\w+)'/.exec(err)?.[1];
        throw Object.assign(new Error(`gitlb data plane (${mode}) on ${ns.lb} eth0: ${/Error: (.*)/.exec(err)?.[1] ?? err.slice(0, 1500)}`), { code });
      }
    },
    counters: () => runner(['lb-counters', pinRoot]),
    refreshNeighbours() {
      for (const a of [TWO_ARM.client, ...TWO_ARM.backends]) sh(ns.lb, ['ping', '-c', '1', '-W', '2', a]);
    },
    xdpOn: (dev) => /mtu \d+ (xdp\w*)/.exec(sh(ns.lb, ['ip', '-d', 'link', 'show', 'dev', dev]))?.[1] ?? null,
    startServers(dir) {
      ns.backends.forEach((b, i) => {
        const cfg = join(dir, `two-arm-b${i + 1}.cfg`);
        const pid = join(dir, `two-arm-b${i + 1}.pid`);
        writeFileSync(cfg, backendHaproxyConfig(`b${i + 1}`, [TWO_ARM.port]));
        sh(b, ['haproxy', '-D', '-p', pid, '-f', cfg]);
        children.push(Number(execFileSync('cat', [pid]).toString().trim()));
      });
    },
    teardown() {
      for (const p of children) try { process.kill(p, 'SIGKILL'); } catch { /* gone */ }
      for (const n of all) try { execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore' }); } catch { /* gone */ }
      rmSync(pinRoot, { recursive: true, force: true });
    },
  };
  try {
    for (const n of all) {
      ip('netns', 'add', n);
      ip('-n', n, 'link', 'set', 'lo', 'up');
    }
    ip('-n', ns.sw, 'link', 'add', 'br0', 'type', 'bridge');
    ip('-n', ns.sw, 'link', 'set', 'br0', 'up');
    ip('link', 'add', 'eth0', 'netns', ns.client, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.lb);
    ip('link', 'add', 'eth1', 'netns', ns.lb, 'type', 'veth', 'peer', 'name', 'plb', 'netns', ns.sw);
    ns.backends.forEach((b, i) => ip('link', 'add', 'eth0', 'netns', b, 'type', 'veth', 'peer', 'name', `pb${i + 1}`, 'netns', ns.sw));
    for (const p of ['plb', 'pb1', 'pb2']) ip('-n', ns.sw, 'link', 'set', p, 'master', 'br0', 'up');
    const addr = (n: string, dev: string, a: string) => { ip('-n', n, 'addr', 'add', a, 'dev', dev); ip('-n', n, 'link', 'set', dev, 'up'); };
    addr(ns.client, 'eth0', `${TWO_ARM.client}/24`);
    addr(ns.lb, 'eth0', `${TWO_ARM.lbClientSide}/24`);
    addr(ns.lb, 'eth1', `${TWO_ARM.lb}/24`);
    ns.backends.forEach((b, i) => addr(b, 'eth0', `${TWO_ARM.backends[i]}/24`));
    for (const dst of ['203.0.113.0/24', '198.51.100.0/24']) ip('-n', ns.client, 'route', 'add', dst, 'via', TWO_ARM.lbClientSide);
    sh(ns.lb, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
    for (const b of ns.backends) {
      ip('-n', b, 'route', 'add', 'default', 'via', TWO_ARM.lb);
      // dsr-l2: the backends hold the VIP on lo and answer the client from it
      ip('-n', b, 'addr', 'add', `${TWO_ARM.vip.l2}/32`, 'dev', 'lo');
      sh(b, ['sysctl', '-q', '-w', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2']);
    }
    // native XDP on veth (docs/datapath.md): full checksums from every sender, NAPI on the peers xdp_lb sends into
    for (const n of [ns.client, ...ns.backends]) sh(n, ['ethtool', '-K', 'eth0', 'tx', 'off']);
    for (const d of ['eth0', 'eth1']) sh(ns.lb, ['ethtool', '-K', d, 'tx', 'off']);
    sh(ns.client, ['ethtool', '-K', 'eth0', 'gro', 'on']);
    sh(ns.sw, ['ethtool', '-K', 'plb', 'gro', opts.egressNapi ? 'on' : 'off']);
  } catch (e) {
    lab.teardown();
    throw e;
  }
  return lab;
}
