// The asking side of the peer channel: sends one authenticated request and accepts only the answer to it: framed,
// authentic, from the peer asked and to this node, bound to this request's nonce, inside the skew window, capped.
import { Agent, request as httpRequest } from 'node:http';
import { authentic, newNonce, PEER_PATH_PREFIX, readEnvelope, seal, timeProblem, type Envelope } from './frame.js';
import { PeerError, type RejectReason } from './errors.js';
import type { PeerAuth } from './auth.js';

export interface ClientContext {
  node: string;
  auth: PeerAuth;
  skewMs: number;
  now(): number;
  agent: Agent;
  /** Counts and reports one refused answer. */
  rejected(reason: RejectReason, peer: string, detail: string): void;
}

export interface RequestOptions {
  timeoutMs?: number;
  /** Answers larger than this are refused ('too-large'); default 1 MiB. */
  maxAnswerBytes?: number;
}

export const DEFAULT_TIMEOUT_MS = 2_000;
export const DEFAULT_MAX_ANSWER_BYTES = 1024 * 1024;

/** A kept-alive connection the peer closed meanwhile (its restart) fails at once: such a request is sent again, once,
 * as a new message (new nonce and time), on a new connection. */
export async function sendRequest(ctx: ClientContext, peer: { node: string; url: string }, kind: string, body: unknown, o: RequestOptions = {}): Promise<unknown> {
  try {
    return await sendOnce(ctx, peer, kind, body, o);
  } catch (err) {
    if (!(err instanceof StaleConnection)) throw err;
    return sendOnce(ctx, peer, kind, body, o);
  }
}

class StaleConnection extends Error {}

function sendOnce(ctx: ClientContext, peer: { node: string; url: string }, kind: string, body: unknown, o: RequestOptions): Promise<unknown> {
  const maxAnswer = o.maxAnswerBytes ?? DEFAULT_MAX_ANSWER_BYTES;
  const payload = Buffer.from(JSON.stringify(body ?? null));
  const sent: Envelope = { direction: 'request', kind, from: ctx.node, to: peer.node, time: ctx.now(), nonce: newNonce() };
  return new Promise((resolve, reject) => {
    const fail = (reason: RejectReason, detail: string) => {
      ctx.rejected(reason, peer.node, detail);
      reject(new PeerError(peer.node, kind, reason, detail));
    };
    const req = httpRequest(`${peer.url}${PEER_PATH_PREFIX}${kind}`, {
      method: 'POST',
      agent: ctx.agent,
      headers: { ...seal(ctx.auth, sent, payload), 'content-type': 'application/json', 'content-length': String(payload.length) },
      signal: AbortSignal.timeout(o.timeoutMs ?? DEFAULT_TIMEOUT_MS),
    }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let over = false;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size <= maxAnswer) chunks.push(c);
        else if (!over) {
          over = true;
          req.destroy();
          fail('too-large', `answer over ${maxAnswer} bytes`);
        }
      });
      res.on('error', (err) => reject(new PeerError(peer.node, kind, 'unreachable', err.message)));
      res.on('end', () => {
        if (over) return;
        const answer = Buffer.concat(chunks);
        if (res.statusCode !== 200) {
          const said = answer.toString('utf8', 0, Math.min(answer.length, 64)).trim().replace(/[^\x20-\x7e]/g, '?');
          return reject(new PeerError(peer.node, kind, 'refused', `HTTP ${res.statusCode}${said ? ` (${said})` : ''}`));
        }
        const framed = readEnvelope(res.headers, 'answer', kind);
        if ('reject' in framed) return fail(framed.reject, `answer: ${framed.detail}`);
        const a = framed.envelope;
        if (!authentic(ctx.auth, a, framed.mac, answer)) return fail('bad-mac', 'answer MAC does not match');
        if (a.from !== peer.node || a.to !== ctx.node) return fail('wrong-receiver', `answer from '${a.from}' to '${a.to}'`);
        if (a.replyTo !== sent.nonce) return fail('unbound-answer', 'answer to another request (a replay)');
        const now = ctx.now();
        const late = timeProblem(a.time, now, ctx.skewMs);
        if (late) return fail(late, `answer dated ${new Date(a.time).toISOString()}, ${Math.round((a.time - now) / 1000)} s from the local clock`);
        try {
          resolve(JSON.parse(answer.toString('utf8')));
        } catch {
          fail('bad-body', 'answer is not JSON');
        }
      });
    });
    req.on('error', (err) => {
      if (req.reusedSocket && (err as NodeJS.ErrnoException).code === 'ECONNRESET') return reject(new StaleConnection(err.message));
      const timedOut = err.name === 'TimeoutError' || err.name === 'AbortError';
      reject(new PeerError(peer.node, kind, timedOut ? 'timeout' : 'unreachable', timedOut ? `no answer within ${o.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms` : err.message));
    });
    req.end(payload);
  });
}
