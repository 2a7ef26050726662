// A small smart-HTTP Git server: Node's http module in front of git's own `git http-backend` CGI.
// Used by tests, benchmarks and the lab (isomorphic-git speaks smart HTTP only, no file:// or ssh).
// Bodies are streamed both ways; gzip request bodies are passed through (http-backend inflates them itself).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { listenHttp } from '../reconciler/http/http-limits.js';

export interface GitHttpServerOptions {
  /** Directory holding the repositories; URL path `/<name>.git/...` maps to `<projectRoot>/<name>.git`. */
  projectRoot: string;
  host?: string; // default 127.0.0.1
  port?: number; // default 0 (any free port)
  /** Accept pushes on every repository (sets http.receivepack=true for the CGI). Default true; when false the
   * repository's own `http.receivepack` setting decides. */
  receivePack?: boolean;
  /** Require HTTP Basic authentication with these credentials (tests of credential handling). */
  auth?: { username: string; password: string };
}

export interface GitHttpServer {
  /** Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`; a repo is at `${url}/<name>.git`. */
  url: string;
  close(): Promise<void>;
}

/** Request headers that CGI passes as HTTP_* variables and http-backend reads. */
const FORWARDED_HEADERS = ['content-encoding', 'git-protocol', 'accept', 'user-agent'];

function cgiEnvironment(req: IncomingMessage, opts: { projectRoot: string; receivePack: boolean }): NodeJS.ProcessEnv {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    GIT_PROJECT_ROOT: opts.projectRoot,
    GIT_HTTP_EXPORT_ALL: '1',
    GATEWAY_INTERFACE: 'CGI/1.1',
    SERVER_PROTOCOL: `HTTP/${req.httpVersion}`,
    REQUEST_METHOD: req.method ?? 'GET',
    PATH_INFO: decodeURIComponent(url.pathname),
    QUERY_STRING: url.search.startsWith('?') ? url.search.slice(1) : '',
    REMOTE_ADDR: req.socket.remoteAddress ?? '',
    CONTENT_TYPE: req.headers['content-type'] ?? '',
  };
  // Chunked request bodies carry no length; http-backend then reads stdin to EOF, which is what we give it.
  if (req.headers['content-length'] !== undefined) env.CONTENT_LENGTH = req.headers['content-length'];
  for (const h of FORWARDED_HEADERS) {
    const v = req.headers[h];
    if (typeof v === 'string') env[`HTTP_${h.toUpperCase().replace(/-/g, '_')}`] = v;
  }
  if (typeof req.headers['git-protocol'] === 'string') env.GIT_PROTOCOL = req.headers['git-protocol'];
  if (opts.receivePack) {
    env.GIT_CONFIG_COUNT = '1';
    env.GIT_CONFIG_KEY_0 = 'http.receivepack';
    env.GIT_CONFIG_VALUE_0 = 'true';
  }
  return env;
}

/** Splits CGI output into its header block and body; calls back once the blank line has been seen. */
function relayCgiOutput(child: ChildProcess, res: ServerResponse): void {
  let head = Buffer.alloc(0);
  let headerDone = false;
  child.stdout!.on('data', (chunk: Buffer) => {
    if (headerDone) {
      if (!res.write(chunk)) {
        child.stdout!.pause();
        res.once('drain', () => child.stdout!.resume());
      }
      return;
    }
    head = Buffer.concat([head, chunk]);
    let sep = head.indexOf('\r\n\r\n');
    let sepLen = 4;
    const lf = head.indexOf('\n\n');
    if (lf >= 0 && (sep < 0 || lf < sep)) {
      sep = lf;
      sepLen = 2;
    }
    if (sep < 0) return;
    headerDone = true;
    let status = 200;
    for (const line of head.subarray(0, sep).toString('latin1').split(/\r?\n/)) {
      const colon = line.indexOf(':');
      if (colon <= 0) continue;
      const name = line.slice(0, colon).trim();
      const value = line.slice(colon + 1).trim();
      if (name.toLowerCase() === 'status') status = parseInt(value, 10) || 500;
      else res.setHeader(name, value);
    }
    res.statusCode = status;
    const rest = head.subarray(sep + sepLen);
    if (rest.length) res.write(rest);
  });
  child.stdout!.on('end', () => {
    if (!headerDone && !res.headersSent) {
      res.statusCode = 502;
      res.end('git http-backend produced no headers\n');
    } else res.end();
  });
}

export async function startGitHttpServer(options: GitHttpServerOptions): Promise<GitHttpServer> {
  const opts: Required<Omit<GitHttpServerOptions, 'auth'>> & Pick<GitHttpServerOptions, 'auth'> = {
    host: '127.0.0.1',
    port: 0,
    receivePack: true,
    ...options,
    projectRoot: resolve(options.projectRoot),
  };
  const children = new Set<ChildProcess>();

  const expectedAuth = opts.auth
    ? `Basic ${Buffer.from(`${opts.auth.username}:${opts.auth.password}`).toString('base64')}`
    : null;
  const server = createServer((req, res) => {
    if (expectedAuth && req.headers.authorization !== expectedAuth) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="gitlb-test"', 'content-type': 'text/plain' });
      res.end('authentication required\n');
      req.resume();
      return;
    }
    const child = spawn('git', ['http-backend'], { env: cgiEnvironment(req, opts), stdio: ['pipe', 'pipe', 'pipe'] });
    children.add(child);
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString();
    });
    child.on('error', (err) => {
      if (!res.headersSent) {
        res.statusCode = 500;
        res.end(`cannot run git http-backend: ${err.message}\n`);
      }
    });
    child.on('close', () => {
      children.delete(child);
      if (!res.writableEnded) res.end();
    });
    relayCgiOutput(child, res);
    // http-backend may exit before reading the whole body (errors); ignore EPIPE on its stdin.
    child.stdin!.on('error', () => {});
    req.pipe(child.stdin!);
    req.on('aborted', () => child.kill('SIGTERM'));
    res.on('close', () => {
      if (child.exitCode === null && !res.writableFinished) child.kill('SIGTERM');
    });
  });

  const listening = await listenHttp(server, opts.port, opts.host);
  return {
    url: listening.url,
    close: () => {
      for (const c of children) c.kill('SIGTERM');
      return listening.close();
    },
  };
}
