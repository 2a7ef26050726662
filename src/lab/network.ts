// The lab's network, built from its plan (topology.ts): namespaces, bridges, veth pairs, addresses, sysctls, the
// switch ports' xdp_pass, routes and ECMP, and warm neighbour entries on the lb nodes.
import { join } from 'node:path';
import { addrAddArgs, disableBridgeNetfilter, ipBatch, multipathRouteArgs, nsArgv, nsExec, routeAddArgs, run, setSysctls } from './netns.js';
import { fullNs, PROJECT_ROOT, writeLabState, type LabState } from './state.js';

/** Groups `items` by their `ns`. */
function byNs<T extends { ns: string }>(items: T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) groups.set(item.ns, [...(groups.get(item.ns) ?? []), item]);
  return groups;
}

/**
 * Builds the network in a few rounds of one `ip -batch` process per namespace (a lab is ~150 `ip` commands;
 * one process each is slow on a busy machine): namespaces; links; link settings and addresses; routes.
 */
export async function buildNetwork(state: LabState, vipsOnLo: boolean, log: (s: string) => void): Promise<void> {
  const { plan } = state;
  const ns = (short: string) => fullNs(state, short);
  // Recorded before they exist, so a half-built lab is still removed completely by `down`.
  state.namespaces.push(...plan.namespaces.map((n) => ns(n.short)));
  writeLabState(state);
  await ipBatch(null, plan.namespaces.map((n) => ['netns', 'add', ns(n.short)]));
  log(`namespaces: ${state.namespaces.join(' ')}`);

  const perNs = (fill: (short: string, cmds: string[][]) => void) =>
    Promise.all(
      plan.namespaces.map((n) => {
        const cmds: string[][] = [];
        fill(n.short, cmds);
        return ipBatch(ns(n.short), cmds);
      }),
    );
  const ends = plan.links.flatMap((l) => [l.a, l.b]);

  // Round 1: bridges, and each veth pair from its `a` side with the peer placed straight into its namespace.
  await perNs((short, cmds) => {
    for (const b of plan.bridges.filter((x) => x.ns === short)) {
      cmds.push(['link', 'add', b.name, 'type', 'bridge', 'stp_state', '0', 'forward_delay', '0']);
    }
    for (const l of plan.links.filter((x) => x.a.ns === short)) {
      cmds.push(['link', 'add', l.a.name, 'type', 'veth', 'peer', 'name', l.b.name, 'netns', ns(l.b.ns)]);
    }
  });
  // Round 2: loopback and bridges up, ports enslaved, addresses, links up.
  await perNs((short, cmds) => {
    cmds.push(['link', 'set', 'lo', 'up']);
    for (const b of plan.bridges.filter((x) => x.ns === short)) cmds.push(['link', 'set', b.name, 'up']);
    for (const end of ends.filter((e) => e.ns === short)) {
      if (end.master) cmds.push(['link', 'set', end.name, 'master', end.master]);
      for (const addr of end.addrs) cmds.push(addrAddArgs(end.name, addr));
      cmds.push(['link', 'set', end.name, 'up']);
    }
    if (vipsOnLo) for (const l of plan.loAddrs.filter((x) => x.ns === short)) for (const a of l.addrs) cmds.push(addrAddArgs('lo', a));
  });
  await Promise.all([...byNs(plan.sysctls)].map(([short, list]) => setSysctls(ns(short), list.map((x) => [x.key, x.value]))));
  await Promise.all([...new Set(plan.bridges.map((b) => b.ns))].map((short) => disableBridgeNetfilter(ns(short))));
  await Promise.all(
    ends.map((end) => {
      // Senders into a native-XDP veth must not leave checksums partial: XDP_TX'd frames would carry them
      // unfinished and be dropped. Cheap in a lab, so off everywhere.
      const features = ['tx', 'off'];
      // Native XDP_TX on a veth reaches the peer only if the peer runs NAPI, which GRO (or an XDP program
      // there) switches on. The lb nodes' peers are switch ports; GRO on every switch port keeps it uniform.
      if (end.master) features.push('gro', 'on');
      return run(nsArgv(ns(end.ns), ['ethtool', '-K', end.name, ...features]));
    }),
  );
  // The lb nodes' switch ports also run an XDP_PASS program (build/bpf/xdp_pass.o): the documented way to give a
  // veth peer NAPI for native XDP_TX (docs/datapath.md, "Native XDP"); the daemons' forwarding probe checks it.
  const lbNs = new Set(plan.nodes.filter((n) => n.role === 'lb').map((n) => n.ns));
  const passObj = join(PROJECT_ROOT, 'build', 'bpf', 'xdp_pass.o');
  await Promise.all(
    plan.links.flatMap((l) => [[l.a, l.b], [l.b, l.a]] as const)
      .filter(([port, other]) => port.master && lbNs.has(other.ns))
      .map(async ([port]) => {
        // `ip netns exec` (sysfs: true) gives iproute2 a mount namespace of its own: the bpffs work directories it
        // creates on load (tc/globals, the ip and xdp links) then never land in the host's /sys/fs/bpf.
        const attach = ['ip', 'link', 'set', 'dev', port.name, 'xdpdrv', 'obj', passObj, 'sec', 'xdp'];
        const r = await run(nsArgv(ns(port.ns), attach, { sysfs: true }));
        if (r.code !== 0) log(`xdp_pass on switch port ${port.name}: ${r.stderr.trim()} (native XDP on the lb nodes may fall back to generic)`);
      }),
  );
  // Round 3: routes (their next hops are reachable now).
  await perNs((short, cmds) => {
    for (const r of plan.routes.filter((x) => x.ns === short)) cmds.push(routeAddArgs(r.dest, r.spec, r.type));
    for (const m of plan.multipath.filter((x) => x.ns === short)) cmds.push(multipathRouteArgs(m.dest, m.hops));
  });
  await warmNeighbours(state);
  // With BGP the router has no static ECMP route: it learns the VIPs from the lb nodes' BIRD once they announce.
  const ecmp = plan.multipath.map((m) => m.dest).join(', ') || (plan.bird ? 'learnt by BGP once BIRD runs' : 'none');
  log(`links, routes and ECMP (${ecmp}) in place`);
}

/**
 * Resolves every backend address on every lb node (one bounded ping each). The XDP program takes a real's MAC
 * from the kernel's neighbour table via bpf_fib_lookup and drops the packet when there is no entry yet; a
 * freshly built lab has none.
 */
export async function warmNeighbours(state: LabState): Promise<void> {
  const lbs = state.plan.nodes.filter((n) => n.role === 'lb');
  const targets = state.plan.nodes.filter((n) => n.role === 'backend').flatMap((n) => n.addresses);
  const pings = lbs.flatMap((lb) =>
    targets.map((addr) =>
      nsExec(fullNs(state, lb.ns), ['ping', ...(addr.includes(':') ? ['-6'] : []), '-c', '1', '-W', '1', addr], { timeoutMs: 3000 }),
    ),
  );
  await Promise.all(pings);
}
