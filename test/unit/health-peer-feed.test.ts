// The consensus feed: peers' observations read from their status documents.
import test from 'ava';
import { PeerObservationFeed } from '../../src/reconciler/health/peer-feed.js';

const doc = (node: string, up: boolean, publishedAt = '2026-11-29T10:00:00.000Z') => ({
  node,
  health: { publishedAt, observations: { web: { '198.51.100.21': { up, since: '2026-11-29T09:00:00.000Z' } } } },
});

test('collects every peer but itself, reports changes of observations only', async (t) => {
  let docs: { node: string }[] = [doc('lb-1', true), doc('lb-2', true), { node: 'be-1' }];
  let changes = 0;
  const warnings: string[] = [];
  const feed = new PeerObservationFeed({ node: 'lb-1', readStatuses: async () => docs, onChange: () => changes++, log: { warn: (m) => warnings.push(m) } });
  await feed.refresh();
  t.deepEqual(feed.current().map((p) => p.node), ['lb-2']);
  t.is(changes, 1);
  // a newer publish time with the same observations does not re-render
  docs = [doc('lb-1', true), doc('lb-2', true, '2026-11-29T10:00:05.000Z')];
  await feed.refresh();
  t.is(changes, 1);
  t.is(feed.current()[0]!.publishedAt, '2026-11-29T10:00:05.000Z', 'the staleness clock still sees the new time');
  docs = [doc('lb-2', false), doc('lb-3', false)];
  await feed.refresh();
  t.is(changes, 2);
  t.deepEqual(feed.current().map((p) => [p.node, p.observations['web']!['198.51.100.21']!.up]), [['lb-2', false], ['lb-3', false]]);
  t.deepEqual(warnings, []);
});

test('a malformed peer does not vote and is reported once; read errors keep the last votes', async (t) => {
  const bad = { node: 'lb-3', health: { publishedAt: 'yesterday', observations: {} } };
  let fail = false;
  const warnings: string[] = [];
  const feed = new PeerObservationFeed({
    node: 'lb-1',
    readStatuses: async () => {
      if (fail) throw new Error('connection refused');
      return [doc('lb-2', false), bad];
    },
    onChange: () => {},
    log: { warn: (m) => warnings.push(m) },
  });
  await feed.refresh();
  await feed.refresh();
  t.deepEqual(feed.current().map((p) => p.node), ['lb-2']);
  t.is(warnings.filter((w) => w.includes('lb-3')).length, 1);
  fail = true;
  for (let i = 0; i < 30; i++) await feed.refresh(); // a minute of 2 s polls during a Git outage
  t.deepEqual(feed.current().map((p) => p.node), ['lb-2']);
  t.deepEqual(warnings.filter((w) => w.includes('connection refused')),
    ["health: cannot read peers' status: connection refused (logged again only when the error changes)"], 'one line for the outage');
  fail = false;
  await feed.refresh();
  t.is(warnings.at(-1), "health: reading peers' status recovered after 30 failed reads");
});
