// Writes one node's status file to the status branch: fetch the tip, replace `status/<node>.yaml`,
// commit with the node as author, push. A push that lost a race (non-fast-forward) is rebuilt on the
// new tip and retried after a jittered backoff, a bounded number of times. Each node only ever
// touches its own file, so rebuilding never needs a merge.
import { GitlbError } from '../../errors.js';
import { readCommitInfo, readFileAt, treeWithFile, writeCommitObject, type PayloadSigner } from '../source/git-objects.js';
import type { GitRemote } from '../source/git-remote.js';
import { parseStatus, serialiseStatus, statusCommitMessage, statusPath, type NodeStatus } from './status-doc.js';

export interface StatusWriterOptions {
  remote: GitRemote;
  branch: string; // the status branch, Cluster.spec.status.branch (default gitlb-status)
  node: string;
  /** Signs status commits (the node's --signing-key). */
  signer?: PayloadSigner;
  maxAttempts?: number; // default 30
  backoffMs?: { base: number; max: number }; // default 20..1000 ms, full jitter
  clock?: () => Date;
  random?: () => number;
  /** Once aborted (the daemon is stopping), a failed round is not retried. */
  stop?: AbortSignal;
}

export interface StatusWriteResult {
  commit: string | null; // null when the file already had exactly this content
  attempts: number;
}

/** The node's own file the commit replaces (for the subject line); null when it is unreadable. */
function previousStatus(blob: Uint8Array): NodeStatus | null {
  try {
    return parseStatus(Buffer.from(blob).toString('utf8'));
  } catch {
    return null;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class StatusWriter {
  private readonly maxAttempts: number;
  private readonly backoff: { base: number; max: number };
  private readonly clock: () => Date;
  private readonly random: () => number;
  /** Serialises writes from one process; a newer document replaces a queued older one. */
  private chain: Promise<void> = Promise.resolve();
  private queued: { status: NodeStatus; why: string; done: Promise<StatusWriteResult> } | null = null;

  constructor(private readonly o: StatusWriterOptions) {
    this.maxAttempts = o.maxAttempts ?? 30;
    this.backoff = o.backoffMs ?? { base: 20, max: 1000 };
    this.clock = o.clock ?? (() => new Date());
    this.random = o.random ?? Math.random;
  }

  /**
   * Queues a write. While one write is in flight, later documents replace each other in a single slot, so a
   * burst of changes costs at most one more push, which carries the newest document. Every caller's promise
   * settles when a document at least as new as its own is on the branch.
   */
  write(status: NodeStatus, why: string): Promise<StatusWriteResult> {
    if (this.queued) {
      this.queued.status = status;
      this.queued.why = `${this.queued.why}; ${why}`;
      return this.queued.done;
    }
    let settle!: { ok: (r: StatusWriteResult) => void; fail: (e: unknown) => void };
    const done = new Promise<StatusWriteResult>((ok, fail) => (settle = { ok, fail }));
    const slot = { status, why, done };
    this.queued = slot;
    this.chain = this.chain.then(async () => {
      this.queued = null; // from here on, newer documents queue behind this one
      try {
        settle.ok(await this.writeNow(slot.status, slot.why));
      } catch (err) {
        settle.fail(err);
      }
    });
    return done;
  }

  /** One fetch-rebuild-push round; null when the push lost a race. */
  private async attempt(status: NodeStatus, why: string, path: string, content: Uint8Array, attempt: number): Promise<StatusWriteResult | null> {
    const { remote, branch, node } = this.o;
    const tip = await remote.fetch(branch, { depth: 1 });
    const base = tip ? await readCommitInfo(remote.gitdir, tip) : null;
    let previous: NodeStatus | null = null;
    if (tip) {
      const current = await readFileAt(remote.gitdir, tip, path);
      if (current && Buffer.from(current).equals(Buffer.from(content))) return { commit: null, attempts: attempt };
      previous = current ? previousStatus(current) : null;
    }
    const tree = await treeWithFile(remote.gitdir, base?.tree ?? null, path, content);
    const now = this.clock();
    const commit = await writeCommitObject(remote.gitdir, {
      tree,
      parents: tip ? [tip] : [],
      message: statusCommitMessage(status, why, previous),
      author: { name: node, email: `${node}@gitlb.invalid`, timestamp: Math.floor(now.getTime() / 1000), timezoneOffset: 0 },
    }, this.o.signer);
    return (await remote.push(branch, commit, tip)) ? { commit, attempts: attempt } : null;
  }

  private async writeNow(status: NodeStatus, why: string): Promise<StatusWriteResult> {
    const { remote, branch, node } = this.o;
    const path = statusPath(node);
    const content = new TextEncoder().encode(serialiseStatus(status));
    let lastError = '';
    let transientErrors = 0;
    for (let attempt = 1; attempt <= this.maxAttempts; attempt++) {
      try {
        const r = await this.attempt(status, why, path, content, attempt);
        if (r) return r;
        lastError = 'the status branch moved';
      } catch (err) {
        // A network error or timeout is retried like a lost race, at most five times per write.
        lastError = err instanceof Error ? err.message : String(err);
        if (++transientErrors >= 5) break;
      }
      if (this.o.stop?.aborted) break; // stopping: the daemon makes its own last attempt

      // Full jitter: writers that collided spread out instead of colliding again in lock step.
      const cap = Math.min(this.backoff.max, this.backoff.base * 2 ** Math.min(attempt, 10));
      await sleep(Math.floor(this.random() * cap));
    }
    throw new GitlbError('PushFailed', `status push for ${node} to ${branch} failed: ${lastError}`);
  }
}
