// Webhook trigger: an HTTP endpoint that Git hosting calls on push. Authenticated with a shared secret:
// GitHub's `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>` or GitLab's `X-Gitlab-Token: <secret>`.
// Comparisons are constant-time; bodies are capped; pushes to other branches (the status branch!) are ignored.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createLimitedServer, listenHttp, type ConnectionStats } from '../http/http-limits.js';
import { createHmac, timingSafeEqual, createHash } from 'node:crypto';
import { RateLimitedWarnings } from '../log/rate-limited.js';
import { GitlbError } from '../../errors.js';

export interface WebhookOptions {
  host: string;
  port: number;
  secret: string;
  /** The config branch; a payload naming another ref does not trigger. */
  branch: string;
  onTrigger: (source: string) => void;
  maxBodyBytes?: number; // default 1 MiB
  log?: { warn(msg: string): void };
}

export interface WebhookServer {
  url: string;
  close(): Promise<void>;
  readonly stats: { accepted: number; rejected: number; ignored: number };
  readonly connectionStats: ConnectionStats;
}

export type Verdict = { ok: true; source: 'github' | 'gitlab' } | { ok: false; status: number; reason: string };

/** Constant-time equality of two strings of possibly different length (hash both first: no length leak). */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

export function githubSignature(secret: string, body: Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** Checks the authentication headers of a delivery. Pure apart from hashing. */
export function verifyDelivery(headers: IncomingMessage['headers'], body: Buffer, secret: string): Verdict {
  const sig = headers['x-hub-signature-256'];
  if (typeof sig === 'string') {
    return safeEqual(sig, githubSignature(secret, body))
      ? { ok: true, source: 'github' }
      : { ok: false, status: 401, reason: 'bad X-Hub-Signature-256' };
  }
  const token = headers['x-gitlab-token'];
  if (typeof token === 'string') {
    return safeEqual(token, secret) ? { ok: true, source: 'gitlab' } : { ok: false, status: 401, reason: 'bad X-Gitlab-Token' };
  }
  return { ok: false, status: 401, reason: 'no X-Hub-Signature-256 or X-Gitlab-Token header' };
}

/** Event names of a push: GitHub's X-GitHub-Event, GitLab's X-Gitlab-Event. */
const PUSH_EVENTS: Record<'github' | 'gitlab', { header: string; push: string }> = {
  github: { header: 'x-github-event', push: 'push' },
  gitlab: { header: 'x-gitlab-event', push: 'Push Hook' },
};

export type Delivery = { trigger: true } | { trigger: false; status: 202 | 400; reason: string };

/**
 * What an authenticated delivery asks for: only a push to the config branch schedules a reconcile. Other events
 * (ping, issues, ...) and pushes to other refs are acknowledged with 202 and the reason; a body that is not a JSON
 * object is a 400. Without an event header (some proxies strip it) the payload decides: a push carries `ref`.
 */
export function classifyDelivery(source: 'github' | 'gitlab', headers: IncomingMessage['headers'], body: Buffer, branch: string): Delivery {
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    return { trigger: false, status: 400, reason: 'malformed body: not JSON' };
  }
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return { trigger: false, status: 400, reason: 'malformed body: not a JSON object' };
  const event = headers[PUSH_EVENTS[source].header];
  if (typeof event === 'string' && event !== PUSH_EVENTS[source].push) {
    return { trigger: false, status: 202, reason: `ignored: event '${event.slice(0, 64)}' (only pushes trigger)` };
  }
  const ref = (payload as { ref?: unknown }).ref;
  if (typeof ref !== 'string') return { trigger: false, status: 202, reason: 'ignored: not a push (no ref)' };
  if (!ref.startsWith('refs/heads/')) return { trigger: false, status: 202, reason: `ignored: push of ${ref.slice(0, 200)}, not a branch` };
  const pushed = ref.slice('refs/heads/'.length);
  if (pushed !== branch) return { trigger: false, status: 202, reason: `ignored: push to ${pushed.slice(0, 200)}, not ${branch}` };
  return { trigger: true };
}

function reply(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain' });
  res.end(`${text}\n`);
}

export async function startWebhook(o: WebhookOptions): Promise<WebhookServer> {
  const maxBody = o.maxBodyBytes ?? 1 << 20;
  const stats = { accepted: 0, rejected: 0, ignored: 0 };
  // Anyone who reaches the port can cause rejections: logged at a bounded rate, a summary line for the rest.
  const rejections = o.log ? new RateLimitedWarnings({ warn: (m) => o.log!.warn(m), what: 'webhook rejected' }) : null;
  const server = createLimitedServer((req, res) => {
    if (req.method !== 'POST') return reply(res, 405, 'POST only');
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > maxBody) {
      stats.rejected++;
      res.setHeader('connection', 'close');
      return reply(res, 413, 'body too large');
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > maxBody) {
        tooBig = true;
        req.pause();
        stats.rejected++;
        res.setHeader('connection', 'close');
        reply(res, 413, 'body too large');
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (tooBig) return;
      const body = Buffer.concat(chunks);
      const v = verifyDelivery(req.headers, body, o.secret);
      if (!v.ok) {
        stats.rejected++;
        rejections?.note(v.reason, req.socket.remoteAddress ?? '?');
        return reply(res, v.status, v.reason);
      }
      // Pings, other events and pushes to other branches (the status branch!) are acknowledged but do nothing.
      const d = classifyDelivery(v.source, req.headers, body, o.branch);
      if (!d.trigger) {
        if (d.status === 400) stats.rejected++;
        else stats.ignored++;
        return reply(res, d.status, d.reason);
      }
      stats.accepted++;
      o.onTrigger(`webhook (${v.source})`);
      reply(res, 202, 'reconcile scheduled');
    });
  }, undefined, 'webhook');
  const listening = await listenHttp(server, o.port, o.host);
  return {
    url: `${listening.url}/`, stats, connectionStats: listening.connectionStats,
    close: async () => {
      await listening.close();
      rejections?.flush();
    },
  };
}

/** Parses `ADDR:PORT` (`[v6]:PORT` for IPv6). */
export function parseListen(spec: string, flag = '--webhook'): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(spec);
  if (!m) throw new GitlbError('InvalidOption', `${flag}: expected ADDR:PORT, got '${spec}'`, { field: flag });
  const port = Number(m[3]);
  if (port > 65535) throw new GitlbError('InvalidOption', `${flag}: port ${port} out of range`, { field: flag });
  return { host: (m[1] ?? m[2])!, port };
}
