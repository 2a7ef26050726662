// The status document is written after every apply: it must stay proportional to what is wrong, not to the size
// of the config. At 1,000 services x 100 reals it lists the few reals that need a look, counts the rest, fits the
// readers' size cap, validates against the schema, and `gitlb status` still names every unhealthy real.
import test from 'ava';
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { MAX_STATUS_BYTES, parseStatus, serialiseStatus, statusService, type StatusRealState } from '../../src/reconciler/status/status-doc.js';
import { assessStatus } from '../../src/reconciler/status/assess.js';
import { nodeStatus } from '../reconcile-helpers.js';
import { healthStatus, MAX_LISTED_REALS } from '../../src/reconciler/health/status.js';
import type { HealthSnapshot } from '../../src/reconciler/health/checker.js';
import type { Observations } from '../../src/render/health-quorum.js';

const schema = JSON.parse(readFileSync(new URL('../../schemas/status.schema.json', import.meta.url), 'utf8'));
const ajv = new Ajv2020({ allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validate = ajv.compile(schema);

/** Service i of 1,000 with 100 reals; every 100th service has real 7 down, every 250th has real 9 draining. */
function service(i: number) {
  const reals: StatusRealState[] = Array.from({ length: 100 }, (_, r) => ({
    address: `2001:db8:${i.toString(16)}::${(r + 1).toString(16)}`,
    weight: 100,
    state: r === 9 && i % 250 === 0 ? 'drain' : 'active',
    healthy: !(r === 7 && i % 100 === 0),
    entries: r === 7 && i % 100 === 0 ? 0 : 100,
  }));
  return { name: `svc-${i}`, id: i + 1, tableSize: 10007, reals };
}

test('1,000 services x 100 reals: unhealthy and draining reals listed, the rest counted; under the size cap; schema-valid', (t) => {
  const services = Array.from({ length: 1000 }, (_, i) => statusService(service(i), 'c'.repeat(64)));
  const rev = 'b'.repeat(40);
  const text = serialiseStatus(nodeStatus('lb-1', rev, { services }));
  t.true(text.length < MAX_STATUS_BYTES / 2, `${text.length} bytes`);
  const back = parseStatus(text);
  t.true(validate(back), JSON.stringify(validate.errors));
  t.deepEqual(back.services[0]!.realCounts, { total: 100, active: 99, drain: 1, disabled: 0, unhealthy: 1 });
  t.deepEqual(back.services[0]!.reals.map((r) => [r.state, r.healthy, r.entries]), [['active', false, 0], ['drain', true, 100]]);
  t.deepEqual(back.services[1]!.reals, []);
  t.deepEqual(back.services[1]!.realCounts, { total: 100, active: 100, drain: 0, disabled: 0, unhealthy: 0 });
  const listed = back.services.reduce((n, s) => n + s.reals.length, 0);
  t.is(listed, 10 + 4); // 10 down, 4 draining
  const verdict = assessStatus({ statuses: [back], head: { oid: rev, committedAt: new Date() }, configNodes: [], now: new Date(), behindGraceMs: 60_000, staleAfterMs: 60_000 });
  t.deepEqual(verdict.nodes[0]!.unhealthy, Array.from({ length: 10 }, (_, k) => `svc-${k * 100}/${service(k * 100).reals[7]!.address}`));
});

test('a status file of an older version (every real listed, no counts) is still read and judged', (t) => {
  const old = nodeStatus('lb-2', 'd'.repeat(40), { reals: ['198.51.100.1', '198.51.100.2'], down: '198.51.100.2' });
  t.is(old.services[0]!.realCounts, undefined);
  const back = parseStatus(serialiseStatus(old));
  t.true(validate(back), JSON.stringify(validate.errors));
  const verdict = assessStatus({ statuses: [back], head: null, configNodes: [], now: new Date(), behindGraceMs: 60_000, staleAfterMs: 60_000 });
  t.deepEqual(verdict.nodes[0]!.unhealthy, ['web/198.51.100.2']);
});

// ---- the health section -------------------------------------------------------------------------------------------

type Snap = HealthSnapshot['services'];
const T0 = Date.parse('2026-11-29T12:00:00Z');
const iso = (ms: number) => new Date(T0 - ms).toISOString();

/** 1,000 services x 100 reals as the checker reports them; `state(i, r)` gives each real's state. Keys are
 * inserted in the order given, so a shuffled order must not change the document. */
function healthSnapshot(state: (i: number, r: number) => 'up' | 'down' | 'unknown', order: number[]): HealthSnapshot {
  const services: Snap = {};
  for (const i of order) {
    const reals: Snap[string]['reals'] = {};
    for (const r of [...Array(100).keys()].reverse()) {
      const s = state(i, r);
      reals[`198.51.${100 + (i % 100)}.${r + 1}`] = { state: s, since: iso(1000 * r), check: `tcp 198.51.${100 + (i % 100)}.${r + 1}:80`,
        ...(s !== 'unknown' && { lastCheck: { ok: s === 'up', detail: s === 'up' ? 'connected' : 'ECONNREFUSED', at: iso(500), durationMs: 0.5 } }) };
    }
    services[`svc-${String(i).padStart(4, '0')}`] = { reals };
  }
  return { services, stats: { targets: 100_000, inFlight: 0, maxInFlight: 64, peakInFlight: 64, checks: 1 } };
}

function observationsOf(snap: HealthSnapshot): Observations {
  const out: Observations = {};
  for (const [svc, { reals }] of Object.entries(snap.services)) {
    for (const [a, r] of Object.entries(reals)) if (r.state !== 'unknown') (out[svc] ??= {})[a] = { up: r.state === 'up', since: r.since };
  }
  return out;
}

const inOrder = [...Array(1000).keys()];

test('health, 1,000 services x 100 reals, a few not up: counts for every service, only those reals listed; schema-valid', (t) => {
  // every 100th service: real 7 down; every 10th: real 3 not checked enough yet
  const snap = healthSnapshot((i, r) => (r === 7 && i % 100 === 0 ? 'down' : r === 3 && i % 10 === 0 ? 'unknown' : 'up'), inOrder);
  const h = healthStatus({ now: T0, mode: 'consensus', observations: observationsOf(snap), snapshot: snap, failOpen: [], failClosed: [] });
  t.is(Object.keys(h.services).length, 1000);
  t.deepEqual(h.services['svc-0000']!.counts, { total: 100, up: 98, down: 1, unknown: 1 });
  t.deepEqual(Object.keys(h.services['svc-0000']!.reals), ['198.51.100.4', '198.51.100.8']); // sorted by address
  t.deepEqual(h.services['svc-0001'], { counts: { total: 100, up: 100, down: 0, unknown: 0 }, reals: {} });
  t.is(Object.values(h.services).reduce((n, s) => n + Object.keys(s.reals).length, 0), 10 + 100);
  t.is(h.omittedReals, 0);
  t.is(Object.values(h.observations).reduce((n, o) => n + Object.keys(o).length, 0), 10, 'only the down votes');
  const text = serialiseStatus({ ...nodeStatus('lb-1', 'b'.repeat(40), {}), health: h });
  const back = parseStatus(text);
  t.true(validate(back), JSON.stringify(validate.errors));
  t.true(text.length < MAX_STATUS_BYTES / 4, `${text.length} bytes`);
  t.log(`status with the health section: ${text.length} bytes`);
});

test('health, a mass outage: at most MAX_LISTED_REALS listed, down before unknown, the rest counted; every down vote kept', (t) => {
  // services 10..14 entirely down (500 reals), every 3rd other service has one real unknown (334 - svc 12 = 333)
  const state = (i: number, r: number) => (i >= 10 && i < 15 ? 'down' : r === 0 && i % 3 === 0 ? 'unknown' : 'up') as 'up' | 'down' | 'unknown';
  const snap = healthSnapshot(state, inOrder);
  const h = healthStatus({ now: T0, mode: 'local', observations: observationsOf(snap), snapshot: snap, failOpen: [], failClosed: [] });
  const listed = Object.entries(h.services).flatMap(([s, v]) => Object.entries(v.reals).map(([a, r]) => `${s} ${a} ${r.state}`));
  t.is(listed.length, MAX_LISTED_REALS);
  t.true(listed.every((x) => x.endsWith(' down')), 'down reals take the places first');
  t.deepEqual(Object.keys(h.services).filter((s) => Object.keys(h.services[s]!.reals).length > 0), ['svc-0010', 'svc-0011']);
  t.is(h.omittedReals, 500 + 333 - MAX_LISTED_REALS);
  t.deepEqual(h.services['svc-0012']!.counts, { total: 100, up: 0, down: 100, unknown: 0 }); // counted, not listed
  t.is(Object.values(h.observations).reduce((n, o) => n + Object.keys(o).length, 0), 500, 'the down votes are never capped');
  const base = nodeStatus('lb-1', 'b'.repeat(40), {});
  const text = serialiseStatus({ ...base, health: h });
  t.true(validate(parseStatus(text)), JSON.stringify(validate.errors));
  t.true(text.length < MAX_STATUS_BYTES / 4, `${text.length} bytes`);

  // Deterministic: the checker's order (services and reals shuffled) does not change a byte.
  const shuffled = [...inOrder].sort((a, b) => ((a * 7919) % 1000) - ((b * 7919) % 1000));
  const snap2 = healthSnapshot(state, shuffled);
  const h2 = healthStatus({ now: T0, mode: 'local', observations: observationsOf(snap2), snapshot: snap2, failOpen: [], failClosed: [] });
  t.is(serialiseStatus({ ...base, health: h2 }), text);
});
