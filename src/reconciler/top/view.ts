// What `gitlb top` prints: per-service and per-real rates between two readings of the pinned maps, with the names,
// health and table shares a running daemon reports on its /metrics (when it answers). Pure.
import type { LbStats, Traffic } from '../../bpf/dataplane/pinned-stats.js';
import { formatTable } from '../format/text-table.js';
import { samples, type Sample } from '../metrics/prom-text.js';
import { dropsByReason } from '../metrics/drop-reasons.js';

/** What the daemon's /metrics adds to the kernel's numbers. */
export interface DaemonView {
  /** listener ("vip:port/PROTO", IPv6 in brackets) -> service name */
  serviceOfListener: Map<string, string>;
  /** `${service}|${real}` -> up | down | unknown */
  health: Map<string, string>;
  /** `${service}|${real}` -> Maglev entries; service -> table size */
  entries: Map<string, number>;
  tableSize: Map<string, number>;
}

export function listenerText(vip: string, port: number, protocol: string): string {
  return `${vip.includes(':') ? `[${vip}]` : vip}:${port}/${protocol}`;
}

export function daemonViewOf(all: Sample[]): DaemonView {
  const v: DaemonView = { serviceOfListener: new Map(), health: new Map(), entries: new Map(), tableSize: new Map() };
  for (const s of samples(all, 'gitlb_service_packets_total'))
    for (const l of (s.labels.vip ?? '').split(',').filter(Boolean)) v.serviceOfListener.set(l, s.labels.service!);
  for (const s of samples(all, 'gitlb_real_table_entries')) v.entries.set(`${s.labels.service}|${s.labels.real}`, s.value);
  for (const s of samples(all, 'gitlb_service_table_size')) v.tableSize.set(s.labels.service!, s.value);
  for (const s of samples(all, 'gitlb_real_health_state')) if (s.value === 1) v.health.set(`${s.labels.service}|${s.labels.real}`, s.labels.state!);
  return v;
}

const ZERO: Traffic = { packets: 0, bytes: 0, newFlows: 0 };

function rate(cur: Traffic | undefined, prev: Traffic | undefined, seconds: number): Traffic {
  const c = cur ?? ZERO;
  const p = prev ?? ZERO;
  // a counter that went down was reset (slot reused, service re-created): count from zero
  const d = (a: number, b: number) => (a >= b ? a - b : a) / seconds;
  return { packets: d(c.packets, p.packets), bytes: d(c.bytes, p.bytes), newFlows: d(c.newFlows, p.newFlows) };
}

function human(n: number, unit = ''): string {
  const abs = Math.abs(n);
  if (abs >= 1e9) return `${(n / 1e9).toFixed(1)}G${unit}`;
  if (abs >= 1e6) return `${(n / 1e6).toFixed(1)}M${unit}`;
  if (abs >= 1e3) return `${(n / 1e3).toFixed(1)}k${unit}`;
  return `${Number.isInteger(n) ? n : n.toFixed(1)}${unit}`;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

export interface TopInput {
  prev: LbStats;
  cur: LbStats;
  seconds: number;
  daemon: DaemonView | null;
  node: string;
  at: Date;
}

export interface DropRate {
  /** As gitlb_drops_total's `reason` label (docs/metrics.md). */
  reason: string;
  perSecond: number;
  total: number;
}

/** Drops per reason over the interval (every reason the data plane counts), busiest first, then by total and name. */
export function dropRates(prev: LbStats, cur: LbStats, seconds: number): DropRate[] {
  const before = dropsByReason(prev);
  // a counter that went down was reset (a new data plane): count from zero
  return [...dropsByReason(cur)].map(([reason, total]) => {
    const p = before.get(reason) ?? 0;
    return { reason, perSecond: (total >= p ? total - p : total) / seconds, total };
  }).sort((a, b) => b.perSecond - a.perSecond || b.total - a.total || a.reason.localeCompare(b.reason));
}

/**
 * `gitlb top --drops`: one row per drop reason with its rate, its share of the interval's drops and its total;
 * reasons that never dropped a packet are left out unless `all`.
 */
export function formatDrops(i: TopInput & { all?: boolean }): string {
  const rates = dropRates(i.prev, i.cur, i.seconds);
  const sum = rates.reduce((n, d) => n + d.perSecond, 0);
  const rows = rates.filter((d) => i.all || d.total > 0)
    .map((d) => [d.reason, human(d.perSecond), sum > 0 ? pct(d.perSecond / sum) : '-', human(d.total)]);
  const lines = [
    `gitlb top — node ${i.node}, ${i.at.toISOString().replace('T', ' ').slice(0, 19)}, drops by reason over ${i.seconds.toFixed(1)} s` +
      `: ${human(sum)}/s in all`,
    '',
    rows.length ? formatTable(['REASON', 'DROPS/S', 'SHARE', 'TOTAL'], rows).trimEnd() : 'no packet dropped since the data plane started (--all lists every reason)',
  ];
  return lines.join('\n') + '\n';
}

export function formatTop(i: TopInput): string {
  const { prev, cur, seconds, daemon } = i;
  const byService = new Map<number, string[]>();
  const modes = new Map<number, Set<string>>();
  for (const l of cur.listeners) {
    byService.set(l.serviceId, [...(byService.get(l.serviceId) ?? []), listenerText(l.vip, l.port, l.protocol)]);
    modes.set(l.serviceId, (modes.get(l.serviceId) ?? new Set()).add(l.mode));
  }
  const nameOf = (id: number) => {
    for (const l of byService.get(id) ?? []) {
      const n = daemon?.serviceOfListener.get(l);
      if (n) return n;
    }
    return `id:${id}`;
  };
  const ids = [...new Set([...byService.keys(), ...cur.services.keys()])].sort((a, b) => nameOf(a).localeCompare(nameOf(b)));
  const serviceRows = ids.map((id) => {
    const r = rate(cur.services.get(id), prev.services.get(id), seconds);
    return [nameOf(id), (byService.get(id) ?? ['-']).join(','), [...(modes.get(id) ?? [])].join(',') || '-',
      human(r.packets), human(r.bytes, 'B'), human(r.newFlows), human(cur.services.get(id)?.packets ?? 0)];
  });

  // reals: one row per (service, real) when the daemon says which service a real serves, else one per real
  const realRows: string[][] = [];
  const realIds = [...cur.realAddresses.keys()].sort((a, b) => cur.realAddresses.get(a)!.localeCompare(cur.realAddresses.get(b)!));
  for (const id of realIds) {
    const addr = cur.realAddresses.get(id)!;
    const r = rate(cur.reals.get(id), prev.reals.get(id), seconds);
    const services = daemon ? [...daemon.entries.keys()].filter((k) => k.endsWith(`|${addr}`)).map((k) => k.slice(0, -addr.length - 1)) : [];
    const nums = [human(r.packets), human(r.bytes, 'B'), human(r.newFlows), human(cur.reals.get(id)?.packets ?? 0)];
    if (!services.length) realRows.push([addr, '-', '-', '-', ...nums]);
    for (const s of services.sort()) {
      const size = daemon!.tableSize.get(s);
      const entries = daemon!.entries.get(`${s}|${addr}`) ?? 0;
      realRows.push([addr, s, daemon!.health.get(`${s}|${addr}`) ?? '-', size ? pct(entries / size) : '-', ...nums]);
    }
  }

  const drops = dropRates(prev, cur, seconds).filter((d) => d.total > 0).map((d) => `${d.reason} ${human(d.perSecond)}/s (${human(d.total)})`);
  const ct = cur.conntrack;
  const lines = [
    `gitlb top — node ${i.node}, ${i.at.toISOString().replace('T', ' ').slice(0, 19)}, rates over ${seconds.toFixed(1)} s` +
      (daemon ? '' : ' (daemon /metrics not reachable: no names, health or table shares)'),
    `connection table ${human(ct.entries)} / ${human(ct.max)} (${ct.max ? pct(ct.entries / ct.max) : '-'})` +
      cur.snat.addresses.map((a) => `; SNAT ${a.address}: ${human(a.translations)} translations, busiest real:port ${a.busiestPortsInUse}/${a.portRange} ports`).join(''),
    `drops: ${drops.length ? drops.join(', ') : 'none'}`,
    '',
    formatTable(['SERVICE', 'LISTENERS', 'MODE', 'PKTS/S', 'BYTES/S', 'CONN/S', 'PKTS'], serviceRows).trimEnd(),
    '',
    formatTable(['REAL', 'SERVICE', 'HEALTH', 'SHARE', 'PKTS/S', 'BYTES/S', 'CONN/S', 'PKTS'], realRows).trimEnd(),
  ];
  return lines.join('\n') + '\n';
}
