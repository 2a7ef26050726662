// One health probe = one socket, bounded by a timeout and an AbortSignal. Probes never throw: every outcome,
// including a timeout or an abort, is a CheckResult, so a failing check cannot break the scheduler.
// The daemon runs inside the lb node's network namespace, so plain node:net / node:http connects are right.
import net from 'node:net';
import http from 'node:http';
import type { CheckResult } from './hysteresis.js';

export interface TcpProbe {
  type: 'tcp';
  address: string;
  port: number;
  timeoutMs: number;
}

export interface HttpProbe {
  type: 'http';
  address: string;
  port: number;
  path: string;
  timeoutMs: number;
  expectStatus: { min: number; max: number };
}

export type Probe = TcpProbe | HttpProbe;

export function describeProbe(p: Probe): string {
  const host = net.isIPv6(p.address) ? `[${p.address}]` : p.address;
  return p.type === 'tcp' ? `tcp ${host}:${p.port}` : `http GET ${host}:${p.port}${p.path}`;
}

export function runProbe(p: Probe, signal?: AbortSignal): Promise<CheckResult> {
  return p.type === 'tcp' ? tcpProbe(p, signal) : httpProbe(p, signal);
}

/** Succeeds when the TCP handshake completes; closes the connection right away. */
export function tcpProbe(p: TcpProbe, signal?: AbortSignal): Promise<CheckResult> {
  return withDeadline(p.timeoutMs, signal, (finish) => {
    const socket = net.connect({ host: p.address, port: p.port });
    socket.once('connect', () => finish(true, 'connected'));
    socket.once('error', (e: NodeJS.ErrnoException) => finish(false, e.code ?? e.message));
    return () => socket.destroy();
  });
}

/** Succeeds when a GET of `path` answers with a status inside `expectStatus` (inclusive). Body is discarded. */
export function httpProbe(p: HttpProbe, signal?: AbortSignal): Promise<CheckResult> {
  return withDeadline(p.timeoutMs, signal, (finish) => {
    const host = net.isIPv6(p.address) ? `[${p.address}]` : p.address;
    const req = http.request({
      host: p.address,
      port: p.port,
      path: p.path,
      method: 'GET',
      agent: false, // one fresh connection per check: a kept-alive socket would hide a dead listener
      headers: { host: `${host}:${p.port}`, 'user-agent': 'gitlb-health', connection: 'close' },
    });
    req.once('response', (res) => {
      const status = res.statusCode ?? 0;
      res.resume();
      finish(status >= p.expectStatus.min && status <= p.expectStatus.max, `HTTP ${status}`);
    });
    req.once('error', (e: NodeJS.ErrnoException) => finish(false, e.code ?? e.message));
    req.end();
    return () => req.destroy();
  });
}

/** Runs `start`, resolving with the first of: its finish(), the timeout, the abort. Always cleans up the socket. */
function withDeadline(
  timeoutMs: number,
  signal: AbortSignal | undefined,
  start: (finish: (ok: boolean, detail: string) => void) => () => void,
): Promise<CheckResult> {
  const begun = performance.now();
  return new Promise((resolve) => {
    let done = false;
    let cleanup: () => void = () => {};
    const finish = (ok: boolean, detail: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      cleanup();
      resolve({ ok, detail, at: Date.now(), durationMs: Math.round((performance.now() - begun) * 10) / 10 });
    };
    const onAbort = () => finish(false, 'aborted');
    const timer = setTimeout(() => finish(false, `timeout after ${timeoutMs} ms`), timeoutMs);
    if (signal?.aborted) return finish(false, 'aborted');
    signal?.addEventListener('abort', onAbort, { once: true });
    cleanup = start(finish);
    if (done) cleanup(); // finished synchronously (cannot happen with sockets, but keep the invariant)
  });
}
