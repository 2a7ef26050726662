// The authenticated peer channel (src/reconciler/peer/): real channels on 127.0.0.1. Attackers: a request without
// the secret, from a node that is not an lb node, replayed, future-dated or stale, oversized, too many; answers
// forged by an impostor listening at a peer's address (wrong MAC, a replayed genuine answer, dated 2099, speaking
// for another node). Each is refused and counted; the benign exchange still answers.
import test from 'ava';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { startPeerChannel, secretAuth, PeerError, type PeerChannel, type PeerAddress, type RejectReason } from '../../src/reconciler/peer/index.js';
import { newNonce, PEER_PATH_PREFIX, seal, type Envelope } from '../../src/reconciler/peer/frame.js';
import { NonceWindow } from '../../src/reconciler/peer/replay.js';

const SECRET = randomBytes(32).toString('base64');
const OTHER = randomBytes(32).toString('base64');

interface Node {
  ch: PeerChannel;
  rejected: { reason: RejectReason; direction: string }[];
}

async function node(t: import('ava').ExecutionContext, name: string, peers: () => PeerAddress[], secret = SECRET): Promise<Node> {
  const rejected: Node['rejected'] = [];
  const ch = await startPeerChannel({ node: name, host: '127.0.0.1', port: 0, auth: secretAuth(secret), peers,
    metrics: { rejected: (reason, direction) => rejected.push({ reason, direction }) } });
  t.teardown(() => ch.close());
  return { ch, rejected };
}

/** lb-1 and lb-2 know each other; each serves 'echo' (answers who asked and what). */
async function pair(t: import('ava').ExecutionContext) {
  const book: PeerAddress[] = [];
  const peersOf = (self: string) => () => book.filter((p) => p.node !== self);
  const lb1 = await node(t, 'lb-1', peersOf('lb-1'));
  const lb2 = await node(t, 'lb-2', peersOf('lb-2'));
  book.push({ node: 'lb-1', url: lb1.ch.url }, { node: 'lb-2', url: lb2.ch.url });
  for (const n of [lb1, lb2]) n.ch.serve('echo', (from, body) => ({ from, body }));
  return { lb1, lb2, book };
}

/** A raw POST with the given headers and body; the status, headers and body of the answer. */
function post(url: string, kind: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${PEER_PATH_PREFIX}${kind}`, { method: 'POST', headers: { ...headers, 'content-length': String(body.length) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function sealed(secret: string, e: Partial<Envelope> & { from: string; to: string }, body: Buffer): Record<string, string> {
  return seal(secretAuth(secret), { direction: 'request', kind: 'echo', time: Date.now(), nonce: newNonce(), ...e }, body);
}

test('benign: both ways, each answer authenticated and bound to its request', async (t) => {
  const { lb1, lb2 } = await pair(t);
  t.deepEqual(await lb1.ch.request('lb-2', 'echo', { n: 1 }), { from: 'lb-1', body: { n: 1 } });
  t.deepEqual(await lb2.ch.request('lb-1', 'echo', [1, 2]), { from: 'lb-2', body: [1, 2] });
  // Concurrent requests each get their own answer.
  const answers = await Promise.all([1, 2, 3, 4, 5].map((n) => lb1.ch.request('lb-2', 'echo', n)));
  t.deepEqual(answers.map((a) => (a as { body: number }).body), [1, 2, 3, 4, 5]);
  t.deepEqual([...lb1.rejected, ...lb2.rejected], []);
});

test('requests without the secret, from unknown senders, replayed, future-dated or stale are refused and counted', async (t) => {
  const { lb2, book } = await pair(t);
  let handled = 0;
  lb2.ch.serve('vote', () => ++handled);
  const body = Buffer.from('{"down":["198.51.100.21"]}');
  const url = book.find((p) => p.node === 'lb-2')!.url;
  const send = (headers: Record<string, string>) => post(url, 'vote', headers, body);
  const e = (over: Partial<Envelope> = {}) => ({ kind: 'vote', from: 'lb-1', to: 'lb-2', ...over });

  t.is((await send(sealed(OTHER, e(), body))).status, 401, 'wrong secret');
  t.is((await send(sealed(SECRET, e({ from: 'be-1' }), body))).status, 403, 'a node that is not an lb node, even with the secret');
  t.is((await send(sealed(SECRET, e({ to: 'lb-3' }), body))).status, 403, 'addressed to another node');
  t.is((await send(sealed(SECRET, e({ time: Date.parse('2099-01-01T00:00:00Z') }), body))).status, 401, 'dated 2099');
  t.is((await send(sealed(SECRET, e({ time: Date.now() - 60_000 }), body))).status, 401, 'a minute old');
  const genuine = sealed(SECRET, e(), body);
  const first = await send(genuine);
  t.is(first.status, 200, 'the genuine message passes');
  t.is((await send(genuine)).status, 401, 'the same message again: a replay');
  // The body is bound: a genuine header set over another body fails the MAC.
  t.is((await post(url, 'vote', sealed(SECRET, e(), body), Buffer.from('{"down":[]}'))).status, 401, 'body swapped');
  t.is(handled, 1, 'only the genuine message reached the handler');
  t.deepEqual(lb2.rejected.map((r) => `${r.direction} ${r.reason}`),
    ['in bad-mac', 'in unknown-sender', 'in wrong-receiver', 'in future', 'in stale', 'in replay', 'in bad-mac']);
  t.deepEqual(lb2.ch.rejections().counts, { 'bad-mac': 2, 'unknown-sender': 1, 'wrong-receiver': 1, future: 1, stale: 1, replay: 1 });
  t.is(lb2.ch.rejections().last?.reason, 'bad-mac');
});

test('sizes are capped per kind and requests per peer are rate bound', async (t) => {
  const { lb1, lb2 } = await pair(t);
  lb2.ch.serve('small', () => 'ok', { maxBodyBytes: 100, ratePerSec: 1, burst: 3 });
  await t.throwsAsync(lb1.ch.request('lb-2', 'small', 'x'.repeat(200)), { instanceOf: PeerError, message: /HTTP 413/ });
  for (let i = 0; i < 3; i++) t.is(await lb1.ch.request('lb-2', 'small', i), 'ok');
  const err = await t.throwsAsync(lb1.ch.request('lb-2', 'small', 4), { instanceOf: PeerError });
  t.is(err?.reason, 'refused');
  t.deepEqual(lb2.rejected.map((r) => r.reason), ['too-large', 'rate-limited']);
  // The bound is per kind: echo still answers.
  t.truthy(await lb1.ch.request('lb-2', 'echo', 1));
  // Answers are capped too.
  lb2.ch.serve('big', () => 'y'.repeat(5000));
  await t.throwsAsync(lb1.ch.request('lb-2', 'big', null, { maxAnswerBytes: 1000 }), { instanceOf: PeerError, message: /over 1000 bytes/ });
  t.is(lb1.rejected.at(-1)?.reason, 'too-large');
});

test('forged answers from an impostor at a peer\'s address are refused and counted', async (t) => {
  const { lb1, lb2, book } = await pair(t);
  // A genuine answer of lb-2 to an earlier request of lb-1, as recorded on the wire.
  const reqBody = Buffer.from('null');
  const recorded = await post(lb2.ch.url, 'echo', sealed(SECRET, { kind: 'echo', from: 'lb-1', to: 'lb-2' }, reqBody), reqBody);
  t.is(recorded.status, 200);
  let answer: (req: { headers: IncomingHttpHeaders }) => { headers: Record<string, string>; body: Buffer } = () => ({ headers: {}, body: Buffer.alloc(0) });
  const impostor: Server = createServer((req, res) => {
    req.resume();
    const a = answer(req);
    res.writeHead(200, { ...a.headers, 'content-type': 'application/json' }).end(a.body);
  });
  await new Promise<void>((r) => impostor.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => { impostor.close(() => r()); impostor.closeAllConnections(); }));
  book.find((p) => p.node === 'lb-2')!.url = `http://127.0.0.1:${(impostor.address() as { port: number }).port}`;
  const forged = Buffer.from('{"from":"lb-1","body":"all reals down"}');
  const answerTo = (secret: string, over: Partial<Envelope> = {}) => (req: { headers: IncomingHttpHeaders }) => ({
    headers: seal(secretAuth(secret), { direction: 'answer', kind: 'echo', from: 'lb-2', to: 'lb-1', time: Date.now(), nonce: newNonce(),
      replyTo: req.headers['x-gitlb-peer-nonce'] as string, ...over }, forged),
    body: forged,
  });
  const cases: [string, typeof answer, RejectReason][] = [
    ['wrong MAC (another secret)', answerTo(OTHER), 'bad-mac'],
    ['no authentication at all', () => ({ headers: {}, body: forged }), 'malformed'],
    ['a replayed genuine answer', () => ({ headers: Object.fromEntries(Object.entries(recorded.headers).filter(([k]) => k.startsWith('x-gitlb-peer-'))) as Record<string, string>, body: recorded.body }), 'unbound-answer'],
    ['dated 2099 (with the secret)', answerTo(SECRET, { time: Date.parse('2099-01-01T00:00:00Z') }), 'future'],
    ['speaking for another node', answerTo(SECRET, { from: 'lb-3' }), 'wrong-receiver'],
  ];
  for (const [name, a, reason] of cases) {
    answer = a;
    const err = await t.throwsAsync(lb1.ch.request('lb-2', 'echo', null), { instanceOf: PeerError }, name);
    t.is(err?.reason, reason, name);
  }
  t.deepEqual(lb1.rejected.map((r) => `${r.direction} ${r.reason}`), cases.map(([, , r]) => `out ${r}`));
  // Control: the same impostor answering correctly (as a holder of the secret would) is accepted.
  answer = answerTo(SECRET);
  t.deepEqual(await lb1.ch.request('lb-2', 'echo', null), { from: 'lb-1', body: 'all reals down' });
});

test('a peer that is not in the config cannot be asked, and an unreachable one is a typed error', async (t) => {
  const { lb1, book } = await pair(t);
  await t.throwsAsync(lb1.ch.request('lb-9', 'echo', null), { instanceOf: PeerError, message: /not another lb node/ });
  const closed = await node(t, 'lb-2', () => []);
  const url = closed.ch.url;
  await closed.ch.close();
  book.find((p) => p.node === 'lb-2')!.url = url;
  const err = await t.throwsAsync(lb1.ch.request('lb-2', 'echo', null, { timeoutMs: 1000 }), { instanceOf: PeerError });
  t.is(err?.reason, 'unreachable');
});

test('one peer filling its nonce window never makes another peer\'s messages replays', (t) => {
  const w = new NonceWindow(40_000, 3);
  const now = Date.now();
  for (let i = 0; i < 3; i++) t.true(w.admit('lb-1', `n${i}`, now, now));
  t.false(w.admit('lb-1', 'n3', now, now), 'lb-1 is held to its own capacity');
  t.true(w.admit('lb-2', 'n0', now, now), 'lb-2 has a window of its own: the same nonce text is not a replay of lb-1\'s');
  t.true(w.admit('lb-2', 'm1', now, now));
  t.false(w.admit('lb-2', 'm1', now, now), 'a replay of lb-2 is still refused');
  t.true(w.admit('lb-1', 'n3', now + 40_001, now + 40_001), 'a window later lb-1 is admitted again');
});

test('a message refused for its rate is not remembered (a flood fills no nonce memory); a replay costs no rate', async (t) => {
  const { lb2, book } = await pair(t);
  lb2.ch.serve('small', () => 'ok', { ratePerSec: 2, burst: 1 });
  const url = book.find((p) => p.node === 'lb-2')!.url;
  const body = Buffer.from('1');
  const e = { kind: 'small', from: 'lb-1', to: 'lb-2' };
  const first = sealed(SECRET, e, body);
  t.is((await post(url, 'small', first, body)).status, 200);
  const second = sealed(SECRET, e, body);
  t.is((await post(url, 'small', second, body)).status, 429, 'over the rate');
  t.is((await post(url, 'small', first, body)).status, 401, 'a replay is refused as one, before the rate');
  await new Promise((r) => setTimeout(r, 700));
  t.is((await post(url, 'small', second, body)).status, 200, 'the refused message was not remembered');
  t.is((await post(url, 'small', second, body)).status, 401, 'once accepted it is');
  t.deepEqual(lb2.rejected.map((r) => r.reason), ['rate-limited', 'replay', 'replay']);
});

test('a message dated before the daemon started is refused: a restart does not reopen the replay window', async (t) => {
  const { book } = await pair(t);
  const body = Buffer.from('null');
  const genuine = sealed(SECRET, { kind: 'echo', from: 'lb-1', to: 'lb-2' }, body);
  t.is((await post(book.find((p) => p.node === 'lb-2')!.url, 'echo', genuine, body)).status, 200);
  await new Promise((r) => setTimeout(r, 5));
  // lb-2 restarts: a new channel, its nonces (in memory) gone
  const restarted = await node(t, 'lb-2', () => book.filter((p) => p.node !== 'lb-2'));
  restarted.ch.serve('echo', (from, b) => ({ from, body: b }));
  t.is((await post(restarted.ch.url, 'echo', genuine, body)).status, 401, 'the recorded message replayed into the restarted daemon');
  t.deepEqual(restarted.rejected.map((r) => r.reason), ['stale']);
  const fresh = sealed(SECRET, { kind: 'echo', from: 'lb-1', to: 'lb-2' }, body);
  t.is((await post(restarted.ch.url, 'echo', fresh, body)).status, 200, 'a new message after the restart passes');
});
