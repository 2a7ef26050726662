// The daemon's observability hooks in one place: what `gitlb run` hands startNodeDaemon (NodeDaemonHooks), feeding
// the metrics and the log. They only listen; nothing here changes what the daemon does.
import git from 'isomorphic-git';
import fs from 'node:fs';
import type { HealthChange } from '../health/checker.js';
import type { GitRemote } from '../source/git-remote.js';
import type { NodeDaemonHooks } from '../node-daemon.js';
import type { GitlbLogger } from '../log/logger.js';
import type { NodeMetrics } from './index.js';
import { commitLatencyStart, type ReconcileOutcome } from './control.js';

/** The committer time (unix seconds) of `oid`, or null when the object cannot be read. */
async function committerTime(gitdir: string, oid: string): Promise<number | null> {
  try {
    const { commit } = await git.readCommit({ fs, gitdir, oid });
    return commit.committer.timestamp;
  } catch {
    return null;
  }
}

export interface NodeObservation extends NodeDaemonHooks {
  /** Whether the daemon has started, and the revision it serves: for /healthz and the log's revision field. */
  isStarted(): boolean;
  servedRevision(): string | null;
}

export function nodeHooks(metrics: NodeMetrics | null, log: GitlbLogger): NodeObservation {
  let gitdir: string | null = null;
  let served: () => string | null = () => null;
  let up = false;
  /** Committer time of the revision applied last (null: none yet in this process), for commitLatencyStart. */
  let previousCommitTime: number | null = null;
  let commitTimes: Promise<void> = Promise.resolve();
  return {
    ...(metrics && { peerMetrics: metrics.peer }),
    wrapRemote(remote: GitRemote) {
      gitdir = remote.gitdir;
      return metrics ? metrics.git.wrap(remote) : remote;
    },
    onReconcile(_why: string, out: ReconcileOutcome) {
      metrics?.control.observeReconcile(out);
      if (out.kind === 'applied' && metrics && gitdir) {
        const appliedAt = Date.now();
        // Applies are serial and so are these reads (one chain): each sees the commit time of the apply before it.
        commitTimes = commitTimes.then(async () => {
          const t = await committerTime(gitdir!, out.revision);
          if (t === null) return;
          metrics.control.observeCommitApplied(commitLatencyStart({ commitTime: t, previousCommitTime, seenAtMs: out.seenAt }), appliedAt);
          previousCommitTime = t;
        });
      } else if (out.kind === 'unchanged' && previousCommitTime === null && metrics && gitdir) {
        // After a restart the first pass finds the served revision unchanged: its commit time is the one to beat.
        commitTimes = commitTimes.then(async () => {
          previousCommitTime ??= await committerTime(gitdir!, out.revision);
        });
      }
    },
    onHealthChange(e: HealthChange) {
      metrics?.health.observeChange(e);
      const fields = { stage: 'health', service: e.service, real: e.address, from: e.from, to: e.to,
        ...(e.result.ok ? {} : { reason: e.result.detail }) };
      const msg = `health: ${e.service} real ${e.address} ${e.from} -> ${e.to}${e.result.ok ? '' : ` (${e.result.detail})`}`;
      if (e.to === 'down') log.warn(msg, fields);
      else log.info(msg, fields);
    },
    started({ daemon, role, health, bgp, flowSync }) {
      up = true;
      served = () => daemon.reconciler.appliedRevision;
      if (!metrics) return;
      metrics.setRole(role);
      metrics.control.attach({ snapshot: () => daemon.reconciler.snapshot(), desired: () => daemon.reconciler.desired,
        fetchFailing: () => daemon.reconciler.fetchFailing });
      if (health) metrics.health.attach({ snapshot: () => health.checker.snapshot(), decide: () => health.decide() });
      if (bgp) metrics.bgp.attach(() => (bgp.configured() ? bgp.status() : null));
      if (flowSync) metrics.flowSync.attach(() => flowSync.report(), { drain: () => flowSync.drain?.() ?? null, serving: () => flowSync.serving?.() ?? {},
        handback: () => flowSync.handback?.() ?? {},
        local: () => flowSync.local?.() ?? null });
    },
    isStarted: () => up,
    servedRevision: () => served(),
  };
}
