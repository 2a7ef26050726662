// Ops applied to a LiveState without a kernel: the state a data plane holds after an exact apply (liveOf) and what
// a list of ops does to a state (applyOps). The in-memory data plane and the planner's tests use them. Pure.
import type { DesiredState } from './state.js';
import { EMPTY_LIVE, backendTunnelId, backendVipId, compareQuicServers, compareSourceRanges, desiredBackendTunnels, desiredBackendVips, desiredMarkers, desiredQuicServers, desiredRingReals, desiredSettings, desiredSnat, desiredSourceRanges, markerId, quicServerId, sourceRangeId, vipId, type LiveService, type LiveState, type Op } from './ops.js';

/** The LiveState a data plane holds once it has applied `desired` exactly (what an empty plan means). */
export function liveOf(desired: DesiredState): LiveState {
  if (desired.role === 'backend')
    return { ...EMPTY_LIVE, backendVips: desiredBackendVips(desired), backendTunnels: desiredBackendTunnels(desired) };
  return {
    settings: desiredSettings(desired),
    snat: desiredSnat(desired),
    reals: desired.reals.map((r) => ({ ...r })),
    services: desired.services.map((s) => ({ id: s.id, tableSize: s.tableSize, digest: s.digest, reals: desiredRingReals(s) })),
    vips: desired.vips.map((v) => ({ ...v })),
    markers: desiredMarkers(desired),
    sourceRanges: desiredSourceRanges(desired),
    quicServers: desiredQuicServers(desired),
    backendVips: [],
    backendTunnels: [],
  };
}

/**
 * What `ops` do to `live`, computed without a kernel (the in-memory data plane and the planner's tests use it).
 * Throws, like a data plane would, on a switch without its fill.
 */
export function applyOps(live: LiveState, ops: Op[]): LiveState {
  const reals = new Map(live.reals.map((r) => [r.id, r]));
  const services = new Map(live.services.map((s) => [s.id, s]));
  const vips = new Map(live.vips.map((v) => [vipId(v), v]));
  const markers = new Map(live.markers.map((m) => [markerId(m), m]));
  const be = new Map(live.backendVips.map((e) => [backendVipId(e), e]));
  const tunnels = new Map(live.backendTunnels.map((e) => [backendTunnelId(e), e]));
  const ranges = new Map(live.sourceRanges.map((r) => [sourceRangeId(r), r]));
  const quic = new Map(live.quicServers.map((e) => [quicServerId(e), e]));
  const filled = new Map<number, LiveService>();
  let { settings, snat } = live;
  for (const o of ops) {
    switch (o.op) {
      case 'settings.set': settings = o.value; break;
      case 'snat.set': snat = o.value; break;
      case 'real.put': reals.set(o.real.id, o.real); break;
      case 'ring.fill': filled.set(o.serviceId, { id: o.serviceId, tableSize: o.tableSize, digest: o.digest, ring: o.ring, ...(o.reals && { reals: o.reals }) }); break;
      case 'service.switch': {
        const s = filled.get(o.serviceId);
        if (!s) throw new Error(`service.switch of service ${o.serviceId} without a ring.fill before it`);
        services.set(o.serviceId, s);
        break;
      }
      case 'vip.put': vips.set(vipId(o.vip), o.vip); break;
      case 'marker.put': markers.set(markerId(o.marker), o.marker); break;
      case 'vip.delete': vips.delete(vipId(o.vip)); break;
      case 'marker.delete': markers.delete(markerId(o.marker)); break;
      case 'service.delete': services.delete(o.serviceId); break;
      case 'real.delete': reals.delete(o.real.id); break;
      case 'source-range.put': ranges.set(sourceRangeId(o.range), o.range); break;
      case 'source-range.delete': ranges.delete(sourceRangeId(o.range)); break;
      case 'quic-server.put': quic.set(quicServerId(o.entry), o.entry); break;
      case 'quic-server.delete': quic.delete(quicServerId(o.entry)); break;
      case 'backend-vip.put': be.set(backendVipId(o.entry), o.entry); break;
      case 'backend-vip.delete': be.delete(backendVipId(o.entry)); break;
      case 'backend-tunnel.put': tunnels.set(backendTunnelId(o.entry), o.entry); break;
      case 'backend-tunnel.delete': tunnels.delete(backendTunnelId(o.entry)); break;
      case 'table.resize': break; // table sizes are not part of LiveState
    }
  }
  return {
    settings, snat,
    reals: [...reals.values()].sort((a, b) => a.id - b.id),
    services: [...services.values()].sort((a, b) => a.id - b.id),
    vips: [...vips.values()],
    markers: [...markers.values()],
    sourceRanges: [...ranges.values()].sort(compareSourceRanges),
    quicServers: [...quic.values()].sort(compareQuicServers),
    backendVips: [...be.values()],
    backendTunnels: [...tunnels.values()],
  };
}
