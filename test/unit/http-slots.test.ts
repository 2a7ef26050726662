// The slot policy of the daemon's HTTP listeners (src/reconciler/http/http-limits.ts) on its own, with a given clock:
// what a flood can evict and what it cannot, the per-source cap, and that under the caps nothing is dropped. And
// the response deadline on a real socket: a client that never reads its answer loses its connection.
import test from 'ava';
import { connect } from 'node:net';
import { ConnectionSlots, createLimitedServer, listenHttp, sourceOf } from '../../src/reconciler/http/http-limits.js';

const LIMITS = { maxConnections: 4, maxConnectionsPerSource: 2, protectedMs: 2000 };

function slots() {
  const s = new ConnectionSlots(LIMITS);
  const dropped: string[] = [];
  const admit = (name: string, source: string, now: number) => s.admit(source, now, () => dropped.push(name));
  return { s, dropped, admit };
}

test('benign: under the caps nothing is dropped, whatever the connections do', (t) => {
  const { s, dropped, admit } = slots();
  const a = admit('a', '192.0.2.1', 0)!;
  admit('b', '192.0.2.1', 1);
  admit('c', '192.0.2.2', 2);
  s.requestStarted(a, 3);
  s.requestEnded(a, 4);
  admit('d', '192.0.2.3', 10_000);
  t.is(s.size, 4);
  t.deepEqual(dropped, []);
  t.deepEqual(s.stats, { evicted: 0, refused: 0, responseTimedOut: 0 });
});

test('a source at its cap evicts its own oldest idle connection, never another source\'s', (t) => {
  const { s, dropped, admit } = slots();
  admit('other', '192.0.2.9', 0);
  admit('a1', '192.0.2.1', 1);
  admit('a2', '192.0.2.1', 2);
  t.truthy(admit('a3', '192.0.2.1', 3));
  t.deepEqual(dropped, ['a1']);
  t.is(s.size, 3);
});

test('a source whose connections all work on complete requests cannot open more: the new one is refused', (t) => {
  const { s, dropped, admit } = slots();
  for (const [name, now] of [['a1', 0], ['a2', 1]] as const) s.requestStarted(admit(name, '192.0.2.1', now)!, now, () => false);
  t.is(admit('a3', '192.0.2.1', 100), null);
  t.deepEqual(dropped, []);
  t.is(s.stats.refused, 1);
  t.truthy(admit('b1', '192.0.2.2', 100), 'another source still gets in');
});

test('when all slots are taken, a newcomer evicts from the source holding the most, oldest first; a complete request is protected for protectedMs', (t) => {
  const { s, dropped, admit } = slots();
  const busy = admit('busy', '192.0.2.1', 0)!;
  s.requestStarted(busy, 0, () => false); // a complete request being answered
  admit('flood1', '198.51.100.7', 1);
  admit('flood2', '198.51.100.7', 2);
  const trickling = admit('trickle', '192.0.2.2', 3)!;
  s.requestStarted(trickling, 3, () => true); // headers in, body still arriving: evictable
  t.truthy(admit('probe1', '203.0.113.1', 10));
  t.deepEqual(dropped, ['flood1'], 'the heaviest source first');
  t.truthy(admit('probe2', '203.0.113.2', 11));
  t.deepEqual(dropped, ['flood1', 'flood2'], 'then, all sources holding one, the oldest that is not protected');
  t.truthy(admit('probe3', '203.0.113.3', 12));
  t.deepEqual(dropped, ['flood1', 'flood2', 'trickle']);
  // Left: busy (protected), probe1..3 (idle, newest). probe1 is the oldest evictable one.
  t.truthy(admit('probe4', '203.0.113.4', 1999));
  t.deepEqual(dropped.at(-1), 'probe1');
  t.false(dropped.includes('busy'));
  // A request still unanswered after protectedMs (a client that does not read) is evictable like an idle one.
  const { s: s2, dropped: d2, admit: admit2 } = slots();
  const stuck = admit2('stuck', '192.0.2.1', 0)!;
  s2.requestStarted(stuck, 0);
  for (const [i, now] of [[1, 1], [2, 2], [3, 3]]) s2.requestStarted(admit2(`w${i}`, `192.0.2.${10 + i!}`, now!)!, now!);
  t.is(admit2('early', '203.0.113.1', 1999), null, 'every slot protected: refused');
  t.truthy(admit2('late', '203.0.113.1', 2000));
  t.deepEqual(d2, ['stuck']);
});

test('a released slot frees its source\'s count', (t) => {
  const { s, admit } = slots();
  const a1 = admit('a1', '192.0.2.1', 0)!;
  const a2 = admit('a2', '192.0.2.1', 1)!;
  s.requestStarted(a1, 2);
  s.requestStarted(a2, 2);
  s.release(a1);
  t.truthy(admit('a3', '192.0.2.1', 3));
  t.is(s.size, 2);
});

test('a client that never reads its answer loses the connection at the response deadline', async (t) => {
  const big = Buffer.alloc(64 * 1024 * 1024, 'x'); // far more than the socket buffers hold
  const server = createLimitedServer((_req, res) => res.end(big), { ...LIMITS, maxConnections: 64, maxConnectionsPerSource: 8, responseTimeout: 1000 });
  const l = await listenHttp(server, 0, '127.0.0.1');
  try {
    const { port } = new URL(l.url);
    const started = Date.now();
    const sock = connect(Number(port), '127.0.0.1', () => sock.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
    sock.pause(); // never reads (and so never notices the close either: the server's side is what is checked)
    sock.on('error', () => {});
    const open = () => new Promise<number>((resolve) => server.getConnections((_e, n) => resolve(n)));
    while ((await open()) === 0 && Date.now() - started < 2000) await new Promise((r) => setTimeout(r, 10));
    t.is(await open(), 1, 'the request is being answered');
    while (l.connectionStats.responseTimedOut === 0 && Date.now() - started < 10_000) await new Promise((r) => setTimeout(r, 50));
    const after = Date.now() - started;
    t.is(l.connectionStats.responseTimedOut, 1, `${after} ms`);
    t.true(after >= 900 && after < 5000, `${after} ms`);
    await new Promise((r) => setTimeout(r, 50));
    t.is(await open(), 0, 'its connection is closed');
    sock.destroy();
  } finally {
    await l.close();
  }
});

test('dropped connections are counted in gitlb_http_connections_dropped_total{listener,reason}', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { NodeMetrics, startMetricsServer } = await import('../../src/reconciler/metrics/index.js');
  const { parsePromText, sumOf } = await import('../../src/reconciler/metrics/prom-text.js');
  const pins = mkdtempSync(join(tmpdir(), 'gitlb-http-slots-pins-'));
  const metrics = new NodeMetrics({ node: 'lb-9', pinRoot: pins, desired: () => null });
  const server = await startMetricsServer({ listen: '127.0.0.1:0', registry: metrics.registry, notReady: () => null });
  const socks: import('node:net').Socket[] = [];
  try {
    const { port } = new URL(server.url);
    // Nine connections from one address that send nothing: the ninth evicts the first (8 per source).
    for (let i = 0; i < 9; i++) {
      const s = connect({ port: Number(port), host: '127.0.0.1', localAddress: '127.0.0.5' });
      s.on('error', () => {});
      socks.push(s);
      await new Promise((r) => s.once('connect', r));
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, 50));
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const samples = parsePromText(text);
    t.is(sumOf(samples, 'gitlb_http_connections_dropped_total', { listener: 'metrics', reason: 'evicted' }), 1);
    t.is(sumOf(samples, 'gitlb_http_connections_dropped_total', { listener: 'metrics', reason: 'refused' }), 0);
  } finally {
    for (const s of socks) s.destroy();
    await server.close();
    rmSync(pins, { recursive: true, force: true });
  }
});

test('attacker: the per-source cap counts an IPv6 /64 as one source, so new addresses of one /64 do not get around it', (t) => {
  const { s, dropped, admit } = slots();
  for (const [name, address, now] of [['v6a', '2001:db8:1:2::1', 0], ['v6b', '2001:db8:1:2:ffff:ffff:ffff:fffe', 1]] as const) {
    s.requestStarted(admit(name, address, now)!, now, () => false); // both answering complete requests: protected
  }
  t.is(admit('v6c', '2001:db8:1:2:dead:beef::7', 10), null, 'a third address of the same /64 is over the cap');
  t.is(s.stats.refused, 1);
  t.truthy(admit('other64', '2001:db8:1:3::1', 11), 'the next /64 is another source');
  t.deepEqual(dropped, []);
  // An IPv4-mapped IPv6 address is its IPv4 address (a dual-stack listener reports IPv4 clients that way).
  const { s: s4, admit: admit4 } = slots();
  s4.requestStarted(admit4('v4', '192.0.2.1', 0)!, 0, () => false);
  s4.requestStarted(admit4('mapped', '::ffff:192.0.2.1', 1)!, 1, () => false);
  t.is(admit4('mapped2', '::FFFF:192.0.2.1', 2), null, 'mapped and plain count together');
});

test('benign: sources are IPv4 addresses and IPv6 /64s, each with its own cap', (t) => {
  t.is(sourceOf('192.0.2.1'), '192.0.2.1');
  t.is(sourceOf('::ffff:198.51.100.7'), '198.51.100.7');
  t.is(sourceOf('2001:db8:1:2:a:b:c:d'), '2001:db8:1:2::/64');
  t.is(sourceOf('fe80::1%eth0'), 'fe80::/64');
  t.is(sourceOf('?'), '?');
  const { s, dropped, admit } = slots();
  admit('a', '2001:db8:1:1::1', 0);
  admit('b', '2001:db8:1:2::1', 1);
  admit('c', '2001:db8:1:3::1', 2);
  admit('d', '192.0.2.1', 3);
  t.is(s.size, 4);
  t.deepEqual(dropped, []);
});

test('attacker: a written response the client does not read is not protected; a response still being made is', (t) => {
  const { s, dropped, admit } = slots();
  let written = false;
  for (const [i, now] of [[1, 0], [2, 1], [3, 2]] as const) s.requestStarted(admit(`w${i}`, `192.0.2.${i}`, now)!, now, () => false);
  const scrape = admit('scrape', '198.51.100.1', 3)!;
  s.requestStarted(scrape, 3, () => false, () => written);
  t.is(admit('early', '203.0.113.1', 10), null, 'every response still being made: protected, the newcomer is refused');
  written = true; // the handler ended its large response; the client does not read it
  t.truthy(admit('next', '203.0.113.1', 11), 'well before protectedMs, the draining slot makes room');
  t.deepEqual(dropped, ['scrape']);
});

test('a real listener: two /metrics-sized answers nobody reads do not keep a third client out for protectedMs', async (t) => {
  const big = Buffer.alloc(64 * 1024 * 1024, 'x'); // far more than the socket buffers hold
  const server = createLimitedServer((_req, res) => res.end(big), { maxConnections: 2, maxConnectionsPerSource: 8, protectedMs: 60_000, responseTimeout: 60_000 });
  const l = await listenHttp(server, 0, '127.0.0.1');
  const socks: import('node:net').Socket[] = [];
  try {
    const port = Number(new URL(l.url).port);
    for (let i = 0; i < 2; i++) {
      const sock = connect(port, '127.0.0.1', () => sock.write('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'));
      sock.pause();
      sock.on('error', () => {});
      socks.push(sock);
    }
    const started = Date.now();
    const open = () => new Promise<number>((resolve) => server.getConnections((_e, n) => resolve(n)));
    while ((await open()) < 2 && Date.now() - started < 2000) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 100)); // both answers written, stuck in the socket buffers
    // Well under protectedMs (60 s), so an answer proves the stuck two were evicted; generous for a loaded machine.
    const res = await fetch(`${l.url}/healthz`, { signal: AbortSignal.timeout(30_000) });
    t.is(res.status, 200);
    t.is((await res.arrayBuffer()).byteLength, big.length);
    t.is(l.connectionStats.evicted, 1, 'one draining slot made room');
    t.is(l.connectionStats.refused, 0);
  } finally {
    for (const s of socks) s.destroy();
    await l.close();
  }
});
