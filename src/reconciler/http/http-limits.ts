// Limits and the bind shared by the daemon's HTTP listeners (metrics and /healthz, peer observations, webhook; the
// lab's Git server binds the same way). They face the network from a root process, so slow and hostile clients
// must not starve them (docs/security.md "HTTP listeners"):
// - deadlines: request headers within 3 s, the whole request within 10 s (Node checks both every second, not at
//   its default of 30 s), a response finished within 10 s (a client that does not read is cut);
// - a slot is protected only while the server works on a complete request: a connection that has not sent a whole
//   request yet (headers or body still trickling, or idle between keep-alive requests), whose response is written
//   and only drains to the client, or whose request is older than 2 s (a response the client does not read), can be
//   evicted. When all slots are
//   taken, a new connection evicts such a one, from the source holding the most connections, oldest first, so a
//   trickling client (slowloris) holds a slot only until someone needs it, and a prompt request (a kubelet's
//   /healthz, a Prometheus scrape, a webhook delivery) always finds one;
// - a cap of open connections per source (an IPv4 address, an IPv6 /64: one host of IPv6 commonly holds a whole
//   /64): a source at its cap evicts its own oldest evictable connection or, when it has none, the new connection is
//   closed at once.
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { formatCidr, formatIp, parseIp } from '../../render/ip.js';

export const HTTP_LIMITS = {
  headersTimeout: 3_000,
  requestTimeout: 10_000,
  /** How often Node checks the two timeouts above (its default, 30 s, would dominate them). */
  connectionsCheckingInterval: 1_000,
  keepAliveTimeout: 5_000,
  maxHeaderSize: 16 * 1024,
  /** Open connections per listener. */
  maxConnections: 64,
  /** Open connections per source (sourceOf: an IPv4 address or an IPv6 /64). */
  maxConnectionsPerSource: 8,
  /** A request is protected from eviction for this long; a legitimate one is answered well within it. */
  protectedMs: 2_000,
  /** From the request to the end of its response; past it the connection is destroyed (a client that never reads). */
  responseTimeout: 10_000,
} as const;

export type SlotLimits = Pick<typeof HTTP_LIMITS, 'maxConnections' | 'maxConnectionsPerSource' | 'protectedMs'>;
export type ServerLimits = SlotLimits & Pick<typeof HTTP_LIMITS, 'responseTimeout'>;

/** Why connections were dropped before their time, per listener (counted, never logged one by one). */
export interface ConnectionStats {
  /** Evicted to make room: idle, trickling, or holding a request for longer than protectedMs. */
  evicted: number;
  /** Closed at once: no slot could be freed (per source or in all). */
  refused: number;
  /** Destroyed because the response took longer than responseTimeout. */
  responseTimedOut: number;
}

/**
 * The source a connection counts against for the per-source cap: the IPv4 address (an IPv4-mapped IPv6 address
 * counts as its IPv4 address), or the /64 of an IPv6 address, since one subscriber or host typically has a whole
 * /64 and could otherwise open 8 connections from each of its 2^64 addresses. Text that is no address stays as it is.
 */
export function sourceOf(remoteAddress: string): string {
  const ip = parseIp(remoteAddress.replace(/%.*$/, '')); // a link-local address may carry its zone
  if (!ip) return remoteAddress;
  const b = ip.bytes;
  if (ip.family === 4) return formatIp(ip);
  if (b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) return formatIp({ family: 4, bytes: b.subarray(12) });
  b.fill(0, 8);
  return formatCidr({ family: 6, bytes: b, prefix: 64 });
}

interface Slot {
  /** sourceOf the peer's address. */
  source: string;
  /** When it became evictable (accepted, or idle again after a response), or when its request began. */
  since: number;
  /** Requests in flight (1 at most without pipelining). */
  busy: number;
  /** Whether the request in flight is still arriving (its body incomplete). */
  arriving: () => boolean;
  /** Whether its response is fully written (end() called): what is left is the client reading it. */
  answered: () => boolean;
  drop(): void;
}

/**
 * Slot bookkeeping of one listener: which connection to evict when a new one needs room. Pure (the clock is passed
 * in), so the policy is tested without sockets.
 */
export class ConnectionSlots {
  private readonly slots = new Set<Slot>();
  private readonly perSource = new Map<string, number>();
  readonly stats: ConnectionStats = { evicted: 0, refused: 0, responseTimedOut: 0 };

  constructor(private readonly limits: SlotLimits = HTTP_LIMITS) {}

  get size(): number {
    return this.slots.size;
  }

  /** Admits a new connection from `address` (evicting one if needed); null when it must be closed. */
  admit(address: string, now: number, drop: () => void): Slot | null {
    const source = sourceOf(address);
    const own = this.perSource.get(source) ?? 0;
    if (own >= this.limits.maxConnectionsPerSource && !this.evict(now, source)) return this.refuse();
    if (this.slots.size >= this.limits.maxConnections && !this.evict(now)) return this.refuse();
    const slot: Slot = { source, since: now, busy: 0, arriving: () => false, answered: () => false, drop };
    this.slots.add(slot);
    this.perSource.set(source, (this.perSource.get(source) ?? 0) + 1);
    return slot;
  }

  requestStarted(slot: Slot, now: number, arriving: () => boolean = () => false, answered: () => boolean = () => false): void {
    slot.busy++;
    slot.since = now;
    slot.arriving = arriving;
    slot.answered = answered;
  }

  requestEnded(slot: Slot, now: number): void {
    slot.busy = Math.max(0, slot.busy - 1);
    if (slot.busy === 0) slot.since = now;
  }

  release(slot: Slot): void {
    if (!this.slots.delete(slot)) return;
    const n = (this.perSource.get(slot.source) ?? 1) - 1;
    if (n > 0) this.perSource.set(slot.source, n);
    else this.perSource.delete(slot.source);
  }

  private refuse(): null {
    this.stats.refused++;
    return null;
  }

  private evictable(slot: Slot, now: number): boolean {
    // Protected: a complete request the server is still answering, for protectedMs at most. Once the response is
    // written, a client that reads it slowly (a large /metrics it does not read) holds the slot unprotected.
    return slot.busy === 0 || slot.arriving() || slot.answered() || now - slot.since >= this.limits.protectedMs;
  }

  /**
   * Drops one evictable connection: of `source` when given, else of the source holding the most connections
   * (a flood's source before anyone else), the oldest first. False when none is evictable.
   */
  private evict(now: number, source?: string): boolean {
    let victim: Slot | undefined;
    let victimWeight = -1;
    for (const slot of this.slots) {
      if ((source !== undefined && slot.source !== source) || !this.evictable(slot, now)) continue;
      const weight = this.perSource.get(slot.source) ?? 0;
      if (weight > victimWeight || (weight === victimWeight && slot.since < victim!.since)) {
        victim = slot;
        victimWeight = weight;
      }
    }
    if (!victim) return false;
    this.release(victim);
    this.stats.evicted++;
    victim.drop();
    return true;
  }
}

export interface LimitedServer extends Server {
  readonly connectionStats: ConnectionStats;
}

/** The daemon's named listeners' stats, for gitlb_http_connections_dropped_total (metrics/index.ts). */
const named = new Map<string, ConnectionStats>();

export function namedListenerStats(): ReadonlyMap<string, ConnectionStats> {
  return named;
}

/**
 * node:http's createServer with HTTP_LIMITS applied: deadlines, slots, the per-source cap. A `name` ('metrics',
 * 'webhook', 'peer') reports the listener's dropped connections in the node's metrics.
 */
export function createLimitedServer(handler: RequestListener, limits: ServerLimits = HTTP_LIMITS, name?: string): LimitedServer {
  const { headersTimeout, requestTimeout, connectionsCheckingInterval, keepAliveTimeout, maxHeaderSize } = HTTP_LIMITS;
  const { responseTimeout } = limits;
  const slots = new ConnectionSlots(limits);
  const bySocket = new WeakMap<Socket, Slot>();
  const server = createServer({ headersTimeout, requestTimeout, connectionsCheckingInterval, keepAliveTimeout, maxHeaderSize },
    (req: IncomingMessage, res: ServerResponse) => {
      const slot = bySocket.get(req.socket);
      if (slot) {
        slots.requestStarted(slot, Date.now(), () => !req.complete, () => res.writableEnded);
        const deadline = setTimeout(() => {
          slots.stats.responseTimedOut++;
          req.socket.destroy();
        }, responseTimeout);
        deadline.unref();
        res.once('close', () => {
          clearTimeout(deadline);
          slots.requestEnded(slot, Date.now());
        });
      }
      handler(req, res);
    }) as LimitedServer;
  Object.defineProperty(server, 'connectionStats', { value: slots.stats });
  if (name) named.set(name, slots.stats);
  server.on('connection', (socket: Socket) => {
    const slot = slots.admit(socket.remoteAddress ?? '?', Date.now(), () => socket.destroy());
    if (!slot) {
      socket.destroy();
      return;
    }
    bySocket.set(socket, slot);
    socket.once('close', () => slots.release(slot));
  });
  // A malformed or timed-out request: drop the socket without an answer (never echo anything about it).
  server.on('clientError', (_err, socket) => socket.destroy());
  return server;
}

export interface Listening {
  /** http://ADDR:PORT of the bound address (IPv6 in brackets), without a trailing slash. */
  url: string;
  /** Stops listening and drops open connections (keep-alive ones would otherwise hold close() for seconds). */
  close(): Promise<void>;
  /** Connections dropped by the limits (a server from createLimitedServer; zeros otherwise). */
  readonly connectionStats: ConnectionStats;
}

/** Binds `server` to host:port (port 0: any free port); rejects with the bind error (EADDRINUSE, EACCES). */
export async function listenHttp(server: Server, port: number, host: string): Promise<Listening> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const a = server.address() as AddressInfo;
  return {
    url: `http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`,
    connectionStats: (server as Partial<LimitedServer>).connectionStats ?? { evicted: 0, refused: 0, responseTimedOut: 0 },
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
