// The maps of a loaded xdp_lb and the small encodings every part of the lb data plane shares: which maps there are
// (checked against the object's BTF at load), how a listener, a VIP address marker and a real's slot are keyed, and
// which slot a real holds. Used by the load (./index.ts), the executor (./execute.ts) and the live read (./live.ts).
import { BpfMap, BpfObject } from '../libbpf.js';
import type { DesiredVip } from '../../render/state.js';
import type { LiveVipMarker } from '../../render/ops.js';
import { LAYOUTS, VIP_VALUE_SIZE, addr16, MODE, PROTO_NUMBER, VIP_F_HASH_SRC_PORT, VIP_F_SOURCE_RANGES, VIP_F_QUIC, QUIC_MAPS, decodeVipValue, encodeU32, encodeVipKey, isMarkerKey, realSlotOf, encodeVipValue } from './codec.js';
import { checkRingMaps } from './rings.js';
import { SNAT_MAPS, checkSnatLayouts } from './snat.js';
import { einval } from './validate.js';

/** The object file (build/bpf/xdp_lb.o) and its program. */
export const OBJECT_NAME = 'xdp_lb';
/** The LPM trie of Service spec.sourceRanges (absent in the pins of versions without source ranges). */
export const SOURCE_RANGES_PIN = 'lb_source_ranges';

/** The order of DesiredState.vips: family, address bytes, port, protocol (as render sorts them). */
export function compareVips(a: DesiredVip, b: DesiredVip): number {
  return a.family - b.family || Buffer.compare(addr16(a.vip), addr16(b.vip)) || a.port - b.port ||
    (a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0);
}

export const vipKeyOf = (v: Pick<DesiredVip, 'vip' | 'family' | 'port' | 'protocol'>) =>
  encodeVipKey({ addr: v.vip, family: v.family, port: v.port, proto: PROTO_NUMBER[v.protocol] });
// dsr-gue keeps its tunnel's UDP port where the other modes keep the real's port (its packets keep the VIP's port)
export const vipValueOf = (v: DesiredVip, statsSlot: number) => encodeVipValue({ serviceId: v.serviceId,
  targetPort: v.forwarding === 'dsr-gue' ? v.guePort ?? 0 : v.targetPort,
  mode: MODE[v.forwarding], statsSlot,
  flags: (v.hashSourcePort ? VIP_F_HASH_SRC_PORT : 0) | (v.sourceRanges ? VIP_F_SOURCE_RANGES : 0) | (v.quic ? VIP_F_QUIC : 0),
  affinityS: v.affinityTimeoutS ?? 0 });

/** Service id -> its stats slot, as the listeners in lb_vips carry it. */
export function serviceSlots(vips: BpfMap): Map<number, number> {
  const out = new Map<number, number>();
  for (const [k, v] of vips.entries()) {
    if (isMarkerKey(k)) continue;
    const val = decodeVipValue(v);
    out.set(val.serviceId, val.statsSlot ?? 0);
  }
  return out;
}
export const markerKeyOf = (m: LiveVipMarker) => encodeVipKey({ addr: m.address, family: m.family, port: 0, proto: 0 });
export const MARKER_VALUE = Buffer.alloc(VIP_VALUE_SIZE);
export const ZERO_TRAFFIC = Buffer.alloc(24); // lb_traffic
export const ZERO_REAL_TRAFFIC = Buffer.alloc(40); // lb_real_traffic
export const FREE_SLOT = Buffer.alloc(24); // lb_real_slot with real id 0

export type LbMaps = Record<'vips' | 'rings' | 'reals' | 'realSlots' | 'conntrack' | 'config' | 'snatConfig' | 'counters' | 'serviceStats' | 'realStats' | 'sourceRanges' | 'quicServers', BpfMap>;

/** The maps of a loaded xdp_lb, once its struct layouts are checked against the codecs (BTF). */
export function checkedMaps(obj: BpfObject): LbMaps {
  for (const [name, want] of Object.entries(LAYOUTS)) {
    const got = obj.btfStruct(name);
    if (!got || got.size !== want.size) einval(`${OBJECT_NAME}.o: struct ${name} is ${got?.size} bytes, codec expects ${want.size}`);
    for (const [member, off] of Object.entries(want.members)) {
      const mm = got.members.find((x) => x.name === member);
      if (!mm || mm.offset !== off) einval(`${OBJECT_NAME}.o: ${name}.${member} at ${mm?.offset}, codec expects ${off}`);
    }
  }
  checkRingMaps(obj.map('lb_rings'));
  checkSnatLayouts(obj);
  return {
    vips: obj.map('lb_vips'), rings: obj.map('lb_rings'), reals: obj.map('lb_reals'), realSlots: obj.map('lb_real_slots'),
    conntrack: obj.map('lb_conntrack'),
    config: obj.map('lb_config'), snatConfig: obj.map(SNAT_MAPS.config), counters: obj.map('lb_counters'),
    serviceStats: obj.map('lb_service_stats'), realStats: obj.map('lb_real_stats'),
    sourceRanges: obj.map(SOURCE_RANGES_PIN), quicServers: obj.map(QUIC_MAPS.servers),
  };
}

/** The slot lb_reals gives real `id` when lb_real_slots names the real there too; null when the node holds no slot
 * for it. */
export function liveSlotOf(m: Pick<LbMaps, 'reals' | 'realSlots'>, id: number): number | null {
  const v = m.reals.lookup(encodeU32(id));
  if (!v) return null;
  const slot = realSlotOf(v);
  return m.realSlots.lookup(encodeU32(slot))?.readUInt32LE(0) === id ? slot : null;
}
