// docs/metrics.md against the code that exports the metrics, without a lab: every kernel counter that is a drop,
// a pass, a SNAT event or a backend event is a documented label value, and the table reader (test/lib/metrics-doc.ts,
// also used against a live /metrics in test/netns/metrics-netns.test.ts) reads what the tables say.
import test from 'ava';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { COUNTER_NAMES } from '../../src/bpf/dataplane/codec.js';
import { SNAT_COUNTER_NAMES } from '../../src/bpf/dataplane/snat.js';
import { STAT_NAMES } from '../../src/bpf/backend/codec.js';
import { dropsByReason } from '../../src/reconciler/metrics/drop-reasons.js';
import { docMetrics, readDocMetrics } from '../lib/metrics-doc.js';

const root = join(import.meta.dirname, '..', '..');
const docs = readDocMetrics(join(root, 'docs', 'metrics.md'));
const doc = (name: string) => docs.find((m) => m.name === name);
const sorted = (xs: Iterable<string>) => [...xs].sort();

test('every drop reason the lb counts (martian, l2_not_unicast, bad_ip_csum included) is documented, and nothing else', (t) => {
  const counters = Object.fromEntries(COUNTER_NAMES.map((n) => [n, 0])) as never;
  const reasons = [...dropsByReason({ counters, snat: { counters: {} } as never }).keys()];
  for (const r of ['martian', 'l2_not_unicast', 'bad_ip_csum', 'source_range']) t.true(reasons.includes(r), r);
  t.deepEqual(sorted(doc('gitlb_drops_total')!.values), sorted(reasons));
});

test('passes, SNAT events, backend events: documented label values are exactly the counters', (t) => {
  t.deepEqual(sorted(doc('gitlb_passes_total')!.values), sorted(COUNTER_NAMES.filter((n) => n.startsWith('pass_')).map((n) => n.slice(5))));
  const snatDrops = new Set(['snat_drop_ports_exhausted', 'snat_drop_table_full', 'snat_drop_family']);
  t.deepEqual(sorted(doc('gitlb_snat_events_total')!.values), sorted(SNAT_COUNTER_NAMES.filter((n) => !snatDrops.has(n)).map((n) => n.replace(/^snat_/, ''))));
  t.deepEqual(sorted(doc('gitlb_backend_events_total')!.values), sorted(STAT_NAMES));
});

test('every lb counter that is neither a drop nor a pass has its metric (icmp_echo_reply: gitlb_icmp_echo_replies_total)', (t) => {
  const covered: Record<string, string> = {
    ct_hit: 'gitlb_conntrack_hits_total', ct_miss: 'gitlb_conntrack_misses_total', icmp_sent: 'gitlb_icmp_too_big_sent_total',
    tx: 'gitlb_forwarded_total', redirect: 'gitlb_forwarded_total', ct_rate_limited: 'gitlb_conntrack_rate_limited_total',
    icmp_echo_reply: 'gitlb_icmp_echo_replies_total',
  };
  const rest = COUNTER_NAMES.filter((n) => !n.startsWith('drop_') && !n.startsWith('pass_'));
  t.deepEqual(sorted(rest), sorted(Object.keys(covered)), 'a new kernel counter needs its metric and a row here');
  for (const metric of Object.values(covered)) t.truthy(doc(metric), `${metric} documented`);
});

/** Metric names written out in the exporters' sources (src/reconciler/metrics/): every metric is registered by its
 * full name there. */
function registeredNames(): Set<string> {
  const dir = join(root, 'src', 'reconciler', 'metrics');
  const names = new Set<string>();
  for (const f of readdirSync(dir, { recursive: true }) as string[]) {
    if (!f.endsWith('.ts')) continue;
    for (const m of readFileSync(join(dir, f), 'utf8').matchAll(/['"`](gitlb_[a-z0-9_]+)['"`]/g)) names.add(m[1]!);
  }
  return names;
}

test('every metric in docs/metrics.md tables is registered in src/reconciler/metrics/, and every registered one has a row', (t) => {
  const registered = registeredNames();
  t.true(registered.size > 50, `${registered.size} names`);
  const documented = new Set(docs.map((m) => m.name));
  t.deepEqual([...documented].filter((n) => !registered.has(n)).sort(), [], 'documented, not registered (renamed or removed?)');
  t.deepEqual([...registered].filter((n) => !documented.has(n)).sort(), [], 'registered, not documented');
});

test('every metric named anywhere in README and docs/ (a name ending in _total, _seconds, _info or _entries) is registered', (t) => {
  const registered = registeredNames();
  const files = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  const unknown: string[] = [];
  for (const file of files) {
    for (const [i, line] of readFileSync(join(root, file), 'utf8').split('\n').entries()) {
      for (const m of line.matchAll(/\bgitlb_[a-z0-9_]+_(?:total|seconds|info|entries)\b/g)) if (!registered.has(m[0])) unknown.push(`${file}:${i + 1} ${m[0]}`);
    }
  }
  t.deepEqual(unknown, []);
});

test('the table reader: several names per cell, _suffix names, labels, values after the first colon', (t) => {
  const md = '## Health\n| metric | type | labels | meaning |\n|---|---|---|---|\n' +
    '| `gitlb_x_voters`, `_stale_peers`, `_quorum` | gauge | | consensus: counts |\n' +
    '| `gitlb_z_total` | counter | event | `new`, `hit` |\n' +
    '| `gitlb_y_total` | counter | service (, real) | drops: `a_b`, `c` (not `CamelCase`) |\n';
  t.deepEqual(docMetrics(md).map((m) => [m.name, m.type, m.labels.join(','), m.values.join(','), m.section]), [
    ['gitlb_x_voters', 'gauge', '', '', 'Health'],
    ['gitlb_x_stale_peers', 'gauge', '', '', 'Health'],
    ['gitlb_x_quorum', 'gauge', '', '', 'Health'],
    ['gitlb_z_total', 'counter', 'event', 'new,hit', 'Health'],
    ['gitlb_y_total', 'counter', 'service,real', 'a_b,c', 'Health'],
  ]);
});
