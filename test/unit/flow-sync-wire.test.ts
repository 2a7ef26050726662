// The recency mark on the wire of the connection-state sync (src/reconciler/flows/flow-sync.ts, docs/datapath.md
// "Connection-state sync"): entries carry an age (the sender's now minus the mark, ms, as of sending), never an
// absolute monotonic time; unknown ages are null; a receiver turns an age back into a mark on its own clock.
import test from 'ava';
import { encodeFlowSync, parseFlowSync } from '../../src/reconciler/flows/flow-sync.js';
import { MAX_AGE_MS, ageOf, markOf, newerChoice } from '../../src/bpf/dataplane/flow-state.js';
import { BadBody } from '../../src/reconciler/peer/index.js';

const CT = ['192.0.2.1', '203.0.113.10', 5000, 80, 6, 1];
const SNAT = ['192.0.2.1', '203.0.113.20', 5001, 80, 6, 1, 8080, '198.51.100.2', 40000, false];

test('an entry\'s age is read when present, null when absent or null (a sender without marks)', (t) => {
  const e = parseFlowSync({ v: 1, ct: [[...CT, 1500], CT, [...CT, null]], snat: [[...SNAT, 20], SNAT] }, 10);
  t.deepEqual(e.ct.map((x) => x.ageMs), [1500, null, null]);
  t.deepEqual(e.snat.map((x) => x.ageMs), [20, null]);
});

test('an age that is not a number refuses the message; a negative or fractional one passes the parse (importFlows refuses that entry: bad-age)', (t) => {
  for (const bad of ['12', true, [], {}, Number.NaN])
    t.throws(() => parseFlowSync({ v: 1, ct: [[...CT, bad]], snat: [] }, 10), { instanceOf: BadBody }, String(bad));
  t.throws(() => parseFlowSync({ v: 1, ct: [[...CT, 1, 2]], snat: [] }, 10), { instanceOf: BadBody }, 'arity 8');
  t.deepEqual(parseFlowSync({ v: 1, ct: [[...CT, -5], [...CT, 1.5]], snat: [] }, 10).ct.map((x) => x.ageMs), [-5, 1.5]);
});

test('the age sent is the age at reading plus the time the entry waited in the queue, at most MAX_AGE_MS', (t) => {
  const e = parseFlowSync({ v: 1, ct: [[...CT, 100], CT, [...CT, MAX_AGE_MS - 10]], snat: [[...SNAT, 7]] }, 10);
  const items = [...e.ct.map((x) => ({ kind: 'ct' as const, e: x, at: 1000 })), ...e.snat.map((x) => ({ kind: 'snat' as const, e: x, at: 1400 }))];
  const wire = encodeFlowSync(items, 1500);
  t.deepEqual(wire.ct.map((x) => (x as unknown[])[6]), [600, null, MAX_AGE_MS]);
  t.deepEqual(wire.snat.map((x) => (x as unknown[])[10]), [107]);
  t.deepEqual(parseFlowSync(wire, 10).ct.map((x) => x.ageMs), [600, null, MAX_AGE_MS], 'what is sent parses back');
});

test('ages and marks: whole ms, clamped; an unknown mark (0) is an unknown age and back', (t) => {
  const now = 50_000_000_000n; // 50 s after boot
  t.is(ageOf(now - 1_500_000n, now), 1);
  t.is(ageOf(now + 5n, now), 0, 'a mark after now (read races): age 0');
  t.is(ageOf(0n, now), null);
  t.is(ageOf(1n, now * 100_000n), MAX_AGE_MS, 'older than 7 days: clamped');
  t.is(markOf(1, now), now - 1_000_000n);
  t.is(markOf(null, now), 0n);
  t.is(markOf(60_000, now), 1n, 'an age before this node\'s boot: the oldest known mark, never 0 (unknown) or negative');
});

test('a peer\'s choice is newer only by more than the margin; unknown marks never win and always lose', (t) => {
  const s = 1_000_000_000n;
  t.true(newerChoice(10n * s, 8n * s, 1000));
  t.false(newerChoice(9n * s, 8n * s, 1000), 'exactly the margin: not newer');
  t.false(newerChoice(8n * s + 500_000_000n, 8n * s, 1000), 'within the margin');
  t.false(newerChoice(5n * s, 8n * s, 1000), 'older');
  t.false(newerChoice(0n, 8n * s, 1000), 'a peer\'s unknown age never replaces');
  t.true(newerChoice(1n, 0n, 1000), 'a held entry of unknown age is the oldest');
  t.false(newerChoice(0n, 0n, 1000));
});

test('ends of translations travel as `gone` (the snat fields, idleMs their last packet\'s age as of sending); they count towards the entry bound', (t) => {
  const e = parseFlowSync({ v: 1, ct: [], snat: [], gone: [[...SNAT, 5, 300]] }, 10);
  t.deepEqual(e.gone!.map((x) => [x.clientPort, x.ageMs, x.idleMs]), [[5001, 5, 300]]);
  const wire = encodeFlowSync([{ kind: 'gone', e: e.gone![0]!, at: 1000 }], 1200);
  t.deepEqual((wire.gone![0] as unknown[]).slice(9), [false, 205, 500]);
  t.deepEqual(wire.snat, []);
  t.is(parseFlowSync({ v: 1, ct: [], snat: [] }, 10).gone, undefined);
  t.throws(() => parseFlowSync({ v: 1, ct: [], snat: [], gone: {} }, 10), { instanceOf: BadBody });
  t.throws(() => parseFlowSync({ v: 1, ct: [CT], snat: [SNAT], gone: [SNAT, SNAT] }, 3), { instanceOf: BadBody }, '4 entries > 3');
});
