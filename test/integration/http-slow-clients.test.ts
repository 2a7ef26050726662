// The daemon's HTTP listeners (metrics, peer observations, webhook) face the network as root: a client that
// trickles its request headers (slowloris) or never finishes its body is cut off within seconds, not held for
// Node's defaults (60 s for headers, 300 s for a request), and a body larger than the cap never reaches memory.
import test from 'ava';
import { connect } from 'node:net';
import { request as httpRequest } from 'node:http';
import { Registry } from 'prom-client';
import { startMetricsServer } from '../../src/reconciler/metrics/index.js';
import { randomBytes } from 'node:crypto';
import { secretAuth, startPeerChannel } from '../../src/reconciler/peer/index.js';
import { githubSignature, startWebhook } from '../../src/reconciler/triggers/webhook.js';

/** Sends `head` then one header line per second; resolves with the seconds until the server closed the socket. */
function trickle(url: string, head: string, maxSeconds: number): Promise<number> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const sock = connect(Number(port), hostname);
    let sent = 0;
    let timer: NodeJS.Timeout | undefined;
    sock.on('connect', () => {
      sock.write(head);
      timer = setInterval(() => {
        if (++sent > maxSeconds) {
          clearInterval(timer);
          sock.destroy();
          reject(new Error(`still open after ${maxSeconds} s`));
        } else if (!sock.destroyed) sock.write(`x-slow-${sent}: 1\r\n`);
      }, 1000);
    });
    sock.on('error', () => {});
    sock.on('close', () => {
      clearInterval(timer);
      resolve((Date.now() - started) / 1000);
    });
  });
}

// Generous bound under a loaded machine, still far below Node's 60 s default.
const BOUND_S = 25;

const listeners: { name: string; head: string; start: () => Promise<{ url: string; close(): Promise<void> }> }[] = [
  { name: 'metrics server', head: 'GET /metrics HTTP/1.1', start: () => startMetricsServer({ listen: '127.0.0.1:0', registry: new Registry(), notReady: () => null }) },
  { name: 'peer channel', head: 'POST /v1/peer/health.observations HTTP/1.1',
    start: () => startPeerChannel({ host: '127.0.0.1', port: 0, node: 'lb-1', auth: secretAuth(randomBytes(32).toString('base64')), peers: () => [] }) },
  { name: 'webhook', head: 'POST / HTTP/1.1', start: () => startWebhook({ host: '127.0.0.1', port: 0, secret: 's'.repeat(32), branch: 'main', onTrigger: () => {} }) },
];

for (const l of listeners) {
  test(`${l.name} cuts off a client that trickles its headers, and answers a prompt one meanwhile`, async (t) => {
    const server = await l.start();
    try {
      const slow = trickle(server.url, `${l.head}\r\nHost: x\r\n`, BOUND_S);
      // What the limits must let through: a whole request sent at once gets an HTTP answer (whatever its status).
      const [method, path] = l.head.split(' ') as [string, string];
      const prompt = await fetch(new URL(path, server.url), { method, body: method === 'POST' ? '{}' : undefined });
      await prompt.arrayBuffer();
      t.true(prompt.status >= 200 && prompt.status < 500, `prompt client got ${prompt.status}`);
      const s = await slow;
      t.true(s < BOUND_S, `closed after ${s} s`);
    } finally {
      await server.close();
    }
  });
}

// ---- floods: 100 slow clients while legitimate requests keep being answered ------------------------------------

interface Flood {
  /** Stops reconnecting, closes every socket; resolves with how many connections the flood opened. */
  stop(): Promise<number>;
}

/**
 * `n` slow clients on 127.0.0.0/8: each connects from `sourceOf(i)`, sends `head` and then one more piece every
 * 500 ms: a header line (slowloris) or, with `body`, complete headers announcing a body of 100 kB and then a line
 * of it (slow body). When the server closes it, it connects again 100 ms later. Bounded: every client stops at stop().
 */
function flood(url: string, head: string, n: number, sourceOf: (i: number) => string, body = false): Flood {
  const { hostname, port } = new URL(url);
  let running = true;
  let opened = 0;
  const live = new Set<import('node:net').Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, f: () => void) => {
    const tm = setTimeout(() => { timers.delete(tm); f(); }, ms);
    timers.add(tm);
  };
  const client = (i: number): void => {
    if (!running) return;
    opened++;
    const sock = connect({ port: Number(port), host: hostname, localAddress: sourceOf(i) });
    live.add(sock);
    let line = 0;
    const trickle = setInterval(() => { if (!sock.destroyed) sock.write(body ? `"slow-${++line}",\n` : `x-slow-${++line}: 1\r\n`); }, 500);
    sock.on('connect', () => sock.write(body ? `${head}\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[` : `${head}\r\nHost: x\r\n`));
    sock.on('error', () => {});
    sock.on('close', () => {
      clearInterval(trickle);
      live.delete(sock);
      later(100, () => client(i));
    });
  };
  for (let i = 0; i < n; i++) later(i * 5, () => client(i)); // ramp up over half a second
  return {
    async stop() {
      running = false;
      for (const tm of timers) clearTimeout(tm);
      for (const s of live) s.destroy();
      return opened;
    },
  };
}

/** One request on a fresh connection from 127.0.0.1 (as a kubelet probe makes it); its status, or null after 2 s. */
function legitimate(url: string, path: string, method = 'GET', body?: { data: string; headers: Record<string, string> }): Promise<{ status: number | null; ms: number }> {
  const started = Date.now();
  return new Promise((resolve) => {
    const req = httpRequest(new URL(path, url), { method, agent: false, localAddress: '127.0.0.1', headers: { connection: 'close', ...body?.headers }, signal: AbortSignal.timeout(2000) }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? null, ms: Date.now() - started }));
      res.on('error', () => resolve({ status: null, ms: Date.now() - started }));
    });
    req.on('error', () => resolve({ status: null, ms: Date.now() - started }));
    req.end(body?.data);
  });
}

const FLOODS: [string, (i: number) => string][] = [
  // The prober's own address: the per-source cap bites on the legitimate requests too.
  ['100 slow clients from the prober\'s address', () => '127.0.0.1'],
  ['100 slow clients from one address', () => '127.0.0.2'],
  ['100 slow clients from 100 addresses', (i) => `127.0.1.${i + 1}`],
];

for (const [name, sourceOf] of FLOODS) {
  test.serial(`metrics server, ${name}: at least 19 of 20 /metrics and /healthz requests answered within 2 s`, async (t) => {
    const registry = new Registry();
    const server = await startMetricsServer({ listen: '127.0.0.1:0', registry, notReady: () => null });
    const f = flood(server.url, 'GET /metrics HTTP/1.1', 100, sourceOf);
    try {
      await new Promise((r) => setTimeout(r, 1500)); // the flood holds every slot it can
      const results: { path: string; status: number | null; ms: number }[] = [];
      for (let i = 0; i < 20; i++) {
        const path = i % 2 ? '/healthz' : '/metrics';
        results.push({ path, ...(await legitimate(server.url, path)) });
        await new Promise((r) => setTimeout(r, 100));
      }
      const answered = results.filter((r) => r.status === 200 && r.ms < 2000);
      const opened = await f.stop();
      const worst = Math.max(...results.map((r) => r.ms));
      t.log(`${answered.length}/20 answered within 2 s (slowest ${worst} ms); the flood opened ${opened} connections; ` +
        `evicted ${server.connectionStats.evicted}, refused ${server.connectionStats.refused}`);
      t.true(answered.length >= 19, JSON.stringify(results));
      t.true(opened > 100, 'the flood kept reconnecting');
    } finally {
      await f.stop();
      await server.close();
    }
  });
}

for (const [what, body] of [['slow clients', false], ['slow bodies', true]] as const) {
  test.serial(`webhook, 100 ${what} from 100 addresses: at least 19 of 20 signed deliveries answered within 2 s`, async (t) => {
    const secret = 's'.repeat(32);
    let triggered = 0;
    const hook = await startWebhook({ host: '127.0.0.1', port: 0, secret, branch: 'main', onTrigger: () => triggered++ });
    const f = flood(hook.url, 'POST / HTTP/1.1', 100, (i) => `127.0.1.${i + 1}`, body);
    try {
      await new Promise((r) => setTimeout(r, 1500));
      const data = JSON.stringify({ ref: 'refs/heads/main' });
      const headers = { 'content-type': 'application/json', 'x-github-event': 'push', 'x-hub-signature-256': githubSignature(secret, Buffer.from(data)) };
      let answered = 0;
      for (let i = 0; i < 20; i++) {
        const r = await legitimate(hook.url, '/', 'POST', { data, headers });
        if (r.status === 202 && r.ms < 2000) answered++;
        await new Promise((res) => setTimeout(res, 100));
      }
      const opened = await f.stop();
      t.log(`${answered}/20 deliveries answered within 2 s; ${triggered} reconciles scheduled; the flood opened ${opened} connections; ` +
        `evicted ${hook.connectionStats.evicted}, refused ${hook.connectionStats.refused}`);
      t.true(answered >= 19);
      t.is(triggered, answered);
    } finally {
      await f.stop();
      await hook.close();
    }
  });
}

test.serial('peer channel, 100 slow clients from 100 addresses: at least 19 of 20 authenticated requests of a peer answered within 2 s', async (t) => {
  const auth = secretAuth(randomBytes(32).toString('base64'));
  const urls: Record<string, string> = {};
  const peers = (self: string) => () => Object.entries(urls).filter(([n]) => n !== self).map(([node, url]) => ({ node, url }));
  const lb1 = await startPeerChannel({ host: '127.0.0.1', port: 0, node: 'lb-1', auth, peers: peers('lb-1') });
  const lb2 = await startPeerChannel({ host: '127.0.0.1', port: 0, node: 'lb-2', auth, peers: peers('lb-2') });
  urls['lb-1'] = lb1.url;
  urls['lb-2'] = lb2.url;
  lb1.serve('echo', (from, body) => ({ from, body }));
  const f = flood(lb1.url, 'POST /v1/peer/echo HTTP/1.1', 100, (i) => `127.0.1.${i + 1}`, true);
  try {
    await new Promise((r) => setTimeout(r, 1500));
    let answered = 0;
    for (let i = 0; i < 20; i++) {
      const started = Date.now();
      try {
        const a = await lb2.request('lb-1', 'echo', { i }, { timeoutMs: 2000 });
        if (JSON.stringify(a) === JSON.stringify({ from: 'lb-2', body: { i } }) && Date.now() - started < 2000) answered++;
      } catch (err) {
        t.log(`request ${i}: ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const opened = await f.stop();
    t.log(`${answered}/20 peer requests answered within 2 s; the flood opened ${opened} connections`);
    t.true(answered >= 19);
  } finally {
    await f.stop();
    await lb1.close();
    await lb2.close();
  }
});
