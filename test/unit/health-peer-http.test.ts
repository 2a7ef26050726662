// Consensus peers over HTTP (src/reconciler/health/peer-http.ts): real HTTP servers on 127.0.0.1, the cluster's
// shared secret both ways, a peer answering with a forged signature, a peer that goes away.
import test from 'ava';
import { createServer } from 'node:http';
import { createHmac } from 'node:crypto';
import { fetchPeerObservations, PeerHttpReader, PEER_PATH, startPeerServer, verifyPeerRequest } from '../../src/reconciler/health/peer-http.js';
import { PeerObservationFeed } from '../../src/reconciler/health/peer-feed.js';

const SECRET = 'cluster-shared-secret-0123456789';
const A = '198.51.100.21';
const health = (up: boolean) => ({ publishedAt: new Date().toISOString(), mode: 'consensus', observations: { web: { [A]: { up, since: '2026-01-01T00:00:00.000Z' } } } });

test('a peer with the secret reads observations; without it the server refuses and nothing is read', async (t) => {
  let up = true;
  const srv = await startPeerServer({ host: '127.0.0.1', port: 0, node: 'lb-2', secret: SECRET, health: () => health(up) });
  t.teardown(() => srv.close());
  const obs = await fetchPeerObservations(srv.url, { node: 'lb-1', peer: 'lb-2', secret: SECRET, timeoutMs: 2000 });
  t.is(obs.node, 'lb-2');
  t.deepEqual(obs.observations.web?.[A]?.up, true);
  up = false;
  t.false((await fetchPeerObservations(srv.url, { node: 'lb-1', peer: 'lb-2', secret: SECRET, timeoutMs: 2000 })).observations.web![A]!.up);
  await t.throwsAsync(fetchPeerObservations(srv.url, { node: 'lb-1', peer: 'lb-2', secret: 'another-secret-0123456789', timeoutMs: 2000 }), { message: /HTTP 401/ });
  // The answer must speak for the peer that was asked.
  await t.throwsAsync(fetchPeerObservations(srv.url, { node: 'lb-1', peer: 'lb-3', secret: SECRET, timeoutMs: 2000 }), { message: /another node/ });
});

test('an answer without the right signature is dropped: no one without the secret injects votes', async (t) => {
  const forged = createServer((req, res) => {
    const body = Buffer.from(JSON.stringify({ node: 'lb-2', health: health(false) }));
    res.writeHead(200, { 'x-gitlb-signature': `sha256=${createHmac('sha256', 'guessed-secret').update(body).digest('hex')}` }).end(body);
    req.resume();
  });
  await new Promise<void>((r) => forged.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => forged.close(() => r())));
  const url = `http://127.0.0.1:${(forged.address() as { port: number }).port}`;
  await t.throwsAsync(fetchPeerObservations(url, { node: 'lb-1', peer: 'lb-2', secret: SECRET, timeoutMs: 2000 }), { message: /signature does not match/ });
});

test('request authentication: wrong MAC, other reader name and stale time are refused', (t) => {
  const now = Date.now();
  const auth = (reader: string, ts: number, secret = SECRET) => `${ts}.${createHmac('sha256', secret).update(`GET ${PEER_PATH} ${reader} ${ts}`).digest('hex')}`;
  t.is(verifyPeerRequest({ 'x-gitlb-peer': 'lb-1', 'x-gitlb-peer-auth': auth('lb-1', now) }, SECRET, now), null);
  t.regex(verifyPeerRequest({ 'x-gitlb-peer': 'lb-1', 'x-gitlb-peer-auth': auth('lb-1', now, 'nope-nope-nope-nope') }, SECRET, now)!, /bad/);
  t.regex(verifyPeerRequest({ 'x-gitlb-peer': 'lb-9', 'x-gitlb-peer-auth': auth('lb-1', now) }, SECRET, now)!, /bad/);
  t.regex(verifyPeerRequest({ 'x-gitlb-peer': 'lb-1', 'x-gitlb-peer-auth': auth('lb-1', now - 60_000) }, SECRET, now)!, /30 s off/);
  t.regex(verifyPeerRequest({ 'x-gitlb-peer': '../x', 'x-gitlb-peer-auth': auth('lb-1', now) }, SECRET, now)!, /X-Gitlb-Peer/);
});

test('the feed reads peers directly, reports changes, and keeps a vanished peer\'s last vote', async (t) => {
  let up = true;
  const servers = await Promise.all(['lb-2', 'lb-3'].map((node) => startPeerServer({ host: '127.0.0.1', port: 0, node, secret: SECRET, health: () => health(up) })));
  t.teardown(() => Promise.all(servers.map((s) => s.close())));
  const peers = [{ node: 'lb-2', url: servers[0]!.url }, { node: 'lb-3', url: servers[1]!.url }];
  const warnings: string[] = [];
  const reader = new PeerHttpReader({ node: 'lb-1', secret: SECRET, timeoutMs: 1000, log: { warn: (m) => warnings.push(m) } });
  let changes = 0;
  const feed = new PeerObservationFeed({ node: 'lb-1', readObservations: () => reader.read(peers), onChange: () => changes++ });
  await feed.refresh();
  t.deepEqual(feed.current().map((p) => [p.node, p.observations.web![A]!.up]), [['lb-2', true], ['lb-3', true]]);
  t.is(changes, 1);
  await feed.refresh();
  t.is(changes, 1, 'same observations: no change reported');
  up = false;
  await feed.refresh();
  t.is(changes, 2);
  await servers[1]!.close();
  up = true;
  await feed.refresh();
  await feed.refresh();
  t.deepEqual(feed.current().map((p) => [p.node, p.observations.web![A]!.up]), [['lb-2', true], ['lb-3', false]], 'lb-3 keeps its last vote');
  const seen = warnings.length;
  t.true(seen >= 1 && warnings.every((w) => w.includes('lb-3')), warnings.join(' | '));
  await feed.refresh();
  t.is(warnings.length, seen, `one warning per distinct problem, not one per round: ${warnings.join(' | ')}`);
});

test('a recorded answer replayed to a later request is dropped: the answer MAC binds the request it answers', async (t) => {
  const srv = await startPeerServer({ host: '127.0.0.1', port: 0, node: 'lb-2', secret: SECRET, health: () => health(false) });
  t.teardown(() => srv.close());
  // Record one genuine exchange, as someone on the path between the lb nodes could.
  const ts = Date.now() - 5_000;
  const auth = `${ts}.${createHmac('sha256', SECRET).update(`GET ${PEER_PATH} lb-1 ${ts}`).digest('hex')}`;
  const recorded = await fetch(`${srv.url}${PEER_PATH}`, { headers: { 'x-gitlb-peer': 'lb-1', 'x-gitlb-peer-auth': auth } });
  t.is(recorded.status, 200);
  const sig = recorded.headers.get('x-gitlb-signature')!;
  const body = Buffer.from(await recorded.arrayBuffer());
  // The replayer answers every later request with the recorded, genuinely signed answer.
  const replay = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json', 'x-gitlb-signature': sig }).end(body);
  });
  await new Promise<void>((r) => replay.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => replay.close(() => r())));
  const url = `http://127.0.0.1:${(replay.address() as { port: number }).port}`;
  await t.throwsAsync(fetchPeerObservations(url, { node: 'lb-1', peer: 'lb-2', secret: SECRET, timeoutMs: 2000 }), { message: /signature does not match/ });
  // The genuine server still answers a fresh request.
  t.false((await fetchPeerObservations(srv.url, { node: 'lb-1', peer: 'lb-2', secret: SECRET, timeoutMs: 2000 })).observations.web![A]!.up);
});
