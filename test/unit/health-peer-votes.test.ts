// Consensus votes through the real pieces an lb daemon assembles (node-daemon.ts): HealthService, the peer wiring
// (health/peer-wiring.ts: the authenticated channel, the vote reader), the feed, and render. lb-1 is the node under
// test; lb-2 and lb-3 are real peer channels on 127.0.0.2 and 127.0.0.3, the reals TCP listeners on 127.0.0.1x (the
// model's addresses are moved there after parsing: the config refuses loopback addresses, this test needs them).
// Attacks (issue 23, items 4 and 5): impostors without the secret voting a real down, a genuine peer's vote dated
// 2099: the table is unchanged and the refusals are counted and reported. Benign: two genuine peers voting it down
// take it out (quorum 2 of 3), and bring it back.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import net from 'node:net';
import { newNonce, seal } from '../../src/reconciler/peer/frame.js';
import { parseConfig } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { HealthService } from '../../src/reconciler/health/service.js';
import { PeerObservationFeed } from '../../src/reconciler/health/peer-feed.js';
import { healthPeers, PEER_SILENT_MS } from '../../src/reconciler/health/peer-wiring.js';
import { lbPeers, serveObservations } from '../../src/reconciler/health/peer-exchange.js';
import { secretAuth, startPeerChannel, type PeerChannel, type RejectReason } from '../../src/reconciler/peer/index.js';
import type { ConfigModel } from '../../src/render/model.js';
import { clusterYaml, serviceYaml } from '../reconcile-helpers.js';

const REALS = ['198.51.100.10', '198.51.100.11', '198.51.100.12'];
/** Where the reals are for this test: loopback addresses with a TCP listener each, so lb-1's own checks see them up. */
const REAL_LOOPBACK = ['127.0.0.10', '127.0.0.11', '127.0.0.12'];
const VICTIM = REAL_LOOPBACK[1]!;
const CHECK_PORT = 20_000 + ((process.pid + 7) % 20_000);
const SECRET = randomBytes(32).toString('base64');
const PORT = 20_000 + (process.pid % 20_000);
const LOOPBACK: Record<string, string> = { 'lb-1': '127.0.0.1', 'lb-2': '127.0.0.2', 'lb-3': '127.0.0.3' };

/** The consensus config of three lb nodes; then each node's address moved to its loopback one for this test. */
function model(mode: 'consensus' | 'local' = 'consensus'): ConfigModel {
  const files: Record<string, string> = {
    'cluster.yaml': clusterYaml() + `  health: { mode: ${mode}, staleAfter: 30s }\n`,
    'services/web.yaml': serviceYaml('web', '203.0.113.10', REALS) +
      `  healthCheck: { type: tcp, port: ${CHECK_PORT}, interval: 200ms, timeout: 150ms, rise: 1, fall: 1 }\n`,
  };
  for (const [i, n] of ['lb-1', 'lb-2', 'lb-3'].entries())
    files[`nodes/${n}.yaml`] = `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${n} }\nspec:\n  role: lb\n  interface: eth0\n  addresses: [198.51.100.${101 + i}]\n  allowedVips: [203.0.113.0/24]\n`;
  const r = parseConfig(Object.entries(files).map(([path, text]) => ({ path, content: Buffer.from(text) })));
  if (!r.model) throw new Error(JSON.stringify(r.diagnostics));
  for (const n of r.model.nodes) n.spec.addresses = [LOOPBACK[n.metadata.name]!];
  for (const [i, real] of r.model.services[0]!.spec.reals.entries()) real.address = REAL_LOOPBACK[i]!;
  return r.model;
}

/** A peer's answer as HealthService.status() serves it, voting the victim down or not. */
const vote = (down: boolean, publishedAt = new Date().toISOString()) => ({
  publishedAt, mode: 'consensus', failOpen: [], failClosed: [], services: {}, omittedReals: 0,
  observations: down ? { web: { [VICTIM]: { up: false, since: '2026-01-01T00:00:00.000Z' } } } : {},
});

async function lb1(t: import('ava').ExecutionContext, m: ConfigModel, auth = true) {
  const rejected: { reason: RejectReason; direction: string }[] = [];
  let feed: PeerObservationFeed | null = null;
  const health = new HealthService({ node: 'lb-1', peers: () => feed?.current() ?? [], peerReport: () => peers.report() });
  health.update(m);
  t.teardown(() => health.checker.stop());
  t.true(await health.settled(m, 5000), 'lb-1 checked every real');
  // As node-daemon.ts assembles it: the node's channel (only the config's other lb nodes may speak), then health.
  const metrics = { rejected: (reason: RejectReason, direction: 'in' | 'out') => rejected.push({ reason, direction }) };
  const channel = auth ? await startPeerChannel({ node: 'lb-1', host: '127.0.0.1', port: PORT, auth: secretAuth(SECRET), peers: () => lbPeers(m, 'lb-1', PORT), metrics }) : null;
  if (channel) t.teardown(() => channel.close());
  const peers = healthPeers({ node: 'lb-1', channel, health: () => health.status(), model: () => m, metrics, log: { warn: () => {} } });
  feed = new PeerObservationFeed({ node: 'lb-1', readObservations: peers.readObservations, onUnauthenticated: () => peers.unauthenticated(), onChange: () => {} });
  const entries = () => {
    const d = renderDesiredState(m, 'lb-1', health.view());
    const id = d.reals.find((r) => r.address === VICTIM)!.id;
    return d.services[0]!.ring.filter((x) => x === id).length;
  };
  return { health, peers, feed, entries, rejected };
}

async function peer(t: import('ava').ExecutionContext, m: ConfigModel, node: string, secret: string, answer: () => unknown): Promise<PeerChannel> {
  const ch = await startPeerChannel({ node, host: LOOPBACK[node]!, port: PORT, auth: secretAuth(secret), peers: () => lbPeers(m, node, PORT) });
  serveObservations(ch, node, answer);
  t.teardown(() => ch.close());
  return ch;
}

/** Listens where `node` should, answers every request with a down vote for the victim, MACed with a guessed secret. */
async function impostor(t: import('ava').ExecutionContext, node: string): Promise<Server> {
  const guessed = secretAuth(randomBytes(32).toString('base64'));
  const s = createServer((req, res) => {
    req.resume();
    const body = Buffer.from(JSON.stringify({ node, health: vote(true) }));
    res.writeHead(200, { 'content-type': 'application/json', ...seal(guessed, { direction: 'answer', kind: 'health.observations', from: node, to: 'lb-1',
      time: Date.now(), nonce: newNonce(), replyTo: String(req.headers['x-gitlb-peer-nonce']) }, body) }).end(body);
  });
  await new Promise<void>((r) => s.listen(PORT, LOOPBACK[node], r));
  t.teardown(() => new Promise<void>((r) => { s.close(() => r()); s.closeAllConnections(); }));
  return s;
}

test.before(async (t) => {
  for (const a of REAL_LOOPBACK) {
    const s = net.createServer((c) => c.destroy());
    await new Promise<void>((r) => s.listen(CHECK_PORT, a, r));
    reals.push(s);
  }
  t.pass();
});
const reals: net.Server[] = [];
test.after.always(() => { for (const s of reals) s.close(); });

test.serial('impostors and votes dated 2099 move nothing and are counted; genuine votes take the real out and back', async (t) => {
  const m = model();
  const n = await lb1(t, m);
  await n.feed.refresh();
  const full = n.entries();
  t.true(full > 0);

  // Impostors at lb-2's and lb-3's addresses: they answer every request, framed and MACed with a guessed secret.
  const impostors = [await impostor(t, 'lb-2'), await impostor(t, 'lb-3')];
  for (let i = 0; i < 3; i++) await n.feed.refresh();
  t.is(n.entries(), full, 'unauthenticated votes move nothing');
  t.deepEqual(n.health.decide()?.consensus?.voters, ['lb-1']);
  const report = n.health.status()!.peers!;
  t.is(report.authentication, 'shared-secret');
  t.is(report.rejected['bad-mac'], 6, 'every refused answer is counted');
  t.regex(report.warning ?? '', /6 peer messages refused since start \(latest: bad-mac answer of lb-[23]/);
  t.true(n.rejected.every((r) => r.reason === 'bad-mac' && r.direction === 'out') && n.rejected.length === 6);
  for (const s of impostors) await new Promise<void>((r) => { s.close(() => r()); s.closeAllConnections(); });

  // A holder of the secret (or a peer with a broken clock) whose vote is dated 2099: ignored, counted as future.
  const future = [await peer(t, m, 'lb-2', SECRET, () => vote(true, '2099-01-01T00:00:00.000Z')),
    await peer(t, m, 'lb-3', SECRET, () => vote(true, '2099-01-01T00:00:00.000Z'))];
  await n.feed.refresh();
  t.is(n.entries(), full, 'future-dated votes move nothing');
  t.is(n.health.status()!.peers!.rejected.future, 2);
  for (const ch of future) await ch.close();

  // Genuine votes: lb-2 and lb-3 see the victim down; quorum 2 of 3 takes it out of lb-1's table.
  let down = true;
  await peer(t, m, 'lb-2', SECRET, () => vote(down));
  await peer(t, m, 'lb-3', SECRET, () => vote(down));
  await n.feed.refresh();
  t.deepEqual(n.health.decide()?.consensus?.voters, ['lb-1', 'lb-2', 'lb-3']);
  t.is(n.entries(), 0, 'authenticated votes still take a real out');
  down = false;
  await n.feed.refresh();
  t.is(n.entries(), full, 'and bring it back');
  t.is(n.health.status()!.peers!.rejected['bad-mac'], 6, 'nothing more refused');
});

test.serial('without a peer secret no peer votes are read in consensus mode, and status says so', async (t) => {
  const m = model();
  const n = await lb1(t, m, false);
  await peer(t, m, 'lb-2', SECRET, () => vote(true));
  await peer(t, m, 'lb-3', SECRET, () => vote(true));
  await n.feed.refresh();
  t.is(n.health.decide()?.consensus?.voters.join(), 'lb-1');
  t.true(n.entries() > 0);
  const report = n.health.status()!.peers!;
  t.is(report.authentication, 'none');
  t.regex(report.warning ?? '', /consensus mode without peer authentication/);
  // Local mode needs no peers: no warning.
  const local = await lb1(t, model('local'), false);
  t.is(local.health.status()!.peers!.warning, undefined);
});

test.serial('liveness: a peer that stops answering is reported silent after PEER_SILENT_MS, an impostor is never heard, one that answers again is not silent', async (t) => {
  const m = model('local');
  let clock = Date.now();
  const channel = await startPeerChannel({ node: 'lb-1', host: '127.0.0.1', port: PORT, auth: secretAuth(SECRET), peers: () => lbPeers(m, 'lb-1', PORT) });
  t.teardown(() => channel.close());
  const peers = healthPeers({ node: 'lb-1', channel, health: () => null, model: () => m, log: { warn: () => {} }, now: () => clock });
  const answer = () => vote(false, new Date(clock).toISOString());
  let two = await peer(t, m, 'lb-2', SECRET, answer);
  await impostor(t, 'lb-3');
  const start = clock;
  await peers.readObservations!();
  t.deepEqual(peers.silent(), [], 'nobody is silent right after the first round');
  t.is(peers.report().silent, undefined);

  // lb-2's daemon stops; lb-3 is an impostor all along (bad MAC): neither answers with a valid vote.
  await two.close();
  clock += PEER_SILENT_MS - 1;
  await peers.readObservations!();
  t.deepEqual(peers.silent(), [], 'not yet: one slow round does not name a node');
  clock += 1;
  await peers.readObservations!();
  const silent = peers.silent();
  t.deepEqual(silent.map((p) => [p.peer, p.since, p.heard]), [['lb-2', new Date(start).toISOString(), true], ['lb-3', new Date(start).toISOString(), false]]);
  t.regex(silent[0]!.lastError ?? '', /lb-2/);
  t.regex(silent[1]!.lastError ?? '', /bad-mac|MAC/i);
  t.deepEqual(peers.report().silent, silent, 'the status report carries the same list');

  // lb-2 is back: heard again, not silent; lb-3 stays silent.
  two = await peer(t, m, 'lb-2', SECRET, answer);
  await peers.readObservations!();
  t.deepEqual(peers.silent().map((p) => p.peer), ['lb-3']);
});
