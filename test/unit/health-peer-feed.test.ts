// The consensus feed: peers' votes come only from the authenticated reader (peer-exchange.ts); without one no peer
// votes and the feed says so (consensus mode without a peer secret).
import test from 'ava';
import { PeerObservationFeed } from '../../src/reconciler/health/peer-feed.js';
import type { NodeObservations } from '../../src/render/health-quorum.js';

const obs = (node: string, up: boolean, publishedAt = '2026-11-29T10:00:00.000Z'): NodeObservations => ({
  node, publishedAt, observations: { web: { '198.51.100.21': { up, since: '2026-11-29T09:00:00.000Z' } } },
});

test('collects every peer but itself, reports changes of observations only', async (t) => {
  let votes = [obs('lb-1', true), obs('lb-2', true)];
  let changes = 0;
  const feed = new PeerObservationFeed({ node: 'lb-1', readObservations: async () => votes, onChange: () => changes++ });
  await feed.refresh();
  t.deepEqual(feed.current().map((p) => p.node), ['lb-2'], 'a vote in its own name is not a peer vote');
  t.is(changes, 1);
  votes = [obs('lb-2', true, '2026-11-29T10:00:05.000Z')];
  await feed.refresh();
  t.is(changes, 1, 'a newer publish time with the same observations does not re-render');
  t.is(feed.current()[0]!.publishedAt, '2026-11-29T10:00:05.000Z', 'the staleness clock still sees the new time');
  votes = [obs('lb-3', false), obs('lb-2', false)];
  await feed.refresh();
  t.is(changes, 2);
  t.deepEqual(feed.current().map((p) => [p.node, p.observations['web']!['198.51.100.21']!.up]), [['lb-2', false], ['lb-3', false]]);
});

test('without an authenticated reader no peer votes, and the feed reports it', async (t) => {
  let unauthenticated = 0;
  const feed = new PeerObservationFeed({ node: 'lb-1', onChange: () => t.fail('nothing to change'), onUnauthenticated: () => unauthenticated++ });
  await feed.refresh();
  await feed.refresh();
  t.deepEqual(feed.current(), []);
  t.is(unauthenticated, 2);
});
