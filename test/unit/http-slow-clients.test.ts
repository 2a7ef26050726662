// The daemon's HTTP listeners (metrics, peer observations, webhook) face the network as root: a client that
// trickles its request headers (slowloris) or never finishes its body is cut off within seconds, not held for
// Node's defaults (60 s for headers, 300 s for a request), and a body larger than the cap never reaches memory.
import test from 'ava';
import { connect } from 'node:net';
import { Registry } from 'prom-client';
import { startMetricsServer } from '../../src/reconciler/metrics/index.js';
import { randomBytes } from 'node:crypto';
import { secretAuth, startPeerChannel } from '../../src/reconciler/peer/index.js';
import { startWebhook } from '../../src/reconciler/triggers/webhook.js';

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
