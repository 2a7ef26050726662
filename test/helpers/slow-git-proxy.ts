// A proxy in front of a Git HTTP server that holds chosen ref advertisements (one per fetch or push): a slow Git
// server.
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SlowProxy {
  url: string;
  /** The ref advertisements served so far (one per fetch, deepen or push). */
  fetches: number;
  /** Whether the last ref advertisement came on a connection that had carried an earlier request (keep-alive). */
  lastAdvertReused: boolean;
  /** Holds the n-th ref advertisement (1-based; `service` is git-upload-pack for a fetch, git-receive-pack for a
   * push) for `ms` before forwarding it; others pass at once. */
  hold: (which: (n: number, service: string) => boolean, ms: number) => void;
  close(): Promise<void>;
}

export async function slowProxy(target: string): Promise<SlowProxy> {
  let which: (n: number, service: string) => boolean = () => false;
  let delay = 0;
  const timers = new Set<NodeJS.Timeout>();
  const p: SlowProxy = {
    url: '',
    fetches: 0,
    lastAdvertReused: false,
    hold: (w, ms) => ((which = w), (delay = ms), (p.fetches = 0)),
    close: () => {
      for (const t of timers) clearTimeout(t);
      return new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      });
    },
  };
  const served = new WeakSet<object>(); // connections that carried a request
  const server: Server = createServer((req, res) => {
    const advert = (req.url ?? '').includes('/info/refs');
    const n = advert ? ++p.fetches : 0;
    if (advert) p.lastAdvertReused = served.has(req.socket);
    served.add(req.socket);
    const forward = () => {
      const up = request(target + req.url, { method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    };
    const service = /[?&]service=([\w-]+)/.exec(req.url ?? '')?.[1] ?? '';
    if (advert && which(n, service)) {
      const t = setTimeout(() => (timers.delete(t), forward()), delay);
      timers.add(t);
    } else forward();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  p.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return p;
}
