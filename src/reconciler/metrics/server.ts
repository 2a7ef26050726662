// The metrics endpoint of `gitlb run`: GET /metrics (Prometheus text format) and GET /healthz (200 once the node
// serves an applied revision, 503 before; Kubernetes readiness and the lab's Prometheus use it).
import type { Server } from 'node:http';
import { createLimitedServer, listenHttp, type Listening } from '../http/http-limits.js';
import type { Registry } from 'prom-client';
import { parseListen } from '../triggers/webhook.js';

export type MetricsServer = Listening;

export interface MetricsServerOptions {
  listen: string; // ADDR:PORT (port 0: any free port)
  registry: Registry;
  /** null when ready, else why not (the /healthz body). */
  notReady: () => string | null;
  onError?: (err: Error) => void;
}

export async function startMetricsServer(o: MetricsServerOptions): Promise<MetricsServer> {
  const { host, port } = parseListen(o.listen, '--metrics');
  const server: Server = createLimitedServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/metrics') {
      o.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': o.registry.contentType }).end(text),
        (err: Error) => {
          o.onError?.(err);
          res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics unavailable: ${err.message}\n`);
        },
      );
      return;
    }
    if (path === '/healthz') {
      const why = o.notReady();
      res.writeHead(why ? 503 : 200, { 'content-type': 'text/plain' }).end(why ? `not ready: ${why}\n` : 'ok\n');
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('try /metrics or /healthz\n');
  }, undefined, 'metrics');
  const listening = await listenHttp(server, port, host);
  server.unref(); // never the reason a process stays alive (a failed start must still exit)
  return listening;
}
