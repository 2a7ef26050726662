// Runs wrk inside a namespace for a bounded time and reads its summary.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec, nsArgv } from '../../src/lab/netns.js';

export interface WrkResult {
  requestsPerSec: number;
  requests: number;
  errors: number;
  latencyAvg: string;
}

export interface WrkOptions {
  seconds: number;
  /** Total connections; wrk gives each thread connections / threads of them. */
  connections: number;
  threads: number;
  /** `Connection: close`, so every request opens a new TCP connection (connections/s). */
  closeEach: boolean;
  /**
   * Send thread i's connections to spreadOver[i % n] (same port and path as `url`) instead of to the URL's host:
   * a wrk Lua `setup(thread)` sets `thread.addr`, which wrk 4 reads before the thread opens its connections. A
   * thread has one address, so the load is spread by thread, evenly when threads is a multiple of n: the client
   * runs the same threads and connections as against a VIP, only where they go differs.
   */
  spreadOver?: string[];
}

/** The wrk Lua script that points thread i at addrs[i % n] (`setup` runs once per thread, in thread order). */
export function spreadScript(addrs: string[], port: number): string {
  for (const a of addrs) if (!/^[0-9a-fA-F.:]+$/.test(a)) throw new Error(`not an IP address: ${a}`);
  return [
    `local addrs = { ${addrs.map((a) => `"${a}"`).join(', ')} }`,
    'local n = 0',
    'function setup(thread)',
    '  n = n + 1',
    `  thread.addr = wrk.lookup(addrs[(n - 1) % #addrs + 1], "${port}")[1]`,
    'end',
    '',
  ].join('\n');
}

export async function wrk(ns: string, url: string, o: WrkOptions): Promise<WrkResult> {
  let dir: string | null = null;
  const argv = ['wrk', '-t', String(o.threads), '-c', String(o.connections), '-d', `${o.seconds}s`, '--timeout', '3s'];
  if (o.closeEach) argv.push('-H', 'Connection: close');
  try {
    if (o.spreadOver) {
      dir = mkdtempSync(join(tmpdir(), 'gitlb-wrk-'));
      const u = new URL(url);
      writeFileSync(join(dir, 'spread.lua'), spreadScript(o.spreadOver, Number(u.port || 80)));
      argv.push('-s', join(dir, 'spread.lua'));
    }
    argv.push(url);
    const r = await exec(nsArgv(ns, argv), { timeoutMs: (o.seconds + 20) * 1000 });
    if (r.code !== 0) throw new Error(`wrk failed (exit ${r.code}): ${r.stderr.trim()}`);
    return parseWrk(r.stdout);
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

export function parseWrk(text: string): WrkResult {
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(text);
  const total = /(\d+) requests in/.exec(text);
  const lat = /Latency\s+(\S+)/.exec(text);
  const errs = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(text);
  if (!rps || !total) throw new Error(`cannot read wrk output:\n${text}`);
  const errors = (errs ? errs.slice(1).reduce((a, b) => a + Number(b), 0) : 0) + (non2xx ? Number(non2xx[1]) : 0);
  return { requestsPerSec: Number(rps[1]), requests: Number(total[1]), errors, latencyAvg: lat ? lat[1]! : '?' };
}
