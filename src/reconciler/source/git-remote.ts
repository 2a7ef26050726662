// Where a node's Git objects come from and where its commits go: an HTTP(S) remote fetched with
// isomorphic-git into a per-node cache, or (development) a local repository read from its own objects.
// Both expose the same small surface so the reconciler, status writer and rollback never care which.
import * as fs from 'node:fs';
import { mkdir, open, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import git from 'isomorphic-git';
import isoHttp from 'isomorphic-git/http/node';
import { Agent as HttpAgent, type ClientRequest } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { Agent as HttpsAgent } from 'node:https';
import { type GitCredentials, redactUrl, redactText } from './credentials.js';
import { DEFAULT_GIT_TIMEOUT_MS, withDeadline } from './deadline.js';
import { GitlbError, errorCode, type ErrorCode } from '../../errors.js';

export interface GitRemote {
  /** Git directory holding the objects this process reads and writes. */
  readonly gitdir: string;
  /** Safe to log (no userinfo). */
  readonly description: string;
  /** Brings `branch` up to date locally; returns its head commit, or null when the branch does not exist. */
  fetch(branch: string, opts?: { depth?: number }): Promise<string | null>;
  /** Fetches `extra` more commits of history behind what is there (for ancestry checks on shallow caches). */
  deepen(branch: string, extra: number): Promise<void>;
  /** Updates `branch` to `oid` iff it currently is `expectedOld` (null: must not exist). False when it moved. */
  push(branch: string, oid: string, expectedOld: string | null): Promise<boolean>;
}

const SHALLOW_DEPTH = 1;

// Node 20's global agent gives sockets a 5 s idle timeout, and isomorphic-git's client turns that into
// "Request timed out" while a busy server is still indexing a pushed pack. Use agents with a generous one.
const IDLE_TIMEOUT_MS = 60_000;

// A keep-alive socket parked in the pool gets the server's hint (`Keep-Alive: timeout=5`, sent by Node and Apache
// servers) minus 1 s as its idle timeout, and Node keeps that timeout when it hands the socket to the next request:
// a slow answer on a reused connection then failed with "Request timed out" after 4 s whatever --git-timeout said.
// A reused socket gets the agent's idle timeout back; the parked one keeps the hint (so it is dropped before the
// server closes it).
class GitHttpAgent extends HttpAgent {
  override reuseSocket(socket: Duplex, request: ClientRequest): void {
    super.reuseSocket(socket, request);
    (socket as Socket).setTimeout(IDLE_TIMEOUT_MS);
  }
}
class GitHttpsAgent extends HttpsAgent {
  override reuseSocket(socket: Duplex, request: ClientRequest): void {
    super.reuseSocket(socket, request);
    (socket as Socket).setTimeout(IDLE_TIMEOUT_MS);
  }
}
const httpAgent = new GitHttpAgent({ keepAlive: true, timeout: IDLE_TIMEOUT_MS });
const httpsAgent = new GitHttpsAgent({ keepAlive: true, timeout: IDLE_TIMEOUT_MS });
/** An HTTP client for isomorphic-git whose requests are destroyed when `signal` aborts (the operation's deadline). */
function httpClient(signal: AbortSignal): typeof isoHttp {
  return {
    request: (req) => isoHttp.request({ ...req, signal, agent: req.url.startsWith('https:') ? httpsAgent : httpAgent }),
  };
}

/** Local development repository: objects and refs are the repository's own; updates use git's lock-file protocol. */
export class LocalRemote implements GitRemote {
  readonly gitdir: string;
  readonly description: string;
  constructor(repoPath: string) {
    this.gitdir = fs.existsSync(join(repoPath, '.git')) ? join(repoPath, '.git') : repoPath;
    this.description = repoPath;
    if (!fs.existsSync(join(this.gitdir, 'HEAD'))) throw new GitlbError('FetchFailed', `${repoPath}: not a git repository`);
  }

  async fetch(branch: string): Promise<string | null> {
    try {
      return await git.resolveRef({ fs, gitdir: this.gitdir, ref: `refs/heads/${branch}` });
    } catch (err) {
      if ((err as { code?: string }).code === 'NotFoundError') return null;
      throw err;
    }
  }

  async deepen(): Promise<void> {
    // A local repository has its whole history.
  }

  async push(branch: string, oid: string, expectedOld: string | null): Promise<boolean> {
    // Same protocol as git itself: create `<ref>.lock` exclusively, check the old value, rename over the ref.
    const refPath = join(this.gitdir, 'refs', 'heads', ...branch.split('/'));
    await mkdir(join(refPath, '..'), { recursive: true });
    const lock = `${refPath}.lock`;
    let handle;
    try {
      handle = await open(lock, 'wx');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw err;
    }
    try {
      const current = await this.fetch(branch);
      if (current !== expectedOld) {
        await handle.close();
        await rm(lock, { force: true });
        return false;
      }
      await handle.writeFile(`${oid}\n`);
      await handle.close();
      await rename(lock, refPath);
      return true;
    } catch (err) {
      await rm(lock, { force: true });
      throw err;
    }
  }
}

/** HTTP(S) remote: one bare cache repository per node, shallow fetches of single branches. */
export class HttpRemote implements GitRemote {
  readonly gitdir: string;
  readonly description: string;
  private readonly onAuth;

  constructor(
    private readonly url: string,
    cacheDir: string,
    private readonly credentials?: GitCredentials,
    /** Deadline of each fetch, deepen and push (default 10 s). */
    private readonly timeoutMs = DEFAULT_GIT_TIMEOUT_MS,
    /** Aborts every operation in flight and refuses new ones (the daemon is stopping). */
    private readonly stop?: AbortSignal,
  ) {
    this.gitdir = cacheDir;
    this.description = redactUrl(url);
    this.onAuth = credentials ? () => ({ username: credentials.username, password: credentials.password }) : undefined;
  }

  private async ensureInit(): Promise<void> {
    try {
      await stat(join(this.gitdir, 'HEAD'));
    } catch {
      await mkdir(this.gitdir, { recursive: true });
      await git.init({ fs, gitdir: this.gitdir, bare: true });
    }
    // fetch() maps remote branches through the remote's refspec; the URL itself is passed per call
    // (never stored, so a URL with a token does not land on disk).
    const refspec = '+refs/heads/*:refs/remotes/origin/*';
    if ((await git.getConfig({ fs, gitdir: this.gitdir, path: 'remote.origin.fetch' })) !== refspec)
      await git.setConfig({ fs, gitdir: this.gitdir, path: 'remote.origin.fetch', value: refspec });
  }

  /** Rethrows isomorphic-git errors with any credential removed from the message, naming the remote once (a
   * deadline's or a stop's message already does: `fetch of main from URL timed out after N ms`). They keep their
   * code (GitTimeout, Stopped: src/errors.ts); any other failure of the remote is `fallback`, its message prefixed. */
  private clean(err: unknown, fallback: ErrorCode): GitlbError {
    const e = err instanceof Error ? err : new Error(String(err));
    const text = redactText(e.message, this.credentials);
    const code = errorCode(err);
    return code === 'GitTimeout' || code === 'Stopped' ? new GitlbError(code, text) : new GitlbError(fallback, `${this.description}: ${text}`);
  }

  /** One branch, no tags, within the deadline; `relative`: `depth` more commits below what is already here. */
  private fetchBranch(what: string, branch: string, depth: number, relative = false) {
    return withDeadline(`${what} from ${this.description}`, this.timeoutMs, (signal) => git.fetch({
      fs,
      http: httpClient(signal),
      gitdir: this.gitdir,
      url: this.url,
      ref: branch,
      remoteRef: branch,
      singleBranch: true,
      tags: false,
      depth,
      relative,
      onAuth: this.onAuth,
    }), this.stop);
  }

  async fetch(branch: string, opts: { depth?: number } = {}): Promise<string | null> {
    await this.ensureInit();
    try {
      const r = await this.fetchBranch(`fetch of ${branch}`, branch, opts.depth ?? SHALLOW_DEPTH);
      return r.fetchHead;
    } catch (err) {
      // A branch the server does not have (e.g. the status branch before the first write): isomorphic-git names
      // the ref it could not resolve among the advertised ones; an empty repository answers nothing at all.
      const e = err as { code?: string; data?: { what?: unknown } };
      if ((e.code === 'NotFoundError' && e.data?.what === branch) || e.code === 'EmptyServerResponseError') return null;
      throw this.clean(err, 'FetchFailed');
    }
  }

  async deepen(branch: string, extra: number): Promise<void> {
    await this.ensureInit();
    try {
      await this.fetchBranch(`deepening ${branch}`, branch, extra, true);
    } catch (err) {
      throw this.clean(err, 'FetchFailed');
    }
  }

  async push(branch: string, oid: string, expectedOld: string | null): Promise<boolean> {
    await this.ensureInit();
    // The server compares against the value it advertised; isomorphic-git refuses non-fast-forwards
    // itself, and receive-pack refuses a ref that moved between advertisement and update.
    const localRef = `refs/gitlb/push/${branch}`;
    await git.writeRef({ fs, gitdir: this.gitdir, ref: localRef, value: oid, force: true });
    try {
      const r = await withDeadline(`push to ${branch} of ${this.description}`, this.timeoutMs, (signal) => git.push({
        fs,
        http: httpClient(signal),
        gitdir: this.gitdir,
        url: this.url,
        ref: localRef,
        remoteRef: `refs/heads/${branch}`,
        onAuth: this.onAuth,
      }), this.stop);
      if (r.ok) return true;
      return false;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === 'PushRejectedError' || code === 'GitPushError') return false;
      // A push that lost a race can also end in a report-status isomorphic-git cannot parse (the ref
      // failed to lock on the server). Treat it as "not pushed"; the caller re-fetches and decides.
      if (err instanceof TypeError) return false;
      throw this.clean(err, 'PushFailed');
    } finally {
      void expectedOld; // the advertised value plays the role of expectedOld over HTTP
    }
  }
}

export function isUrl(repo: string): boolean {
  return /^https?:\/\//i.test(repo);
}

/** `stop`: aborting it aborts every HTTP operation of the remote in flight and refuses new ones (a local
 * repository has no network operation to hold a stop). */
export function openRemote(repo: string, opts: { cacheDir: string; credentials?: GitCredentials; timeoutMs?: number; stop?: AbortSignal }): GitRemote {
  return isUrl(repo) ? new HttpRemote(repo, opts.cacheDir, opts.credentials, opts.timeoutMs, opts.stop) : new LocalRemote(repo);
}
