// Message framing of the peer channel (pure: no I/O, the caller passes the clock). A message is an HTTP body (JSON)
// with these headers:
//   X-Gitlb-Peer-From, X-Gitlb-Peer-To   node names (sender, receiver)
//   X-Gitlb-Peer-Time                    sender's clock, unix ms
//   X-Gitlb-Peer-Nonce                   32 hex digits, random per message
//   X-Gitlb-Peer-Reply-To                answers only: the nonce of the request answered
//   X-Gitlb-Peer-Mac                     hex MAC (shared secret) or ed25519 signature (node keys) over the text below
// The kind is the URL path (/v1/peer/<kind>) for both the request and its answer. The canonical text binds every
// field and the SHA-256 of the body, and names the direction, so a request can never pass as an answer:
//   gitlb-peer/1 \n <request|answer> \n kind \n from \n to \n time \n nonce \n reply-to or '-' \n sha256(body) hex
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { PeerAuth } from './auth.js';
import type { RejectReason } from './errors.js';

export const PEER_PATH_PREFIX = '/v1/peer/';
/** Accepted distance between a message's time and the local clock, both ways. */
export const MAX_SKEW_MS = 10_000;

export const HEADERS = {
  from: 'x-gitlb-peer-from',
  to: 'x-gitlb-peer-to',
  time: 'x-gitlb-peer-time',
  nonce: 'x-gitlb-peer-nonce',
  replyTo: 'x-gitlb-peer-reply-to',
  mac: 'x-gitlb-peer-mac',
} as const;

const NODE_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const KIND = /^[a-z][a-z0-9.-]{0,62}$/;
const NONCE = /^[0-9a-f]{32}$/;

export function isKind(kind: string): boolean {
  return KIND.test(kind);
}

export interface Envelope {
  direction: 'request' | 'answer';
  kind: string;
  from: string;
  to: string;
  /** Sender's clock, unix ms. */
  time: number;
  nonce: string;
  /** Answers: the request's nonce. */
  replyTo?: string;
}

export function newNonce(): string {
  return randomBytes(16).toString('hex');
}

export function bodyDigest(body: Buffer): string {
  return createHash('sha256').update(body).digest('hex');
}

export function canonical(e: Envelope, digest: string): string {
  return ['gitlb-peer/1', e.direction, e.kind, e.from, e.to, String(e.time), e.nonce, e.replyTo ?? '-', digest].join('\n');
}

/** The headers that carry `e` and its MAC over `body`. */
export function seal(auth: PeerAuth, e: Envelope, body: Buffer): Record<string, string> {
  return {
    [HEADERS.from]: e.from,
    [HEADERS.to]: e.to,
    [HEADERS.time]: String(e.time),
    [HEADERS.nonce]: e.nonce,
    ...(e.replyTo !== undefined && { [HEADERS.replyTo]: e.replyTo }),
    [HEADERS.mac]: auth.sign(canonical(e, bodyDigest(body))),
  };
}

function one(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return typeof v === 'string' ? v : undefined;
}

/** The envelope the headers claim (not yet authenticated), or why they do not frame a message. */
export function readEnvelope(headers: IncomingHttpHeaders, direction: Envelope['direction'], kind: string):
  { envelope: Envelope; mac: string } | { reject: RejectReason; detail: string } {
  const from = one(headers, HEADERS.from), to = one(headers, HEADERS.to), time = one(headers, HEADERS.time);
  const nonce = one(headers, HEADERS.nonce), mac = one(headers, HEADERS.mac), replyTo = one(headers, HEADERS.replyTo);
  const bad = (detail: string) => ({ reject: 'malformed' as const, detail });
  if (!isKind(kind)) return bad('bad kind');
  if (!from || !NODE_NAME.test(from)) return bad(`missing or bad ${HEADERS.from}`);
  if (!to || !NODE_NAME.test(to)) return bad(`missing or bad ${HEADERS.to}`);
  if (!time || !/^\d{1,15}$/.test(time)) return bad(`missing or bad ${HEADERS.time}`);
  if (!nonce || !NONCE.test(nonce)) return bad(`missing or bad ${HEADERS.nonce}`);
  if (!mac || !/^(?:[0-9a-f]{64}|[0-9a-f]{128})$/.test(mac)) return bad(`missing or bad ${HEADERS.mac}`);
  if (direction === 'answer' ? !replyTo || !NONCE.test(replyTo) : replyTo !== undefined) return bad(`bad ${HEADERS.replyTo}`);
  return { envelope: { direction, kind, from, to, time: Number(time), nonce, ...(replyTo && { replyTo }) }, mac };
}

/** 'future' or 'stale' when `time` is further than the skew window from the local clock `now`. */
export function timeProblem(time: number, now: number, skewMs = MAX_SKEW_MS): 'future' | 'stale' | null {
  if (time > now + skewMs) return 'future';
  if (time < now - skewMs) return 'stale';
  return null;
}

/** Checks the MAC of a framed message over `body`. */
export function authentic(auth: PeerAuth, e: Envelope, mac: string, body: Buffer): boolean {
  return auth.verify(e.from, canonical(e, bodyDigest(body)), mac);
}
