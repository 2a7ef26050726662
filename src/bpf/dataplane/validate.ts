// Whether a data plane can hold a desired state, checked once per plan before anything is written
// (src/reconciler/converge.ts): the lb data plane's own limits (map capacities of lb_consts.h, ring sizes, ids, the
// outer sources lb_config holds), and for every data plane the role and interface it was opened for. Errors name
// the field and carry code DataPlaneRefused (errno EINVAL): the revision cannot be applied on this node, retrying it
// cannot help (src/errors.ts).
import { GitlbError } from '../../errors.js';
import type { DesiredState } from '../../render/state.js';
import { DATAPLANE_LIMITS } from '../../render/config/limits.js';
import { canonicalCidr, parseCidr } from '../../render/ip.js';
import { desiredMarkers } from '../../render/ops.js';
import { MODE, familyOf, MAX_SRC4 } from './codec.js';
import { MAX_RING_ENTRIES } from './rings.js';
import type { DataPlaneTarget } from './types.js';
import { U32Table } from './u32-table.js';

/** A desired state (or map content) the lb data plane cannot hold: code DataPlaneRefused (errno EINVAL), never retried. */
export function einval(message: string): never {
  throw new GitlbError('DataPlaneRefused', message, { errno: 'EINVAL' });
}

/** Map capacities of lb_maps.h (LB_MAX_REALS, LB_MAX_SERVICES, LB_MAX_VIPS: listeners + address markers). */
export const LB_CAPACITY = {
  reals: DATAPLANE_LIMITS.lbReals, services: DATAPLANE_LIMITS.lbServices, vipEntries: DATAPLANE_LIMITS.lbVipEntries,
} as const;

/**
 * Rejects a desired state the data plane cannot represent, naming the field. Ring contents are checked only for
 * the services in `rings` (default: all): the plan checks the rings it is about to write, not 10 M unchanged entries.
 */
export function validateDesired(d: DesiredState, rings?: ReadonlySet<number>): void {
  const reals = new U32Table(d.reals.length);
  for (const r of d.reals) if (Number.isInteger(r.id) && r.id >= 0 && r.id <= 0xffffffff) reals.set(r.id, 1);
  for (const r of d.reals) {
    if (!Number.isInteger(r.id) || r.id < 1 || r.id > 0xffffffff) einval(`reals[id=${r.id}].id: must be a u32 >= 1`);
    if (familyOf(r.address) !== r.family) einval(`reals[id=${r.id}].family: ${r.family} does not match ${r.address}`);
  }
  const services = new Set<number>();
  for (const s of d.services) {
    if (!Number.isInteger(s.id) || s.id < 1 || s.id > 0xffffffff) einval(`services[${s.name}].id: must be a u32 >= 1`);
    if (s.ring.length !== s.tableSize) einval(`services[${s.name}].ring: length ${s.ring.length} != tableSize ${s.tableSize}`);
    if (!rings || rings.has(s.id)) {
      let last = 0; // rings are long runs of few ids: look each id up once per run
      for (let i = 0; i < s.ring.length; i++) {
        const id = s.ring[i]!;
        if (id === last) continue;
        if (id !== 0 && reals.get(id) === -1) einval(`services[${s.name}].ring[${i}]: real id ${id} is not in reals`);
        last = id;
      }
    }
    services.add(s.id);
  }
  for (const v of d.vips) {
    const where = `vips[${v.vip}:${v.port}/${v.protocol}]`;
    if (!services.has(v.serviceId)) einval(`${where}.serviceId: service ${v.serviceId} is not in services`);
    if (familyOf(v.vip) !== v.family) einval(`${where}.family: ${v.family} does not match ${v.vip}`);
    if (!(v.forwarding in MODE)) einval(`${where}.forwarding: unknown '${v.forwarding}'`);
    // dsr-gue sends to this port (lb_vip_value.target_port): 0 would put every packet of the listener on port 0
    if (v.forwarding === 'dsr-gue' && !(Number.isInteger(v.guePort) && v.guePort! >= 1 && v.guePort! <= 65535))
      einval(`${where}.guePort: a dsr-gue listener needs its GUE port (1..65535), got ${v.guePort}`);
  }
  if (!Number.isInteger(d.mtu) || d.mtu < 576 || d.mtu > 65535) einval(`mtu: ${d.mtu} out of range`);
  if (d.role !== 'lb') einval(`role: the LB data plane applies 'lb' nodes, node '${d.node}' is '${d.role}'`);
  for (const [what, n, max] of [['reals', d.reals.length, LB_CAPACITY.reals], ['services', d.services.length, LB_CAPACITY.services],
    ['vips', d.vips.length + desiredMarkers(d).length, LB_CAPACITY.vipEntries]] as const)
    if (n > max) einval(`${what}: ${n} entries exceed the map capacity ${max} (lb_consts.h)`);
  for (const s of d.services)
    if (s.tableSize > MAX_RING_ENTRIES) einval(`services[${s.name}].tableSize: ${s.tableSize} exceeds ${MAX_RING_ENTRIES}`);
  if (!Number.isInteger(d.conntrackMaxEntries) || d.conntrackMaxEntries < 1) einval(`conntrackMaxEntries: ${d.conntrackMaxEntries}`);
  validateSourceRanges(d);
  validateAffinity(d);
  validateQuic(d);
  const src4 = (d.addresses ?? []).filter((a) => familyOf(a) === 4).length;
  if (src4 > MAX_SRC4) einval(`addresses: ${src4} IPv4 addresses, lb_config holds ${MAX_SRC4} dsr-ipip outer sources (lb_consts.h)`);
}

/**
 * Source ranges: canonical prefixes of the family of the service's listeners, at most what validation allows one lb
 * node, and every listener's flag in step with its service (a flag without prefixes would drop every client, prefixes
 * without the flag would check none).
 */
function validateSourceRanges(d: DesiredState): void {
  const ranges = new Map(d.services.map((s) => [s.id, s]));
  const vipFamily = new Map(d.vips.map((v) => [v.serviceId, v.family]));
  let total = 0;
  for (const s of d.services) {
    const family = vipFamily.get(s.id);
    for (const [i, p] of (s.sourceRanges ?? []).entries()) {
      const c = parseCidr(p);
      if (!c || canonicalCidr(p) !== p) einval(`services[${s.name}].sourceRanges[${i}]: '${p}' is not a canonical prefix`);
      if (family !== undefined && c.family !== family) einval(`services[${s.name}].sourceRanges[${i}]: ${p} is not of the VIP's family (IPv${family})`);
    }
    total += s.sourceRanges?.length ?? 0;
  }
  if (total > DATAPLANE_LIMITS.lbSourceRanges) einval(`services: ${total} sourceRanges entries exceed the ${DATAPLANE_LIMITS.lbSourceRanges} an lb node takes`);
  for (const v of d.vips) {
    const want = (ranges.get(v.serviceId)?.sourceRanges?.length ?? 0) > 0;
    if (!!v.sourceRanges !== want)
      einval(`vips[${v.vip}:${v.port}/${v.protocol}].sourceRanges: ${v.sourceRanges ? 'set' : 'absent'}, but service ${v.serviceId} ${want ? 'has' : 'has no'} sourceRanges`);
  }
}

/** Session affinity: a whole number of seconds in 1..86400 (lb_vip_value.affinity_s is a u32; the program's
 * timeout arithmetic assumes no more), and every listener's timeout the one of its service. */
function validateAffinity(d: DesiredState): void {
  const services = new Map(d.services.map((s) => [s.id, s]));
  for (const s of d.services) {
    const t = s.sessionAffinity?.timeoutS;
    if (t !== undefined && (!Number.isInteger(t) || t < 1 || t > 86400))
      einval(`services[${s.name}].sessionAffinity.timeoutS: ${t} is not a whole number of seconds in 1..86400`);
  }
  for (const v of d.vips) {
    const want = services.get(v.serviceId)?.sessionAffinity?.timeoutS;
    if (v.affinityTimeoutS !== want)
      einval(`vips[${v.vip}:${v.port}/${v.protocol}].affinityTimeoutS: ${v.affinityTimeoutS ?? 'absent'}, but service ${v.serviceId} has ${want ?? 'no session affinity'}`);
  }
}

/**
 * QUIC connection-ID routing: server ids are u32 >= 1, each once per service, naming a real the service lists; no more
 * than lb_quic_servers holds; and the listener flag exactly on the service's UDP listeners that are not snat (the
 * flag without entries would only cost lookups, entries without the flag would route nothing).
 */
function validateQuic(d: DesiredState): void {
  const services = new Map(d.services.map((s) => [s.id, s]));
  let total = 0;
  for (const s of d.services) {
    if (!s.quic) continue;
    const reals = new Set(s.reals.map((r) => r.realId));
    const seen = new Set<number>();
    for (const [i, q] of s.quic.servers.entries()) {
      const where = `services[${s.name}].quic.servers[${i}]`;
      if (!Number.isInteger(q.serverId) || q.serverId < 1 || q.serverId > 0xffffffff) einval(`${where}.serverId: ${q.serverId} is not a u32 >= 1`);
      if (seen.has(q.serverId)) einval(`${where}.serverId: ${q.serverId} is listed twice`);
      seen.add(q.serverId);
      if (!reals.has(q.realId)) einval(`${where}.realId: real ${q.realId} is not a real of the service`);
    }
    total += s.quic.servers.length;
  }
  if (total > DATAPLANE_LIMITS.lbQuicServers) einval(`services: ${total} QUIC server ids exceed the ${DATAPLANE_LIMITS.lbQuicServers} lb_quic_servers holds`);
  for (const v of d.vips) {
    const want = !!services.get(v.serviceId)?.quic && v.protocol === 'UDP' && v.forwarding !== 'snat';
    if (!!v.quic !== want)
      einval(`vips[${v.vip}:${v.port}/${v.protocol}].quic: ${v.quic ? 'set' : 'absent'}, but it ${want ? 'is' : 'is not'} a dsr UDP listener of a service with QUIC connection-ID routing`);
  }
}

/**
 * Checks `desired` against what a data plane was opened for (`target`) and, for lb data planes, against what the
 * kernel maps can represent (rings in `rings` only, see validateDesired).
 */
export function validateFor(target: DataPlaneTarget, desired: DesiredState, rings?: ReadonlySet<number>): void {
  if (target.role === 'backend') {
    if (desired.role !== 'backend') throw new Error(`backend data plane: desired state of node '${desired.node}' has role '${desired.role}', expected 'backend'`);
    if (target.interface !== undefined && desired.interface !== target.interface)
      throw new Error(`backend data plane: desired.interface '${desired.interface}' differs from the interface opened, '${target.interface}'`);
    return;
  }
  validateDesired(desired, rings);
  if (target.interface !== undefined && desired.interface !== target.interface)
    einval(`interface: desired state names '${desired.interface}', the data plane was opened on '${target.interface}'`);
}
