// `gitlb top`'s view: rates between two readings, names and health from a daemon's /metrics text, counters
// that went backwards (a reused slot) counted from zero. Pure.
import test from 'ava';
import type { LbStats } from '../../src/bpf/dataplane/pinned-stats.js';
import { COUNTER_NAMES } from '../../src/bpf/dataplane/codec.js';
import { daemonViewOf, dropRates, formatDrops, formatTop } from '../../src/reconciler/top/view.js';
import { dropsByReason } from '../../src/reconciler/metrics/drop-reasons.js';
import { parsePromText } from '../../src/reconciler/metrics/prom-text.js';

function stats(svc: number, real1: number, real2: number, dropNoReal = 0): LbStats {
  const counters = Object.fromEntries(COUNTER_NAMES.map((n) => [n, 0])) as LbStats['counters'];
  counters.drop_no_real = dropNoReal;
  return {
    counters,
    services: new Map([[7, { packets: svc, bytes: svc * 100, newFlows: svc / 10 }]]),
    reals: new Map([[1, { packets: real1, bytes: real1 * 100, newFlows: real1 / 10 }], [2, { packets: real2, bytes: real2 * 100, newFlows: real2 / 10 }]]),
    realAddresses: new Map([[1, '198.51.100.21'], [2, '198.51.100.22']]),
    listeners: [{ vip: '203.0.113.10', port: 80, protocol: 'TCP', serviceId: 7, mode: 'dsr-l2' }],
    conntrack: { entries: 50, max: 1000 },
    snat: { counters: {}, addresses: [], max: 0 },
    affinity: { counters: {}, entries: 0, max: 0 },
  };
}

const METRICS = `gitlb_service_packets_total{node="lb-1",service="web",vip="203.0.113.10:80/TCP"} 3000
gitlb_real_table_entries{node="lb-1",service="web",real="198.51.100.21"} 751
gitlb_real_table_entries{node="lb-1",service="web",real="198.51.100.22"} 250
gitlb_service_table_size{node="lb-1",service="web"} 1001
gitlb_real_health_state{node="lb-1",service="web",real="198.51.100.21",state="up"} 1
gitlb_real_health_state{node="lb-1",service="web",real="198.51.100.22",state="up"} 0
gitlb_real_health_state{node="lb-1",service="web",real="198.51.100.22",state="down"} 1
`;

test('top: rates over the interval, names, health and table share from the daemon', (t) => {
  const out = formatTop({ prev: stats(1000, 600, 400), cur: stats(3000, 2100, 900, 40), seconds: 2,
    daemon: daemonViewOf(parsePromText(METRICS)), node: 'lb-1', at: new Date(0) });
  const line = (start: string) => out.split('\n').find((l) => l.startsWith(start))!.trim().split(/\s+/);
  t.deepEqual(line('web'), ['web', '203.0.113.10:80/TCP', 'dsr-l2', '1.0k', '100.0kB', '100', '3.0k']);
  t.deepEqual(line('198.51.100.21'), ['198.51.100.21', 'web', 'up', '75.0%', '750', '75.0kB', '75', '2.1k']);
  t.deepEqual(line('198.51.100.22'), ['198.51.100.22', 'web', 'down', '25.0%', '250', '25.0kB', '25', '900']);
  t.regex(out, /drops: no_real 20\/s \(40\)/);
  t.regex(out, /connection table 50 \/ 1\.0k \(5\.0%\)/);
});

test('top: without a daemon, services by id; a counter that went back counts from zero', (t) => {
  const out = formatTop({ prev: stats(5000, 600, 400), cur: stats(300, 2100, 900), seconds: 1, daemon: null, node: 'lb-1', at: new Date(0) });
  t.regex(out, /not reachable/);
  t.regex(out, /^id:7\s+203\.0\.113\.10:80\/TCP\s+dsr-l2\s+300\s/m);
  t.regex(out, /^198\.51\.100\.21\s+-\s+-\s+-\s+1\.5k\s/m);
});

test('top --drops: one row per reason, busiest first, with its share of the interval and its total; reasons as the metric names them', (t) => {
  const prev = stats(0, 0, 0, 10);
  const cur = stats(0, 0, 0, 30);
  cur.counters.drop_martian = 80; // 80 in 2 s: 40/s
  cur.counters.drop_bad_ip_csum = 5; // dropped before the first reading too: 0/s now
  prev.counters.drop_bad_ip_csum = 5;
  cur.snat.counters = { snat_drop_ports_exhausted: 4 };
  const input = { prev, cur, seconds: 2, daemon: null, node: 'lb-1', at: new Date(0) };
  const out = formatDrops(input);
  const rows = out.split('\n').slice(3).filter(Boolean).map((l) => l.trim().split(/\s+/));
  t.deepEqual(rows, [
    ['martian', '40', '76.9%', '80'],
    ['no_real', '10', '19.2%', '30'],
    ['snat_ports_exhausted', '2', '3.8%', '4'],
    ['bad_ip_csum', '0', '0.0%', '5'],
  ]);
  t.regex(out, /drops by reason over 2\.0 s: 52\/s in all/);
  // --all: every reason the data plane counts, the same names as gitlb_drops_total's reason label
  const all = formatDrops({ ...input, all: true }).split('\n').slice(3).filter(Boolean).map((l) => l.trim().split(/\s+/)[0]);
  t.deepEqual([...all].sort(), [...dropsByReason(cur).keys()].sort());
  for (const r of ['martian', 'l2_not_unicast', 'bad_ip_csum', 'source_range', 'snat_table_full']) t.true(all.includes(r), r);
  // the summary line of the default view names them alike
  t.regex(formatTop(input), /drops: martian 40\/s \(80\), no_real 10\/s \(30\), snat_ports_exhausted 2\/s \(4\), bad_ip_csum 0\/s \(5\)/);
});

test('top --drops: nothing dropped says so; a counter that went back (a new data plane) counts from zero', (t) => {
  const quiet = formatDrops({ prev: stats(0, 0, 0), cur: stats(0, 0, 0), seconds: 1, daemon: null, node: 'lb-1', at: new Date(0) });
  t.regex(quiet, /no packet dropped since the data plane started/);
  const reset = dropRates(stats(0, 0, 0, 500), stats(0, 0, 0, 7), 1);
  t.deepEqual(reset[0], { reason: 'no_real', perSecond: 7, total: 7 });
});
