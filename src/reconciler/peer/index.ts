// The authenticated peer channel between lb daemons: health votes (health/peer-exchange.ts) and connection-state
// sync travel over it. One listener per daemon, one request/answer per message, both ways authenticated per
// message (frame.ts); docs/security.md "Peers" has the rules and their bounds.
//
//   const ch = await startPeerChannel({ node, host, port, auth: loadPeerSecretFile(file), peers: () => lbPeers(), log });
//   ch.serve('health.observations', (from, body) => answer);           // answer: any JSON value
//   const answer = await ch.request('lb-2', 'health.observations', {}, { timeoutMs: 1000 }); // throws PeerError
import { Agent } from 'node:http';
import { sendRequest, type RequestOptions } from './client.js';
import { PeerError, type RejectReason } from './errors.js';
import { isKind, MAX_SKEW_MS } from './frame.js';
import { NonceWindow } from './replay.js';
import { RateBound } from './rate.js';
import { startPeerServer, type PeerHandler } from './server.js';
import type { PeerAuth } from './auth.js';

export { BadBody, type PeerHandler } from './server.js';
export { PeerError, REJECT_REASONS, type RejectReason, type PeerErrorReason } from './errors.js';
export { loadPeerSecretFile, peerSecretProblem, secretAuth, GENERATE_HINT, loadPeerKeyFile, nodeKeyAuth, peerKeyBlob, type PeerAuth, type PeerKey } from './auth.js';
export { MAX_SKEW_MS } from './frame.js';
export type { RequestOptions } from './client.js';

export const DEFAULT_PEER_PORT = 7946;

/** Another lb node: its name in the config and where its channel listens (http://ADDR:PORT). */
export interface PeerAddress {
  node: string;
  url: string;
}

/** Hears every refused message; `direction` 'in' for requests this node refused, 'out' for answers it refused. */
export interface PeerChannelMetrics {
  rejected(reason: RejectReason, direction: 'in' | 'out'): void;
}

export interface PeerChannelOptions {
  node: string;
  host: string;
  port: number;
  auth: PeerAuth;
  /** The other lb nodes of the applied config (read on every message: the config changes). Only they may speak. */
  peers: () => PeerAddress[];
  log?: { warn(m: string): void };
  metrics?: PeerChannelMetrics;
  /** The local clock (tests); default Date.now. */
  now?: () => number;
  skewMs?: number;
}

export interface ServeOptions {
  /** Largest request body of this kind; default 64 KiB. */
  maxBodyBytes?: number;
  /** Requests of this kind one peer may send: sustained per second and at once; default 10/s, 20. */
  ratePerSec?: number;
  burst?: number;
}

export interface Rejection {
  reason: RejectReason;
  direction: 'in' | 'out';
  /** The claimed sender or the peer asked (a name), else the client's address. */
  who: string;
  detail: string;
  at: string;
}

export interface PeerChannel {
  /** http://ADDR:PORT this channel listens on. */
  url: string;
  serve(kind: string, handler: PeerHandler, o?: ServeOptions): void;
  /** The peer's authenticated answer; throws PeerError (reason says why) otherwise. */
  request(peer: string, kind: string, body: unknown, o?: RequestOptions): Promise<unknown>;
  /** Refused messages since start, by reason, and the latest one (status and `gitlb doctor`). */
  rejections(): { counts: Partial<Record<RejectReason, number>>; last: Rejection | null };
  close(): Promise<void>;
}

/** Distinct (direction, reason, who) rejections logged; beyond it only counted (a flood must not flood the log). */
const MAX_LOGGED = 64;

export async function startPeerChannel(o: PeerChannelOptions): Promise<PeerChannel> {
  const now = o.now ?? Date.now;
  const skewMs = o.skewMs ?? MAX_SKEW_MS;
  const counts: Partial<Record<RejectReason, number>> = {};
  let last: Rejection | null = null;
  const logged = new Set<string>();
  const rejected = (direction: 'in' | 'out') => (reason: RejectReason, who: string, detail: string) => {
    counts[reason] = (counts[reason] ?? 0) + 1;
    last = { reason, direction, who, detail, at: new Date(now()).toISOString() };
    o.metrics?.rejected(reason, direction);
    const key = `${direction}\n${reason}\n${who}`;
    if (logged.size < MAX_LOGGED && !logged.has(key)) {
      logged.add(key);
      o.log?.warn(`peer channel: refused ${direction === 'in' ? 'a request from' : 'an answer of'} ${who}: ${reason}: ${detail} (further ones only counted: gitlb_peer_messages_rejected_total)`);
    }
  };
  const kinds = new Map<string, { handler: PeerHandler; maxBodyBytes: number; rate: RateBound }>();
  const isPeer = (node: string) => o.peers().some((p) => p.node === node);
  const listening = await startPeerServer({
    node: o.node, auth: o.auth, skewMs, now, startedAt: now(), isPeer, kinds, log: o.log,
    // Twice the window: a message may be dated up to one window ahead and is refused one window after its time.
    nonces: new NonceWindow(2 * skewMs),
    rejected: rejected('in'),
  }, o.host, o.port);
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  const client = { node: o.node, auth: o.auth, skewMs, now, agent, rejected: rejected('out') };
  return {
    url: listening.url,
    serve(kind, handler, so = {}) {
      if (!isKind(kind)) throw new Error(`peer channel: bad kind '${kind}'`);
      if (kinds.has(kind)) throw new Error(`peer channel: '${kind}' is served already`);
      kinds.set(kind, { handler, maxBodyBytes: so.maxBodyBytes ?? 64 * 1024, rate: new RateBound(so.ratePerSec ?? 10, so.burst ?? 20) });
    },
    async request(peer, kind, body, ro) {
      if (!isKind(kind)) throw new Error(`peer channel: bad kind '${kind}'`);
      const target = o.peers().find((p) => p.node === peer);
      if (!target || peer === o.node) throw new PeerError(peer, kind, 'unknown-peer', 'not another lb node of the applied config');
      return sendRequest(client, target, kind, body, ro);
    },
    rejections: () => ({ counts: { ...counts }, last }),
    async close() {
      agent.destroy();
      await listening.close();
    },
  };
}
