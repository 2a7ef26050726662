// Consensus mode's peer exchange, directly between the lb daemons over HTTP (no Git in the path): every lb node
// serves its current observations at GET /v1/health/observations, and reads its peers' the same way.
//
// Authentication with the cluster's shared secret (HMAC-SHA256), both ways:
//   request   X-Gitlb-Peer: <reader node>   X-Gitlb-Peer-Auth: <unix ms>.<hex HMAC(secret, "GET <path> <reader> <ms>")>
//             refused with 401 when the MAC is wrong or the time is more than 30 s off (a recorded request replays
//             for at most that long, and only ever reads).
//   response  X-Gitlb-Signature: sha256=<hex HMAC(secret, "<request's X-Gitlb-Peer-Auth>\n" body)>; a reader drops
//             a body whose MAC is wrong, so no one without the secret can inject votes, and since the MAC covers the
//             request it answers, a recorded answer cannot be replayed to a later request (which would otherwise
//             pin a peer's old vote until the quorum's staleness bound retired it).
// Bodies are capped (1 MiB) and parsed by peerObservations like a status file.
import { request, type IncomingMessage, type Server } from 'node:http';
import { createLimitedServer, listenHttp } from '../http-limits.js';
import { createHmac } from 'node:crypto';
import { safeEqual } from '../triggers/webhook.js';
import type { NodeObservations } from '../../render/health-quorum.js';
import { peerObservations } from './status.js';

export const PEER_PATH = '/v1/health/observations';
export const DEFAULT_PEER_PORT = 7946;
const MAX_BODY = 1024 * 1024;
const MAX_SKEW_MS = 30_000;

function mac(secret: string, text: string | Buffer): string {
  return createHmac('sha256', secret).update(text).digest('hex');
}

function requestAuth(secret: string, reader: string, now: number): string {
  return `${now}.${mac(secret, `GET ${PEER_PATH} ${reader} ${now}`)}`;
}

/** The answer's MAC: over the request's auth value and the body, so an answer is valid for one request only. */
function answerMac(secret: string, requestAuth: string, body: Buffer): string {
  return `sha256=${mac(secret, Buffer.concat([Buffer.from(`${requestAuth}\n`), body]))}`;
}

/** Checks a reader's request headers; null when accepted, else why not. */
export function verifyPeerRequest(headers: IncomingMessage['headers'], secret: string, now: number): string | null {
  const reader = headers['x-gitlb-peer'];
  const auth = headers['x-gitlb-peer-auth'];
  if (typeof reader !== 'string' || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(reader)) return 'missing or bad X-Gitlb-Peer';
  if (typeof auth !== 'string') return 'missing X-Gitlb-Peer-Auth';
  const m = /^(\d{1,16})\.([0-9a-f]{64})$/.exec(auth);
  if (!m) return 'malformed X-Gitlb-Peer-Auth';
  const ts = Number(m[1]);
  if (Math.abs(now - ts) > MAX_SKEW_MS) return 'X-Gitlb-Peer-Auth time is more than 30 s off';
  if (!safeEqual(m[2]!, mac(secret, `GET ${PEER_PATH} ${reader} ${ts}`))) return 'bad X-Gitlb-Peer-Auth';
  return null;
}

export interface PeerServer {
  url: string;
  close(): Promise<void>;
}

/** Serves this node's `{ node, health }` (health: HealthService.status()) to peers that know the secret. */
export async function startPeerServer(o: { host: string; port: number; node: string; secret: string; health: () => unknown;
  log?: { warn(m: string): void } }): Promise<PeerServer> {
  const server: Server = createLimitedServer((req, res) => {
    req.resume();
    if (req.method !== 'GET' || req.url !== PEER_PATH) {
      res.writeHead(404).end();
      return;
    }
    const why = verifyPeerRequest(req.headers, o.secret, Date.now());
    if (why) {
      res.writeHead(401, { 'content-type': 'text/plain' }).end(`${why}\n`);
      return;
    }
    const body = Buffer.from(JSON.stringify({ node: o.node, health: o.health() ?? null }));
    res.writeHead(200, { 'content-type': 'application/json', 'x-gitlb-signature': answerMac(o.secret, req.headers['x-gitlb-peer-auth'] as string, body) }).end(body);
  });
  return listenHttp(server, o.port, o.host);
}

/** Reads one peer's observations; throws with the reason when the peer is unreachable, refuses, or fails the MAC. */
export function fetchPeerObservations(url: string, o: { node: string; peer: string; secret: string; timeoutMs: number }): Promise<NodeObservations> {
  return new Promise((resolve, reject) => {
    const auth = requestAuth(o.secret, o.node, Date.now());
    const req = request(`${url}${PEER_PATH}`, {
      method: 'GET',
      headers: { 'x-gitlb-peer': o.node, 'x-gitlb-peer-auth': auth },
      signal: AbortSignal.timeout(o.timeoutMs),
    }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_BODY) req.destroy(new Error(`peer ${o.peer}: answer larger than ${MAX_BODY} bytes`));
        else chunks.push(c);
      });
      res.on('error', reject);
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`peer ${o.peer}: HTTP ${res.statusCode}`));
        const body = Buffer.concat(chunks);
        const sig = res.headers['x-gitlb-signature'];
        if (typeof sig !== 'string' || !safeEqual(sig, answerMac(o.secret, auth, body)))
          return reject(new Error(`peer ${o.peer}: answer signature does not match the shared secret`));
        let doc: unknown;
        try {
          doc = JSON.parse(body.toString('utf8'));
        } catch {
          return reject(new Error(`peer ${o.peer}: answer is not JSON`));
        }
        if (typeof doc !== 'object' || doc === null || (doc as { node?: unknown }).node !== o.peer)
          return reject(new Error(`peer ${o.peer}: answer speaks for another node`));
        const r = peerObservations(o.peer, doc);
        if ('error' in r) return reject(new Error(r.error));
        resolve(r.obs);
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Reads every peer in parallel. A peer that cannot be read keeps its last good observations (the quorum's staleness
 * bound retires them), so one slow or unreachable peer neither blocks the others nor erases its vote at once.
 */
export class PeerHttpReader {
  private readonly last = new Map<string, NodeObservations>();
  private readonly lastError = new Map<string, string>();

  constructor(private readonly o: { node: string; secret: string; timeoutMs: number; log?: { warn(m: string): void } }) {}

  async read(peers: { node: string; url: string }[]): Promise<NodeObservations[]> {
    const names = new Set(peers.map((p) => p.node));
    for (const n of [...this.last.keys()]) if (!names.has(n)) this.last.delete(n);
    await Promise.all(
      peers.map(async (p) => {
        try {
          this.last.set(p.node, await fetchPeerObservations(p.url, { node: this.o.node, peer: p.node, secret: this.o.secret, timeoutMs: this.o.timeoutMs }));
          this.lastError.delete(p.node);
        } catch (err) {
          const msg = (err as Error).message;
          // One warning per distinct problem, not one per round.
          if (this.lastError.get(p.node) !== msg) this.o.log?.warn(`health: peer ${p.node}: ${msg}`);
          this.lastError.set(p.node, msg);
        }
      }),
    );
    return [...this.last.values()];
  }
}
