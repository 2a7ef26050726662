// The listening side of the peer channel: one HTTP listener (http-limits.ts: deadlines, connection cap) that
// accepts POST /v1/peer/<kind> only when the message is authentic, addressed to this node, from another lb node,
// inside the skew window and not dated before the channel started, never seen before, within the kind's size cap and the sender's rate, and answers with a
// message bound to the request (frame.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createLimitedServer, listenHttp, type Listening } from '../http/http-limits.js';
import { authentic, newNonce, PEER_PATH_PREFIX, readEnvelope, seal, timeProblem, type Envelope } from './frame.js';
import type { PeerAuth } from './auth.js';
import type { RejectReason } from './errors.js';
import type { NonceWindow } from './replay.js';
import type { RateBound } from './rate.js';

/** Thrown by a handler for an authenticated body it cannot accept: answered 400 and counted as 'bad-body'. */
export class BadBody extends Error {}

export type PeerHandler = (from: string, body: unknown) => unknown;

export interface ServedKind {
  handler: PeerHandler;
  maxBodyBytes: number;
  rate: RateBound;
}

export interface ServerContext {
  node: string;
  auth: PeerAuth;
  skewMs: number;
  now(): number;
  /** When this daemon's channel started (local ms): older messages are refused as 'stale'. */
  startedAt: number;
  isPeer(node: string): boolean;
  kinds: Map<string, ServedKind>;
  nonces: NonceWindow;
  /** Counts and reports one refused message (`who`: the claimed sender, else the client's address). */
  rejected(reason: RejectReason, who: string, detail: string): void;
  log?: { warn(m: string): void };
}

const STATUS: Record<RejectReason, number> = {
  'malformed': 400, 'unknown-kind': 404, 'unknown-sender': 403, 'wrong-receiver': 403, 'future': 401, 'stale': 401,
  'too-large': 413, 'bad-mac': 401, 'replay': 401, 'unbound-answer': 400, 'rate-limited': 429, 'bad-body': 400,
};

/** Reads at most `max` bytes of the body; null when it is larger (the connection is then closed). */
function readCapped(req: IncomingMessage, max: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > max) return resolve(null);
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > max) {
        req.removeAllListeners('data');
        resolve(null);
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

async function handle(ctx: ServerContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const refuse = (reason: RejectReason, who: string, detail: string, close = false) => {
    ctx.rejected(reason, who, detail);
    // The reason code only: details stay in this node's log, an impostor learns nothing it did not send.
    res.writeHead(STATUS[reason], { 'content-type': 'text/plain', ...(close && { connection: 'close' }) }).end(`${reason}\n`);
    if (!close) req.resume();
  };
  const address = req.socket.remoteAddress ?? '?';
  const url = req.url ?? '';
  if (req.method !== 'POST' || !url.startsWith(PEER_PATH_PREFIX)) {
    req.resume();
    res.writeHead(404).end();
    return;
  }
  const kind = url.slice(PEER_PATH_PREFIX.length);
  const framed = readEnvelope(req.headers, 'request', kind);
  if ('reject' in framed) return refuse(framed.reject, address, framed.detail);
  const e: Envelope = framed.envelope;
  const served = ctx.kinds.get(kind);
  if (!served) return refuse('unknown-kind', e.from, `nothing serves '${kind}'`);
  if (e.to !== ctx.node) return refuse('wrong-receiver', e.from, `addressed to '${e.to}'`);
  if (e.from === ctx.node || !ctx.isPeer(e.from)) return refuse('unknown-sender', address, `'${e.from}' is not another lb node of the applied config`);
  const body = await readCapped(req, served.maxBodyBytes);
  if (!body) return refuse('too-large', e.from, `body over ${served.maxBodyBytes} bytes`, true);
  if (!authentic(ctx.auth, e, framed.mac, body)) return refuse('bad-mac', e.from, `MAC does not match (from ${address})`);
  const now = ctx.now();
  const late = timeProblem(e.time, now, ctx.skewMs);
  if (late) return refuse(late, e.from, `dated ${new Date(e.time).toISOString()}, ${Math.round((e.time - now) / 1000)} s from the local clock (window ±${ctx.skewMs / 1000} s)`);
  // Nonces are kept in memory only: a message dated before this daemon started could be one it saw before a restart.
  if (e.time < ctx.startedAt) return refuse('stale', e.from, `dated ${new Date(e.time).toISOString()}, before this daemon started`);
  if (ctx.nonces.seen(e.from, e.nonce, now)) return refuse('replay', e.from, 'nonce already seen');
  // The rate before the nonce is remembered: a sender over its bound fills no memory (its own window, replay.ts).
  if (!served.rate.take(e.from, now)) return refuse('rate-limited', e.from, `more than its bound of '${kind}' requests`);
  if (!ctx.nonces.remember(e.from, e.nonce, e.time, now)) return refuse('replay', e.from, 'nonce already seen, or its window is full');
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    return refuse('bad-body', e.from, 'body is not JSON');
  }
  let answer: unknown;
  try {
    answer = await served.handler(e.from, doc);
  } catch (err) {
    if (err instanceof BadBody) return refuse('bad-body', e.from, err.message);
    ctx.log?.warn(`peer channel: handler of '${kind}' failed: ${(err as Error).message}`);
    res.writeHead(500).end();
    return;
  }
  const out = Buffer.from(JSON.stringify(answer ?? null));
  const headers = seal(ctx.auth, { direction: 'answer', kind, from: ctx.node, to: e.from, time: ctx.now(), nonce: newNonce(), replyTo: e.nonce }, out);
  res.writeHead(200, { ...headers, 'content-type': 'application/json', 'content-length': String(out.length) }).end(out);
}

export function startPeerServer(ctx: ServerContext, host: string, port: number): Promise<Listening> {
  const server = createLimitedServer((req, res) => {
    handle(ctx, req, res).catch((err: unknown) => {
      ctx.log?.warn(`peer channel: ${(err as Error).message}`);
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  }, undefined, 'peer');
  return listenHttp(server, port, host);
}
