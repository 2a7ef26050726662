// The lab backend's HTTP answers served by haproxy instead of Node (`labUp({ backendHttp: 'haproxy' })`, used by
// bench/e2e). A single Node process per backend answers ~3x fewer requests per CPU second than haproxy on this
// machine, so with Node backends an end-to-end bench measures the backends, not the path to them. haproxy is
// already a project dependency (the bench's TCP-mode peer) and, unlike Debian's nginx, its package starts no
// listening service on the host when installed.
//
// The reply keeps the Node server's contract (src/lab/servers/backend.ts): 200 for every path with
// `backend=<name> local=<ip>:<port> client=<ip>:<port>` and an `X-Backend: <name>` header, so traffic tests and
// the bench's warm-up read which backend answered. `/healthz` gets the same 200 (health checks read the status
// only). UDP is not haproxy's job: the lab still runs the Node server for the UDP ports.

/** haproxy configuration for backend `name` answering HTTP on `tcpPorts` (IPv4 and IPv6, wildcard binds: it runs
 * inside the backend's own network namespace, where the wildcard is that namespace's addresses and VIPs). */
export function backendHaproxyConfig(name: string, tcpPorts: number[]): string {
  if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new Error(`backend name '${name}' cannot go into a haproxy config`);
  return [
    'global',
    '  nbthread 1', // one thread per backend, like the one Node process it replaces
    '  maxconn 8192',
    'defaults',
    '  mode http',
    '  timeout connect 3s',
    '  timeout client 10s',
    '  timeout server 10s',
    '  timeout http-keep-alive 5s',
    'frontend http',
    ...tcpPorts.flatMap((p) => [`  bind 0.0.0.0:${p}`, `  bind :::${p} v6only`]),
    `  http-request return status 200 content-type text/plain lf-string "backend=${name} local=%fi:%fp client=%ci:%cp\\n" hdr X-Backend ${name}`,
    '',
  ].join('\n');
}
