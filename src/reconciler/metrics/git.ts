// Git operation metrics: the daemon's GitRemote wrapped so every fetch (config branch, status branch, peers'
// observations) and every push (status write-back, automatic reverts) is timed and its failures counted.
import { Counter, Histogram, type Registry } from 'prom-client';
import type { GitRemote } from '../source/git-remote.js';

const BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class GitMetrics {
  private readonly duration: Histogram<'op' | 'branch'>;
  private readonly errors: Counter<'op' | 'branch'>;

  constructor(reg: Registry) {
    this.duration = new Histogram({ name: 'gitlb_git_operation_duration_seconds',
      help: 'Git fetches and pushes (status write-back, reverts) by branch, failed ones included',
      labelNames: ['op', 'branch'], buckets: BUCKETS, registers: [reg] });
    this.errors = new Counter({ name: 'gitlb_git_operation_errors_total', help: 'Git fetches and pushes that failed',
      labelNames: ['op', 'branch'], registers: [reg] });
  }

  private async timed<T>(op: 'fetch' | 'push' | 'deepen', branch: string, run: () => Promise<T>): Promise<T> {
    const end = this.duration.startTimer({ op, branch });
    this.errors.inc({ op, branch }, 0); // the series exists (at 0) from the first operation on
    try {
      return await run();
    } catch (err) {
      this.errors.inc({ op, branch });
      throw err;
    } finally {
      end();
    }
  }

  /** The same remote, measured. A push that loses a race (returns false) is not an error. */
  wrap(remote: GitRemote): GitRemote {
    return {
      get gitdir() { return remote.gitdir; },
      get description() { return remote.description; },
      fetch: (branch, opts) => this.timed('fetch', branch, () => remote.fetch(branch, opts)),
      deepen: (branch, extra) => this.timed('deepen', branch, () => remote.deepen(branch, extra)),
      push: (branch, oid, expectedOld) => this.timed('push', branch, () => remote.push(branch, oid, expectedOld)),
    };
  }
}
