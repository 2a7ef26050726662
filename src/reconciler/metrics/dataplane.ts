// Data-plane metrics, read from the node's pinned per-CPU maps when Prometheus scrapes (collect callbacks, no
// polling loop). One read of the maps serves every metric of a scrape (memoised for a short moment), so a scrape
// costs one walk of each map. Metric names and meaning: docs/metrics.md.
import { Counter, Gauge, type Registry } from 'prom-client';
import {
  readBackendStats, readLbStats, type BackendStats, type LbStats,
} from '../../bpf/dataplane/pinned-stats.js';
import { dropsByReason, SNAT_DROPS } from './drop-reasons.js';

/** How the control plane names what the maps know by id (from the applied desired state). */
export interface DataPlaneNames {
  /** service id -> service name and its listeners ("vip:port/proto", comma-joined when several). */
  services: Map<number, { name: string; vip: string }>;
}

export interface DataPlaneMetricsOptions {
  registry: Registry;
  /** The node's pin root (…/<node>). */
  pinRoot: string;
  names: () => DataPlaneNames | null;
}

/** Reads taken within this window are shared by every collect callback of one scrape. */
const MEMO_MS = 250;

function memo<T>(read: () => T): () => T {
  let at = -Infinity;
  let value: T;
  return () => {
    const now = performance.now();
    if (now - at > MEMO_MS) {
      value = read();
      at = now;
    }
    return value;
  };
}

type Labels = Record<string, string>;

/** A counter or gauge whose value is the kernel's: every scrape sets it from `values()`. */
function kernelMetric(kind: 'counter' | 'gauge', reg: Registry, name: string, help: string, labelNames: string[],
  values: () => Array<[Labels, number]>): void {
  const collect = function (this: Counter | Gauge) {
    this.reset();
    for (const [labels, v] of values()) {
      if (this instanceof Gauge) this.set(labels, v);
      else this.inc(labels, v);
    }
  };
  if (kind === 'counter') new Counter({ name, help, labelNames, registers: [reg], collect });
  else new Gauge({ name, help, labelNames, registers: [reg], collect });
}
const kernelCounter = kernelMetric.bind(null, 'counter');
const kernelGauge = kernelMetric.bind(null, 'gauge');

const PASS_PREFIX = 'pass_';

export function registerDataPlaneMetrics(o: DataPlaneMetricsOptions): void {
  const reg = o.registry;
  const lb = memo((): LbStats | null => readLbStats(o.pinRoot));
  const backend = memo((): BackendStats | null => readBackendStats(o.pinRoot));
  const serviceLabels = (id: number): Labels => {
    const n = o.names()?.services.get(id);
    return { service: n?.name ?? `id:${id}`, vip: n?.vip ?? '' };
  };
  const realLabel = (s: LbStats, id: number): Labels => ({ real: s.realAddresses.get(id) ?? `id:${id}` });
  const perService = (pick: 'packets' | 'bytes' | 'newFlows') => () => {
    const s = lb();
    return s ? [...s.services].map(([id, t]): [Labels, number] => [serviceLabels(id), t[pick]]) : [];
  };
  const perReal = (pick: 'packets' | 'bytes' | 'newFlows') => () => {
    const s = lb();
    return s ? [...s.reals].map(([id, t]): [Labels, number] => [realLabel(s, id), t[pick]]) : [];
  };
  const one = (f: (s: LbStats) => number) => () => {
    const s = lb();
    return s ? [[{}, f(s)] as [Labels, number]] : [];
  };

  kernelCounter(reg, 'gitlb_service_packets_total', 'Packets the lb received for a service (all its VIP listeners)',
    ['service', 'vip'], perService('packets'));
  kernelCounter(reg, 'gitlb_service_bytes_total', 'Bytes (frames) the lb received for a service', ['service', 'vip'], perService('bytes'));
  kernelCounter(reg, 'gitlb_service_new_connections_total', 'New connections (TCP SYN, or new UDP/SNAT flows) of a service',
    ['service', 'vip'], perService('newFlows'));
  kernelCounter(reg, 'gitlb_real_packets_total', 'Packets the lb sent towards a real', ['real'], perReal('packets'));
  kernelCounter(reg, 'gitlb_real_bytes_total', 'Bytes the lb sent towards a real (as received)', ['real'], perReal('bytes'));
  kernelCounter(reg, 'gitlb_real_new_connections_total', 'New connections the lb gave a real', ['real'], perReal('newFlows'));
  kernelCounter(reg, 'gitlb_drops_total', 'Packets the lb dropped, by reason', ['reason'], () => {
    const s = lb();
    return s ? [...dropsByReason(s)].map(([reason, v]): [Labels, number] => [{ reason }, v]) : [];
  });
  kernelCounter(reg, 'gitlb_passes_total', 'Packets the lb handed to the kernel stack, by reason', ['reason'], () => {
    const s = lb();
    if (!s) return [];
    return Object.entries(s.counters).filter(([n]) => n.startsWith(PASS_PREFIX))
      .map(([n, v]): [Labels, number] => [{ reason: n.slice(PASS_PREFIX.length) }, v]);
  });
  kernelCounter(reg, 'gitlb_forwarded_total', 'Packets the lb forwarded, by XDP action', ['action'], () => {
    const s = lb();
    return s ? [[{ action: 'tx' }, s.counters.tx], [{ action: 'redirect' }, s.counters.redirect]] : [];
  });
  kernelCounter(reg, 'gitlb_conntrack_hits_total', 'Connection-table lookups that found the flow', [], one((s) => s.counters.ct_hit));
  kernelCounter(reg, 'gitlb_conntrack_misses_total', 'Connection-table lookups that went to the Maglev ring', [], one((s) => s.counters.ct_miss));
  kernelCounter(reg, 'gitlb_conntrack_rate_limited_total', 'New flows forwarded but not recorded: over the new-connection rate guard',
    [], one((s) => s.counters.ct_rate_limited ?? 0));
  kernelGauge(reg, 'gitlb_conntrack_entries', 'Connection-table entries in use', [], one((s) => s.conntrack.entries));
  kernelGauge(reg, 'gitlb_conntrack_max_entries', 'Connection-table capacity', [], one((s) => s.conntrack.max));
  kernelCounter(reg, 'gitlb_icmp_too_big_sent_total', 'ICMP fragmentation-needed / packet-too-big answers sent to clients', [],
    one((s) => s.counters.icmp_sent));
  kernelCounter(reg, 'gitlb_icmp_echo_replies_total', 'ICMP / ICMPv6 echo requests to a VIP address the lb answered itself (XDP_TX)', [],
    one((s) => s.counters.icmp_echo_reply ?? 0));
  kernelCounter(reg, 'gitlb_snat_events_total', 'SNAT translation events (new, hit, reply, icmp, pass_local, pass_expired, reclaimed, pass_fragment, repicked)',
    ['event'], () => {
      const s = lb();
      if (!s) return [];
      return Object.entries(s.snat.counters).filter(([n]) => !(n in SNAT_DROPS))
        .map(([n, v]): [Labels, number] => [{ event: n.replace(/^snat_/, '') }, v]);
    });
  kernelGauge(reg, 'gitlb_snat_translations', 'SNAT translations in use, per SNAT address', ['address'], () =>
    lb()?.snat.addresses.map((a): [Labels, number] => [{ address: a.address }, a.translations]) ?? []);
  kernelGauge(reg, 'gitlb_snat_translations_max', 'SNAT translation table capacity', [], one((s) => s.snat.max));
  kernelGauge(reg, 'gitlb_snat_port_range', 'SNAT source ports available per (real, port, protocol)', ['address'], () =>
    lb()?.snat.addresses.map((a): [Labels, number] => [{ address: a.address }, a.portRange]) ?? []);
  kernelGauge(reg, 'gitlb_snat_ports_in_use_max', 'SNAT ports in use by the busiest (real, port, protocol) of an address',
    ['address'], () => lb()?.snat.addresses.map((a): [Labels, number] => [{ address: a.address }, a.busiestPortsInUse]) ?? []);
  kernelCounter(reg, 'gitlb_affinity_total', 'Session affinity lookups of new flows, by outcome (hit, miss, expired, real_gone)',
    ['outcome'], () => Object.entries(lb()?.affinity.counters ?? {})
      .map(([n, v]): [Labels, number] => [{ outcome: n.replace(/^affinity_/, '') }, v]));
  kernelCounter(reg, 'gitlb_quic_packets_total', 'Packets of QUIC connection-ID routing listeners, by outcome (routed, initial, no_id, unknown_id, malformed)',
    ['outcome'], () => Object.entries(lb()?.quic.counters ?? {})
      .map(([n, v]): [Labels, number] => [{ outcome: n.replace(/^quic_/, '') }, v]));
  kernelCounter(reg, 'gitlb_flow_sync_publish_lost_total', 'New entries xdp_lb could not publish for connection-state sync: its ring was full (a scan of the tables follows)',
    [], () => (lb() ? [[{}, lb()!.sync.counters.sync_lost ?? 0]] : []));
  kernelGauge(reg, 'gitlb_affinity_entries', 'Clients remembered by session affinity (lb_affinity entries)', [], one((s) => s.affinity.entries));
  kernelGauge(reg, 'gitlb_affinity_max_entries', 'Session affinity table capacity', [], one((s) => s.affinity.max));
  kernelCounter(reg, 'gitlb_backend_events_total', 'Backend-node decapsulation and reply-rewrite counters (tc programs)',
    ['event'], () => Object.entries(backend()?.counters ?? {}).map(([n, v]): [Labels, number] => [{ event: n }, v]));
}
