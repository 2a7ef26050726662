// Limits and the bind shared by the daemon's HTTP listeners (metrics, peer observations, webhook; the lab's Git
// server binds the same way). They face the network from a root process, so a client that trickles its headers or
// body (slowloris) must be cut off within seconds: Node's defaults hold such a connection for 60 s (headers) or
// 300 s (request), checked only every 30 s.
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export const HTTP_LIMITS = {
  headersTimeout: 5_000,
  requestTimeout: 10_000,
  /** How often Node checks the two timeouts above (its default, 30 s, would dominate them). */
  connectionsCheckingInterval: 1_000,
  keepAliveTimeout: 5_000,
  maxHeaderSize: 16 * 1024,
  /** Open connections per listener; beyond it new ones are closed at once. */
  maxConnections: 64,
} as const;

/** node:http's createServer with HTTP_LIMITS applied. */
export function createLimitedServer(handler: RequestListener): Server {
  const { maxConnections, ...options } = HTTP_LIMITS;
  const server = createServer(options, handler);
  server.maxConnections = maxConnections;
  // A malformed or timed-out request: drop the socket without an answer (never echo anything about it).
  server.on('clientError', (_err, socket) => socket.destroy());
  return server;
}

export interface Listening {
  /** http://ADDR:PORT of the bound address (IPv6 in brackets), without a trailing slash. */
  url: string;
  /** Stops listening and drops open connections (keep-alive ones would otherwise hold close() for seconds). */
  close(): Promise<void>;
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
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
