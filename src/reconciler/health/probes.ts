// One health probe = one socket, bounded by a timeout and an AbortSignal. Probes never throw: every outcome,
// including a timeout or an abort, is a CheckResult, so a failing check cannot break the scheduler.
// The daemon runs inside the lb node's network namespace, so plain node:net / node:http connects are right.
import net from 'node:net';
import http from 'node:http';
import type { CheckResult } from './hysteresis.js';

/**
 * healthCheck.via: vip — the probe connects to the real's address from a source port the checker reserved for it;
 * the TC programs of src/bpf/vip-probe.ts turn it into a packet to `vip` on the wire (l2, ipip or gue; ipopt: to the real
 * with the option naming vip:vipPort) and the real's answer from the VIP back into one from the real.
 */
export interface ViaVip {
  vip: string;
  encap: 'l2' | 'ipip' | 'ipopt' | 'gue';
  /** ipopt: the service port whose targetPort the probe connects to (the option names vip:vipPort). */
  vipPort?: number;
  /** gue: the UDP port the probe is tunnelled to (Cluster spec.gue.port, where backends decapsulate). */
  guePort?: number;
}

interface ProbeBase {
  address: string;
  port: number;
  timeoutMs: number;
  via?: ViaVip;
  /** Local port to connect from (via: vip only; set by the checker, not part of the check's definition). */
  sourcePort?: number;
}

export interface TcpProbe extends ProbeBase {
  type: 'tcp';
}

export interface HttpProbe extends ProbeBase {
  type: 'http';
  path: string;
  expectStatus: { min: number; max: number };
}

export type Probe = TcpProbe | HttpProbe;

const hostText = (a: string) => (net.isIPv6(a) ? `[${a}]` : a);

export function describeProbe(p: Probe): string {
  const host = hostText(p.via ? p.via.vip : p.address);
  // ipopt: the client's view is VIP:port, the probe goes to the real's targetPort
  const via = p.via ? ` via ${p.via.encap} to ${p.address}${p.via.vipPort ? `:${p.port}` : ''}` : '';
  const port = p.via?.vipPort ?? p.port;
  return (p.type === 'tcp' ? `tcp ${host}:${port}` : `http GET ${host}:${port}${p.path}`) + via;
}

/**
 * A shorter deadline for the probe's TCP handshake, which may be set before or while the probe runs: passive
 * evidence that the real answers no SYN (checker.suspect) asks its probe to confirm exactly that, quickly. Once the
 * connection is up the probe keeps its whole `timeoutMs` (a slow HTTP answer is not what the evidence was about).
 */
export class ConnectDeadline {
  private ms: number | undefined;
  private listener: ((ms: number) => void) | undefined;

  /** Whether shorten() was called. */
  get shortened(): boolean {
    return this.ms !== undefined;
  }

  /** The handshake must complete within `ms` from now (a shorter one already set stays). */
  shorten(ms: number): void {
    this.ms = Math.min(ms, this.ms ?? Infinity);
    this.listener?.(ms);
  }

  /** probes.ts: called once the socket is opening. */
  watch(listener: (ms: number) => void): void {
    this.listener = listener;
    if (this.ms !== undefined) listener(this.ms);
  }
}

export function runProbe(p: Probe, signal?: AbortSignal, connect?: ConnectDeadline): Promise<CheckResult> {
  return p.type === 'tcp' ? tcpProbe(p, signal, connect) : httpProbe(p, signal, connect);
}

/** Fails the probe when `socket` is not connected by a deadline `connect` sets (now or later; the earliest holds). */
function watchConnect(socket: net.Socket, connect: ConnectDeadline | undefined, finish: (ok: boolean, detail: string) => void): void {
  if (!connect) return;
  let connected = false;
  let due = Infinity;
  let timer: NodeJS.Timeout | undefined;
  socket.once('connect', () => {
    connected = true;
    clearTimeout(timer);
  });
  socket.once('close', () => clearTimeout(timer));
  connect.watch((ms) => {
    if (connected || Date.now() + ms >= due) return;
    due = Date.now() + ms;
    clearTimeout(timer);
    timer = setTimeout(() => finish(false, `no answer to connect within ${ms} ms (suspect)`), ms);
  });
}

/** Succeeds when the TCP handshake completes; closes the connection right away. */
export function tcpProbe(p: TcpProbe, signal?: AbortSignal, connect?: ConnectDeadline): Promise<CheckResult> {
  return withDeadline(p.timeoutMs, signal, (finish) => {
    const socket = net.connect({ host: p.address, port: p.port, ...local(p) });
    watchConnect(socket, connect, finish);
    socket.once('connect', () => finish(true, 'connected'));
    socket.once('error', (e: NodeJS.ErrnoException) => finish(false, e.code ?? e.message));
    return () => close(socket, p);
  });
}

/** Succeeds when a GET of `path` answers with a status inside `expectStatus` (inclusive). Body is discarded. */
export function httpProbe(p: HttpProbe, signal?: AbortSignal, connect?: ConnectDeadline): Promise<CheckResult> {
  return withDeadline(p.timeoutMs, signal, (finish) => {
    // via: vip asks as a client of the VIP would
    const host = hostText(p.via ? p.via.vip : p.address);
    const req = http.request({
      host: p.address,
      port: p.port,
      path: p.path,
      method: 'GET',
      agent: false, // one fresh connection per check: a kept-alive socket would hide a dead listener
      ...local(p),
      headers: { host: `${host}:${p.port}`, 'user-agent': 'gitlb-health', connection: 'close' },
    });
    req.once('socket', (socket) => watchConnect(socket, connect, finish));
    req.once('response', (res) => {
      const status = res.statusCode ?? 0;
      res.resume();
      finish(status >= p.expectStatus.min && status <= p.expectStatus.max, `HTTP ${status}`);
    });
    req.once('error', (e: NodeJS.ErrnoException) => finish(false, e.code ?? e.message));
    req.end();
    return () => (req.socket ? close(req.socket, p) : req.destroy());
  });
}

/** A fixed source port (via: vip) reuses one 4-tuple every interval. */
function local(p: Probe): { localPort?: number } {
  return p.sourcePort ? { localPort: p.sourcePort } : {};
}

/** With a fixed source port, close by RST: a FIN would leave the 4-tuple in TIME_WAIT and fail the next probe. */
function close(socket: net.Socket, p: Probe): void {
  if (p.sourcePort && !socket.destroyed && socket.readyState !== 'opening') socket.resetAndDestroy();
  else socket.destroy();
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
