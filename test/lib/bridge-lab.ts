// The namespace topology shared by the traffic tests (xdp-traffic, xdp-snat-traffic): client, LB and two
// backends, each in a namespace of this run (glb<pid>-<letter>*), all on one bridge in a namespace of its own.
// The client has an address on the client side (192.0.2.0/24, 2001:db8:c::/64) and reaches the VIPs
// (203.0.113.0/24, 2001:db8:f::/64) through the LB; LB and backends share 198.51.100.0/24 / 2001:db8:1::/64.
// What differs per test (backend VIPs, sysctls, servers, programs) stays in the test.
import { execFileSync, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';

export const ADDR = { client: '192.0.2.2', lbClientSide: '192.0.2.1', lb: '198.51.100.1', b1: '198.51.100.11', b2: '198.51.100.12' };
export const ADDR6 = { client: '2001:db8:c::2', lbClientSide: '2001:db8:c::1', lb: '2001:db8:1::1', b1: '2001:db8:1::11', b2: '2001:db8:1::12' };

/** Runs argv in namespace `ns` (or on the host when null) and returns stdout. */
export const sh = (ns: string | null, argv: string[], input?: string): string =>
  execFileSync(ns ? 'ip' : argv[0]!, ns ? ['netns', 'exec', ns, ...argv] : argv.slice(1),
    { stdio: ['pipe', 'pipe', 'pipe'], timeout: 30_000, input: input ?? '' }).toString();

export interface BridgeLab {
  ns: { br: string; client: string; lb: string; b1: string; b2: string };
  /** Processes the test started in the lab; killed by teardown(). */
  children: ChildProcess[];
  /** Creates the namespaces, the bridge, the veths with their addresses and the client's routes via the LB. */
  setup(): void;
  /** Kills the children, deletes the namespaces and the given bpffs pin directories. Safe to call twice. */
  teardown(pins: string[]): void;
}

/** `letter` keeps the namespaces of different test files apart (e.g. 't' -> glb<pid>-tbr, glb<pid>-tlb, ...). */
export function bridgeLab(letter: string): BridgeLab {
  const p = `glb${process.pid}-${letter}`;
  const ns = { br: `${p}br`, client: `${p}cl`, lb: `${p}lb`, b1: `${p}b1`, b2: `${p}b2` };
  const children: ChildProcess[] = [];
  const link = (where: string, dev: string, brPort: string, addrs: string[]) => {
    sh(null, ['ip', 'link', 'add', dev, 'netns', where, 'type', 'veth', 'peer', 'name', brPort, 'netns', ns.br]);
    sh(ns.br, ['ip', 'link', 'set', brPort, 'master', 'br0', 'up']);
    for (const a of addrs) sh(where, ['ip', 'addr', 'add', a, 'dev', dev, ...(a.includes(':') ? ['nodad'] : [])]);
    sh(where, ['ip', 'link', 'set', dev, 'up']);
    sh(where, ['ip', 'link', 'set', 'lo', 'up']);
  };
  return {
    ns,
    children,
    setup() {
      for (const n of Object.values(ns)) sh(null, ['ip', 'netns', 'add', n]);
      sh(ns.br, ['ip', 'link', 'add', 'br0', 'type', 'bridge']);
      sh(ns.br, ['ip', 'link', 'set', 'br0', 'up']);
      link(ns.client, 'eth0', 'pcl', [`${ADDR.client}/24`, `${ADDR6.client}/64`]);
      link(ns.lb, 'eth0', 'plb', [`${ADDR.lb}/24`, `${ADDR.lbClientSide}/24`, `${ADDR6.lb}/64`, `${ADDR6.lbClientSide}/64`]);
      link(ns.b1, 'eth0', 'pb1', [`${ADDR.b1}/24`, `${ADDR6.b1}/64`]);
      link(ns.b2, 'eth0', 'pb2', [`${ADDR.b2}/24`, `${ADDR6.b2}/64`]);
      // the client reaches the VIPs through the LB
      sh(ns.client, ['ip', 'route', 'add', '203.0.113.0/24', 'via', ADDR.lbClientSide]);
      sh(ns.client, ['ip', '-6', 'route', 'add', '2001:db8:f::/64', 'via', ADDR6.lbClientSide]);
    },
    teardown(pins) {
      for (const c of children) if (c.pid && c.exitCode === null) c.kill('SIGKILL');
      for (const n of Object.values(ns)) try { execFileSync('ip', ['netns', 'del', n], { stdio: 'ignore' }); } catch { /* gone */ }
      for (const pin of pins) rmSync(pin, { recursive: true, force: true });
    },
  };
}
