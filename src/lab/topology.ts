// The lab topology as data: from the config's nodes and services to a plan of namespaces, links, addresses,
// routes and servers. Pure (no I/O); `lab.ts` applies the plan. Keeping it pure means the plan can be printed
// (`gitlb lab up --dry-run`) and checked in tests without building anything.
//
//   client ──(192.0.2.0/24)── router ──┐
//                                      │ one L2 segment (198.51.100.0/24): a bridge in namespace `sw`
//      lb1, lb2, be1..beN, git ────────┘
//
// The router reaches the VIPs over an ECMP multipath route via the lb nodes (L4 hash): learnt by BGP when the config
// has BGP settings (BIRD on the router and on every lb node, docs/bgp.md), else a static multipath route. Every lb and backend sits
// on the one bridged segment, because L2 DSR with XDP_TX sends frames back out of the interface they came in on
// and needs the backends reachable at L2. Backends route 192.0.2.0/24 via the router, so DSR replies go straight
// to the client without passing an lb node.
import type { ConfigModel } from '../render/model.js';
import { assertAllowed, hostInNetwork, inCidr, isIpv6, networkOf, splitCidr } from './addr.js';
import { ECMP_FIVE_TUPLE_FIELDS } from './netns.js';

/** Fixed addresses of the lab's own plumbing (the config describes the lb and backend nodes). */
export const LAB_NETS = {
  clientV4: '192.0.2.0/24',
  clientV6: '2001:db8:c1::/64',
  segmentV4: '198.51.100.0/24',
  /** Used only when no node has an IPv6 address to derive the segment's /64 from. */
  segmentV6Default: '2001:db8:100::/64',
  /** Host numbers on their networks. */
  routerHost: 1,
  gitHost: 2,
  firstClientHost: 10,
} as const;

export const DEFAULT_CLIENT_COUNT = 5;
export const GIT_PORT = 8080;
export const GIT_REPO_NAME = 'config.git';
/** Ports the backend servers always serve, so the lab is useful before any service is configured. */
export const DEFAULT_TCP_PORTS = [80];
export const DEFAULT_UDP_PORTS = [9000];

export interface LabNode {
  name: string;
  role: 'lb' | 'backend';
  /** Interface name inside the node's namespace (the config's `interface`). */
  interface: string;
  addresses: string[];
  snatAddress?: string;
  allowedVips: string[];
  /** Backends: VIPs of the services that list one of its addresses as a real (held on `lo` for DSR). */
  vips: string[];
  /** Backends: ports to serve (targetPort or port, per protocol, plus health-check ports). */
  tcpPorts: number[];
  udpPorts: number[];
}

export interface LabSpec {
  nodes: LabNode[];
  clientCount: number;
  /** BGP settings of the config (Cluster.spec.bgp and the lb nodes' Node.spec.bgp); absent: static ECMP. */
  bgp?: LabBgp;
  /** The router's BGP daemon when the lab routes by BGP (default BIRD). */
  router?: LabRouter;
}

export interface LabBgp {
  localAsn: number;
  holdTime: number;
  keepaliveTime: number;
  lbs: { node: string; routerId: string; peers: { address: string; asn: number }[] }[];
}

/** The router's BIRD sessions to the lb nodes' BIRDs, and each lb node's BIRD (its generated file comes from gitlb). */
export interface PlannedBird {
  routerId: string;
  routerAsn: number;
  holdTime: number;
  keepaliveTime: number;
  sessions: { node: string; family: 4 | 6; lbAddress: string; routerAddress: string; lbAsn: number }[];
  lbs: { node: string; ns: string; routerId: string }[];
  /** Which BGP daemon the lab router runs (the lb nodes always run BIRD): absent means BIRD (docs/lab.md). */
  router?: LabRouter;
}

export type LabRouter = 'bird' | 'frr';

/** The kernel route protocol the router's daemon installs the VIP routes with: BIRD's `bird`, zebra's `bgp`. */
export function routerRouteProto(bird: PlannedBird | null | undefined): 'bird' | 'bgp' {
  return bird?.router === 'frr' ? 'bgp' : 'bird';
}

export type NsRole = 'client' | 'router' | 'switch' | 'lb' | 'backend' | 'git';

export interface PlannedNs {
  /** Short name; the real namespace is `<prefix><short>`. */
  short: string;
  role: NsRole;
  node?: string;
}

export interface PlannedEnd {
  ns: string; // short name
  name: string;
  addrs: string[];
  master?: string;
}

export interface LabPlan {
  namespaces: PlannedNs[];
  bridges: { ns: string; name: string }[];
  links: { a: PlannedEnd; b: PlannedEnd }[];
  sysctls: { ns: string; key: string; value: string }[];
  routes: { ns: string; dest: string; spec: string[]; type?: 'unreachable' }[];
  multipath: { ns: string; dest: string; hops: { via: string; dev: string }[] }[];
  /** Addresses on `lo` (backends' VIPs for DSR). */
  loAddrs: { ns: string; addrs: string[] }[];
  servers: { ns: string; node: string; tcpPorts: number[]; udpPorts: number[] }[];
  git: { ns: string; address: string; port: number };
  client: { ns: string; v4: string[]; v6: string[] };
  router: { ns: string; clientSide: { v4: string; v6: string }; segment: { v4: string; v6: string } };
  nodes: { name: string; role: 'lb' | 'backend'; ns: string; interface: string; addresses: string[]; switchPort: string }[];
  /** BGP routing (router and lb nodes run BIRD) instead of static multipath routes; absent in older state files. */
  bird?: PlannedBird | null;
}

/** The node's namespace short name: `lb-1` -> `lb1`. */
export function nodeNsShort(nodeName: string): string {
  return nodeName.replace(/[^a-z0-9]/gi, '').toLowerCase().slice(0, 12) || 'node';
}

const uniqSorted = (xs: number[]) => [...new Set(xs)].sort((a, b) => a - b);

/** Derives the lab spec from a validated config: the nodes, and for each backend the VIPs and ports it serves. */
export function labSpecFromModel(model: ConfigModel, clientCount = DEFAULT_CLIENT_COUNT): LabSpec {
  const nodes: LabNode[] = model.nodes.map((doc) => {
    const spec = doc.spec;
    const mine = (svcAddr: string) => spec.addresses.includes(svcAddr);
    const services = spec.role === 'backend' ? model.services.filter((s) => s.spec.reals.some((r) => mine(r.address))) : [];
    const ports = (proto: 'TCP' | 'UDP') =>
      services.flatMap((s) => s.spec.ports.filter((p) => p.protocol === proto).map((p) => p.targetPort ?? p.port));
    const healthPorts = services.flatMap((s) => {
      const hc = s.spec.healthCheck;
      if (hc.type === 'none') return [];
      const first = s.spec.ports.find((p) => p.protocol === 'TCP');
      const port = hc.port ?? first?.targetPort ?? first?.port;
      return port === undefined ? [] : [port];
    });
    return {
      name: doc.metadata.name,
      role: spec.role,
      interface: spec.interface,
      addresses: spec.addresses,
      ...(spec.snatAddress ? { snatAddress: spec.snatAddress } : {}),
      allowedVips: spec.allowedVips,
      // SNAT services are answered from the real's own address; only DSR and hybrid need the VIP on the real.
      vips: [...new Set(services.filter((s) => s.spec.dispatch.mode !== 'snat').map((s) => s.spec.vip))].sort(),
      tcpPorts: spec.role === 'backend' ? uniqSorted([...DEFAULT_TCP_PORTS, ...ports('TCP'), ...healthPorts]) : [],
      udpPorts: spec.role === 'backend' ? uniqSorted([...(ports('UDP').length ? ports('UDP') : DEFAULT_UDP_PORTS)]) : [],
    };
  });
  const cb = model.cluster.spec.bgp;
  const lbs = model.nodes.filter((n) => n.spec.role === 'lb' && n.spec.bgp);
  const bgp: LabBgp | undefined =
    cb && lbs.length
      ? {
          localAsn: cb.localAsn,
          holdTime: cb.holdTime,
          keepaliveTime: cb.keepaliveTime,
          lbs: lbs.map((n) => ({ node: n.metadata.name, routerId: n.spec.bgp!.routerId, peers: n.spec.bgp!.peers.map((p) => ({ address: p.address, asn: p.asn })) })),
        }
      : undefined;
  return { nodes, clientCount, ...(bgp ? { bgp } : {}) };
}

/** The lab's router is every lb node's BGP peer: the peers must be its addresses and agree on its AS. */
function planBird(bgp: LabBgp, lbs: LabNode[], router: { v4: string; v6: string }, routerId: string): PlannedBird {
  const sessions: PlannedBird['sessions'] = [];
  const asns = new Set<number>();
  for (const lb of bgp.lbs) {
    const node = lbs.find((n) => n.name === lb.node);
    if (!node) continue;
    for (const peer of lb.peers) {
      const family = isIpv6(peer.address) ? 6 : 4;
      const routerAddress = family === 6 ? router.v6 : router.v4;
      if (peer.address !== routerAddress)
        throw new Error(`node ${lb.node}: BGP peer ${peer.address} is not the lab router (${router.v4}, ${router.v6})`);
      const lbAddress = node.addresses.find((a) => isIpv6(a) === (family === 6));
      if (!lbAddress) throw new Error(`node ${lb.node}: no IPv${family} address to peer with the lab router from`);
      asns.add(peer.asn);
      sessions.push({ node: lb.node, family, lbAddress, routerAddress, lbAsn: bgp.localAsn });
    }
  }
  if (asns.size > 1) throw new Error(`the lb nodes' BGP peers give the lab router different AS numbers (${[...asns].join(', ')})`);
  return {
    routerId,
    routerAsn: [...asns][0] ?? bgp.localAsn,
    holdTime: bgp.holdTime,
    keepaliveTime: bgp.keepaliveTime,
    sessions,
    lbs: bgp.lbs.filter((b) => lbs.some((n) => n.name === b.node)).map((b) => ({ node: b.node, ns: nodeNsShort(b.node), routerId: b.routerId })),
  };
}

function hostPrefix(addr: string): string {
  return `${addr}/${isIpv6(addr) ? 128 : 32}`;
}

/** Builds the plan. Throws (naming the node and address) if anything falls outside the test ranges. */
export function planLab(spec: LabSpec): LabPlan {
  const lbs = spec.nodes.filter((n) => n.role === 'lb').sort((a, b) => a.name.localeCompare(b.name));
  const backends = spec.nodes.filter((n) => n.role === 'backend').sort((a, b) => a.name.localeCompare(b.name));
  if (lbs.length === 0) throw new Error('lab: the config has no node with role lb');
  if (backends.length === 0) throw new Error('lab: the config has no node with role backend');

  const segV4 = splitCidr(LAB_NETS.segmentV4);
  const nodeV6 = spec.nodes.flatMap((n) => n.addresses.filter(isIpv6));
  const segV6 = nodeV6.length ? splitCidr(networkOf(nodeV6[0]!, 64)) : splitCidr(LAB_NETS.segmentV6Default);
  const segV6Cidr = `${segV6.addr}/${segV6.len}`;

  const routerSegV4 = hostInNetwork(segV4.addr, segV4.len, LAB_NETS.routerHost);
  const routerSegV6 = hostInNetwork(segV6.addr, segV6.len, LAB_NETS.routerHost);
  const gitV4 = hostInNetwork(segV4.addr, segV4.len, LAB_NETS.gitHost);
  const cliV4 = splitCidr(LAB_NETS.clientV4);
  const cliV6 = splitCidr(LAB_NETS.clientV6);
  const routerCliV4 = hostInNetwork(cliV4.addr, cliV4.len, LAB_NETS.routerHost);
  const routerCliV6 = hostInNetwork(cliV6.addr, cliV6.len, LAB_NETS.routerHost);
  const clientsV4: string[] = [];
  const clientsV6: string[] = [];
  for (let i = 0; i < spec.clientCount; i++) {
    clientsV4.push(hostInNetwork(cliV4.addr, cliV4.len, LAB_NETS.firstClientHost + i));
    // Same digits in IPv6 as in IPv4 (192.0.2.10 <-> 2001:db8:c1::10), for readability.
    clientsV6.push(hostInNetwork(cliV6.addr, cliV6.len, parseInt(String(LAB_NETS.firstClientHost + i), 16)));
  }

  const reserved = new Map<string, string>([
    [routerSegV4, 'router'],
    [routerSegV6, 'router'],
    [gitV4, 'git server'],
  ]);
  const seen = new Map<string, string>();
  const placeNodeAddr = (node: LabNode, addr: string): string => {
    const what = `node ${node.name} address`;
    assertAllowed(addr, what);
    const owner = reserved.get(addr) ?? seen.get(addr);
    if (owner) throw new Error(`${what} ${addr} is already used by ${owner}`);
    seen.set(addr, node.name);
    if (!isIpv6(addr) && inCidr(addr, LAB_NETS.segmentV4)) return `${addr}/${segV4.len}`;
    if (isIpv6(addr) && inCidr(addr, segV6Cidr)) return `${addr}/${segV6.len}`;
    throw new Error(`${what} ${addr} is not on the lab's lb/backend segment (${LAB_NETS.segmentV4}, ${segV6Cidr})`);
  };

  const plan: LabPlan = {
    namespaces: [
      { short: 'client', role: 'client' },
      { short: 'router', role: 'router' },
      { short: 'sw', role: 'switch' },
      { short: 'git', role: 'git' },
    ],
    bridges: [{ ns: 'sw', name: 'br0' }],
    links: [],
    sysctls: [],
    routes: [],
    multipath: [],
    loAddrs: [],
    servers: [],
    git: { ns: 'git', address: gitV4, port: GIT_PORT },
    client: { ns: 'client', v4: clientsV4, v6: clientsV6 },
    router: {
      ns: 'router',
      clientSide: { v4: routerCliV4, v6: routerCliV6 },
      segment: { v4: routerSegV4, v6: routerSegV6 },
    },
    nodes: [],
  };

  // client <-> router
  plan.links.push({
    a: { ns: 'client', name: 'eth0', addrs: [...clientsV4.map((a) => `${a}/${cliV4.len}`), ...clientsV6.map((a) => `${a}/${cliV6.len}`)] },
    b: { ns: 'router', name: 'cli0', addrs: [`${routerCliV4}/${cliV4.len}`, `${routerCliV6}/${cliV6.len}`] },
  });
  plan.routes.push({ ns: 'client', dest: 'default', spec: ['via', routerCliV4] });
  plan.routes.push({ ns: 'client', dest: '::/0', spec: ['via', routerCliV6] });

  // router and git on the segment
  plan.links.push({
    a: { ns: 'router', name: 'sw0', addrs: [`${routerSegV4}/${segV4.len}`, `${routerSegV6}/${segV6.len}`] },
    b: { ns: 'sw', name: 'p-router', addrs: [], master: 'br0' },
  });
  plan.links.push({
    a: { ns: 'git', name: 'eth0', addrs: [`${gitV4}/${segV4.len}`] },
    b: { ns: 'sw', name: 'p-git', addrs: [], master: 'br0' },
  });
  for (const key of ['net.ipv4.ip_forward', 'net.ipv6.conf.all.forwarding']) plan.sysctls.push({ ns: 'router', key, value: '1' });
  // L4 hash, so flows (not host pairs) spread over the lb nodes. Policy 3 with explicit 5-tuple fields rather
  // than policy 1, which would reuse the client socket's random hash carried across veth (see setEcmpHashPolicy).
  for (const family of ['ipv4', 'ipv6']) {
    plan.sysctls.push({ ns: 'router', key: `net.${family}.fib_multipath_hash_fields`, value: ECMP_FIVE_TUPLE_FIELDS });
    plan.sysctls.push({ ns: 'router', key: `net.${family}.fib_multipath_hash_policy`, value: '3' });
  }

  // lb and backend nodes
  for (const node of [...lbs, ...backends]) {
    const short = nodeNsShort(node.name);
    if (plan.namespaces.some((n) => n.short === short)) throw new Error(`node ${node.name}: namespace name '${short}' collides`);
    plan.namespaces.push({ short, role: node.role, node: node.name });
    const addrs = node.addresses.map((a) => placeNodeAddr(node, a));
    if (node.snatAddress) {
      assertAllowed(node.snatAddress, `node ${node.name} snatAddress`);
      addrs.push(hostPrefix(node.snatAddress));
    }
    const switchPort = `p-${short}`.slice(0, 15);
    plan.links.push({ a: { ns: short, name: node.interface, addrs }, b: { ns: 'sw', name: switchPort, addrs: [], master: 'br0' } });
    plan.nodes.push({ name: node.name, role: node.role, ns: short, interface: node.interface, addresses: node.addresses, switchPort });
    // Lab plumbing only: return traffic for clients goes through the router, never through another lb node.
    if (node.addresses.some((a) => !isIpv6(a))) plan.routes.push({ ns: short, dest: 'default', spec: ['via', routerSegV4] });
    if (node.addresses.some(isIpv6)) plan.routes.push({ ns: short, dest: '::/0', spec: ['via', routerSegV6] });
    plan.sysctls.push({ ns: short, key: 'net.ipv4.conf.all.rp_filter', value: '0' });
    plan.sysctls.push({ ns: short, key: 'net.ipv4.conf.default.rp_filter', value: '0' });
    if (node.role === 'lb') {
      // bpf_fib_lookup (how the XDP program finds a real's next hop and MAC) answers "forwarding disabled"
      // unless the node forwards.
      plan.sysctls.push({ ns: short, key: 'net.ipv4.ip_forward', value: '1' });
      plan.sysctls.push({ ns: short, key: 'net.ipv6.conf.all.forwarding', value: '1' });
      // VIP packets the data plane passes up (unknown port, not yet programmed) must end here, not be forwarded
      // back to the router by the default route and loop until their TTL runs out.
      for (const range of node.allowedVips) {
        assertAllowed(range, `node ${node.name} allowedVips`);
        plan.routes.push({ ns: short, dest: range, spec: [], type: 'unreachable' });
      }
    }
    if (node.role === 'backend') {
      // The VIP lives on lo; the backend must neither answer ARP for it nor use it as an ARP source.
      plan.sysctls.push({ ns: short, key: 'net.ipv4.conf.all.arp_ignore', value: '1' });
      plan.sysctls.push({ ns: short, key: 'net.ipv4.conf.all.arp_announce', value: '2' });
      for (const vip of node.vips) assertAllowed(vip, `node ${node.name} VIP`);
      if (node.vips.length) plan.loAddrs.push({ ns: short, addrs: node.vips.map(hostPrefix) });
      plan.servers.push({ ns: short, node: node.name, tcpPorts: node.tcpPorts, udpPorts: node.udpPorts });
    }
  }

  if (spec.bgp) {
    // The lb nodes announce the VIPs they can serve; the router's BIRD merges the paths into ECMP routes.
    plan.bird = { ...planBird(spec.bgp, lbs, plan.router.segment, routerSegV4), router: spec.router ?? 'bird' };
    return plan;
  }
  // ECMP: each VIP range an lb node may serve, via every lb node that may serve it.
  const ranges = [...new Set(lbs.flatMap((n) => n.allowedVips))].sort();
  for (const range of ranges) {
    assertAllowed(range, 'allowedVips');
    const v6 = isIpv6(range);
    const hops = lbs
      .filter((n) => n.allowedVips.includes(range))
      .flatMap((n) => n.addresses.filter((a) => isIpv6(a) === v6).slice(0, 1))
      .map((via) => ({ via, dev: 'sw0' }));
    if (hops.length) plan.multipath.push({ ns: 'router', dest: range, hops });
  }
  return plan;
}

/** Every address the plan assigns or routes to, for the allow-list check in tests. */
export function planAddresses(plan: LabPlan): string[] {
  return [
    ...plan.links.flatMap((l) => [...l.a.addrs, ...l.b.addrs]),
    ...plan.loAddrs.flatMap((l) => l.addrs),
    ...plan.multipath.flatMap((m) => [m.dest, ...m.hops.map((h) => h.via)]),
    ...plan.routes.flatMap((r) => r.spec.filter((s) => /[.:]/.test(s))),
    ...(plan.bird?.sessions.flatMap((x) => [x.lbAddress, x.routerAddress]) ?? []),
    plan.git.address,
  ];
}
