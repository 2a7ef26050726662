// The lb node's side of `healthCheck.via: vip` (docs/health.md): build/bpf/tc_vip_probe.o on TC egress and
// ingress of the node's interface, and its maps probe_out ((real, port, probe source port) -> (VIP, encap, ports)) and
// probe_in ((VIP, port, probe source port) -> real), probe6_out and probe6_in the same for IPv6. Not pinned: the programs only serve this process's probes,
// so they leave with the process (their links close with the fds).
import { BpfObject, type BpfMap, type TcAttachment } from './libbpf.js';
import { parseIp } from '../render/ip.js';

export const VIP_PROBE_OBJECT = 'tc_vip_probe';
/** max_entries of probe_out and probe_in (tc_vip_probe.c). */
export const MAX_VIP_PROBE_ROUTES = 4096;

export interface VipProbeRoute {
  vip: string;
  port: number;
  sourcePort: number;
  real: string;
  encap: 'l2' | 'ipip' | 'ipopt' | 'gue';
  /** ipip, gue outer source; absent: the probe's own source address. */
  outerSource?: string;
  /** ipopt: the service port the option names (`port` is the real's targetPort, where the probe connects). */
  vipPort?: number;
  /** gue: the UDP destination port of the tunnel (Cluster spec.gue.port). */
  guePort?: number;
}

const ENCAP = { l2: 1, ipip: 2, ipopt: 3, gue: 4 } as const;

function ipv4(addr: string, what: string): Buffer {
  const parts = addr.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) throw new Error(`vip probe: ${what} ${addr} is not an IPv4 address`);
  return Buffer.from(parts);
}

/** struct probe_key: the peer address (egress: the real, ingress: the VIP), the service port, the source port. */
function encodeKey(addr: string, what: string, r: VipProbeRoute): Buffer {
  const b = Buffer.alloc(8);
  ipv4(addr, what).copy(b, 0);
  b.writeUInt16BE(r.port, 4);
  b.writeUInt16BE(r.sourcePort, 6);
  return b;
}

/** probe_out entry: the probe leaving towards the real becomes a packet to the VIP (ipopt: carries the VIP:port
 * option). struct probe_out {vip, outer_src, encap u32, vip_port be16, gue_port be16}. */
export function encodeOut(r: VipProbeRoute): [Buffer, Buffer] {
  const v = Buffer.alloc(16);
  ipv4(r.vip, 'VIP').copy(v, 0);
  if (r.outerSource) ipv4(r.outerSource, 'outer source').copy(v, 4);
  v.writeUInt32LE(ENCAP[r.encap], 8);
  if (r.encap === 'ipopt') v.writeUInt16BE(vipPortOf(r), 12);
  if (r.encap === 'gue') v.writeUInt16BE(guePortOf(r), 14);
  return [encodeKey(r.real, 'real', r), v];
}

/** probe_in entry: the real's answer from the VIP is given back the real's address (ipopt: and the targetPort the
 * probe connected to, the answer coming from the service port). struct probe_in {real, real_port be16, pad}. */
export function encodeIn(r: VipProbeRoute): [Buffer, Buffer] {
  const v = Buffer.alloc(8);
  ipv4(r.real, 'real').copy(v, 0);
  if (r.encap !== 'ipopt') return [encodeKey(r.vip, 'VIP', r), v];
  v.writeUInt16BE(r.port, 4);
  return [encodeKey(r.vip, 'VIP', { ...r, port: vipPortOf(r) }), v];
}

/** IPv6 (l2, ipip): struct probe6_key {addr[16], port be16, sport be16}. */
function encodeKey6(addr: string, r: VipProbeRoute): Buffer {
  const b = Buffer.alloc(20);
  ipv6(addr).copy(b, 0);
  b.writeUInt16BE(r.port, 16);
  b.writeUInt16BE(r.sourcePort, 18);
  return b;
}

function ipv6(addr: string): Buffer {
  const ip = parseIp(addr);
  if (!ip || ip.family !== 6) throw new Error(`vip probe: ${addr} is not an IPv6 address`);
  return Buffer.from(ip.bytes);
}

/** probe6_out {vip[16], outer_src[16] (zero: the probe's own source), encap u32, vip_port be16, gue_port be16}. */
export function encodeOut6(r: VipProbeRoute): [Buffer, Buffer] {
  const v = Buffer.alloc(40);
  ipv6(r.vip).copy(v, 0);
  if (r.outerSource) ipv6(r.outerSource).copy(v, 16);
  v.writeUInt32LE(ENCAP[r.encap], 32);
  if (r.encap === 'ipopt') v.writeUInt16BE(vipPortOf(r), 36);
  if (r.encap === 'gue') v.writeUInt16BE(guePortOf(r), 38);
  return [encodeKey6(r.real, r), v];
}

/** probe6_in {real[16], real_port be16 (ipopt: the targetPort; else 0), pad}. */
export function encodeIn6(r: VipProbeRoute): [Buffer, Buffer] {
  const v = Buffer.alloc(20);
  ipv6(r.real).copy(v, 0);
  if (r.encap !== 'ipopt') return [encodeKey6(r.vip, r), v];
  v.writeUInt16BE(r.port, 16);
  return [encodeKey6(r.vip, { ...r, port: vipPortOf(r) }), v];
}

function guePortOf(r: VipProbeRoute): number {
  // a zero port would send the probe to UDP port 0 (the program refuses such a route: never reaches the real)
  if (!r.guePort) throw new Error(`vip probe: a gue route to ${r.real}:${r.port} needs the GUE port`);
  return r.guePort;
}

function vipPortOf(r: VipProbeRoute): number {
  if (!r.vipPort) throw new Error(`vip probe: an ipopt route to ${r.real}:${r.port} needs the service port`);
  return r.vipPort;
}

export class VipProbePath {
  private constructor(private readonly obj: BpfObject, private readonly links: TcAttachment[]) {}

  /** Loads the programs and attaches them to TC ingress and egress of `ifname` (in the caller's namespace). */
  static async attach(ifname: string, objectPath = VIP_PROBE_OBJECT): Promise<VipProbePath> {
    const obj = await BpfObject.load(objectPath);
    const links: TcAttachment[] = [];
    try {
      // ingress first: an answer must never find the egress rewrite without its way back
      links.push(obj.program('vip_probe_ingress').attachTc(ifname, 'ingress'));
      links.push(obj.program('vip_probe_egress').attachTc(ifname, 'egress'));
      return new VipProbePath(obj, links);
    } catch (e) {
      for (const l of links) l.detach();
      obj.close();
      throw e;
    }
  }

  /** Makes probe_in and probe_out (IPv6 routes: probe6_in, probe6_out) exactly `want` (ingress entries written
   * before egress ones, removed after). */
  set(want: readonly VipProbeRoute[]): void {
    if (want.length > MAX_VIP_PROBE_ROUTES) throw new Error(`vip probe: ${want.length} routes exceed the limit of ${MAX_VIP_PROBE_ROUTES}`);
    const into = (map: BpfMap, entries: [Buffer, Buffer][]) => {
      for (const [k, v] of entries) map.update(k, v);
      return new Set(entries.map(([k]) => k.toString('hex')));
    };
    const prune = (map: BpfMap, keep: Set<string>) => {
      for (const k of map.keys()) if (!keep.has(k.toString('hex'))) map.delete(k);
    };
    const v4 = want.filter((r) => !r.real.includes(':'));
    const v6 = want.filter((r) => r.real.includes(':'));
    const keepIn = into(this.obj.map('probe_in'), v4.map(encodeIn));
    const keepIn6 = into(this.obj.map('probe6_in'), v6.map(encodeIn6));
    const keepOut = into(this.obj.map('probe_out'), v4.map(encodeOut));
    const keepOut6 = into(this.obj.map('probe6_out'), v6.map(encodeOut6));
    prune(this.obj.map('probe_out'), keepOut);
    prune(this.obj.map('probe6_out'), keepOut6);
    prune(this.obj.map('probe_in'), keepIn);
    prune(this.obj.map('probe6_in'), keepIn6);
  }

  close(): void {
    try {
      for (const l of this.links) l.detach();
    } finally {
      this.obj.close();
    }
  }
}
