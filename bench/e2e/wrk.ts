// Runs wrk inside a namespace for a bounded time and reads its summary.
import { exec, nsArgv } from '../../src/lab/netns.js';

export interface WrkResult {
  requestsPerSec: number;
  requests: number;
  errors: number;
  latencyAvg: string;
}

/** `closeEach`: send `Connection: close`, so every request opens a new TCP connection (connections/s). */
export async function wrk(ns: string, url: string, o: { seconds: number; connections: number; closeEach: boolean }): Promise<WrkResult> {
  const argv = ['wrk', '-t', '1', '-c', String(o.connections), '-d', `${o.seconds}s`, '--timeout', '3s', ...(o.closeEach ? ['-H', 'Connection: close'] : []), url];
  const r = await exec(nsArgv(ns, argv), { timeoutMs: (o.seconds + 20) * 1000 });
  if (r.code !== 0) throw new Error(`wrk failed (exit ${r.code}): ${r.stderr.trim()}`);
  return parseWrk(r.stdout);
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
