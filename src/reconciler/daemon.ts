// The `gitlb run` daemon, the composition root of one node: wires the Git source, the data plane, the reconciler,
// status write-back, the two loops and their triggers (webhook, poll, local ref watch, drift schedule). Reconcile
// passes and drift checks run in the revision loop (loops/revision-loop.ts), one at a time, bursts coalesced.
// Health re-renders run in the health loop (loops/health-loop.ts), a runner of their own: they never queue behind a
// fetch, a status push or a peer read; they share only the reconciler's data-plane lock with the apply sections.
// Both loops reach the data plane only through converge (converge.ts).
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { loadCredentials } from './source/credentials.js';
import { isUrl, openRemote, type GitRemote } from './source/git-remote.js';
import { Reconciler, type Outcome, type ReconcilerOptions } from './loops/reconciler.js';
import { StatusWriter } from './status/status-writer.js';
import { readOwnLocalState } from './state/local-state.js';
import { startWebhook, parseListen, type WebhookServer } from './triggers/webhook.js';
import { startSchedule, type Schedule } from './triggers/schedule.js';
import { watchLocalBranch, type RefWatch } from './triggers/ref-watch.js';
import type { SerialRunner } from './triggers/serial-runner.js';
import { HealthLoop } from './loops/health-loop.js';
import { RevisionLoop } from './loops/revision-loop.js';
import type { HealthChange } from './health/checker.js';
import { withDeadline } from './source/deadline.js';

/** An idle node rewrites its status at least this often (checked on the drift schedule, every 60 s by default). */
export const STATUS_HEARTBEAT_MS = 5 * 60_000;

/**
 * On stop, Git operations in flight are aborted and the last status write gets this long (or the Git timeout, if
 * shorter), so `gitlb run` exits within seconds of SIGTERM even while the Git server hangs: systemd's
 * TimeoutStopSec (30 s in deploy/systemd/gitlb.service) must never run out.
 */
export const LAST_STATUS_WRITE_MS = 5_000;

/** Options the daemon hands to its Reconciler unchanged are declared (and documented) on ReconcilerOptions. */
export interface DaemonOptions extends Pick<ReconcilerOptions,
  'node' | 'branch' | 'dataPlane' | 'reopenDataPlane' | 'health' | 'preApplyGate' | 'postApplyGate' | 'onApplied' | 'statusHealth' |
  'statusBgp' | 'statusFlows' | 'retry' | 'role' | 'teardown' | 'configPath' | 'trust' | 'signer' | 'trustFrom' | 'allowRewindTo' | 'log'> {
  repo: string; // URL or local path
  cacheDir: string; // per node: Git cache and local state
  credentialsFile?: string;
  webhook?: { listen: string; secret: string; maxBodyBytes?: number };
  poll?: string; // schedule spec
  drift?: string; // schedule spec; default every 60 s
  watchLocal?: boolean; // chokidar on a local repository's refs (default true for local paths)
  statusBranch?: string; // override Cluster.spec.status.branch
  writeStatus?: boolean; // default true
  /** Deadline of every Git operation (fetch, push, status write round), default 10 s. */
  gitTimeoutMs?: number;
  /** See STATUS_HEARTBEAT_MS. */
  statusHeartbeatMs?: number;
  /** Observability hooks (src/reconciler/metrics): wraps the Git remote (timing every fetch and push) and hears
   * every reconcile's outcome. */
  wrapRemote?: (remote: GitRemote) => GitRemote;
  onReconcile?: (why: string, outcome: Outcome) => void;
}

export interface Daemon {
  reconciler: Reconciler;
  runner: SerialRunner;
  remote: GitRemote;
  webhook?: WebhookServer;
  trigger(why: string): void;
  /** Re-render the applied revision with the current health view and apply any difference (all services). */
  refreshHealth(why: string): void;
  /** A real changed health state: its service is rendered again and any difference applied (the health loop). */
  healthChanged(e: HealthChange): void;
  /** Resolves when no reconcile or drift check is running or queued. */
  idle(): Promise<void>;
  /** Aborts Git operations in flight, retries nothing, and with `lastStatus` makes one status write bounded by
   * LAST_STATUS_WRITE_MS; the data plane is left as it is. */
  stop(opts?: { lastStatus?: string }): Promise<void>;
}

export async function startDaemon(o: DaemonOptions): Promise<Daemon> {
  const log = o.log ?? { info: (m: string) => console.log(m), warn: (m: string) => console.warn(m) };
  await mkdir(o.cacheDir, { recursive: true });
  const credentials = loadCredentials({ file: o.credentialsFile });
  // Aborted on stop: a fetch or push held by a hanging server ends at once instead of at its deadline.
  const stopping = new AbortController();
  const opened = openRemote(o.repo, { cacheDir: join(o.cacheDir, 'git'), credentials, timeoutMs: o.gitTimeoutMs, stop: stopping.signal });
  const remote = o.wrapRemote ? o.wrapRemote(opened) : opened;
  // The node's own trust state: the only verification base besides --trust-from (the status branch never is).
  const stateFile = join(o.cacheDir, 'state.json');
  const local = await readOwnLocalState(stateFile, o.node, o.branch);
  const lastVerified = local?.appliedRevision ? { revision: local.appliedRevision, verification: local.verification } : null;
  if (!lastVerified)
    log.info(o.trustFrom
      ? `no local state (${stateFile}): verifying from --trust-from ${o.trustFrom.slice(0, 12)}`
      : `no local state (${stateFile}): verifying from the root commit when verification is on (gitlb run --trust-from <commit> trusts older history)`);
  const writers = new Map<string, StatusWriter>();
  const writerFor = (branch: string) => {
    let w = writers.get(branch);
    if (!w) writers.set(branch, (w = new StatusWriter({ remote, branch, node: o.node, signer: o.signer, stop: stopping.signal })));
    return w;
  };

  const reconciler = new Reconciler({
    node: o.node,
    branch: o.branch,
    remote,
    dataPlane: o.dataPlane,
    reopenDataPlane: o.reopenDataPlane,
    lastVerified,
    allowRewindTo: o.allowRewindTo,
    health: o.health,
    preApplyGate: o.preApplyGate,
    postApplyGate: o.postApplyGate,
    onApplied: o.onApplied,
    statusHealth: o.statusHealth,
    statusBgp: o.statusBgp,
    statusFlows: o.statusFlows,
    retry: o.retry,
    role: o.role,
    teardown: o.teardown,
    configPath: o.configPath,
    trust: o.trust,
    signer: o.signer,
    trustFrom: o.trustFrom,
    log,
    statusSink:
      o.writeStatus === false
        ? undefined
        : async (status, branch, why) => {
            const r = await writerFor(o.statusBranch ?? branch).write(status, why);
            reconciler.counters.statusPushRetries += r.attempts - 1;
          },
  });

  // The revision loop: reconcile passes and drift checks, one at a time, retried on the reconciler's backoff.
  const revisionLoop = new RevisionLoop({ reconciler, node: o.node, branch: o.branch, stateFile,
    heartbeatMs: o.statusHeartbeatMs ?? STATUS_HEARTBEAT_MS, onReconcile: o.onReconcile, log });
  const runner = revisionLoop.runner;

  // The health loop: its own runner (coalescing bursts of flips), never behind the reconcile runner's Git I/O.
  const healthRunner = new HealthLoop({ rerender: (why, services) => reconciler.refreshHealth(why, services), log });

  // What the pinned data plane serves is known from the local cache before the first fetch: health and the
  // health re-render never wait for the Git server (state/adoption.ts).
  await reconciler.adoptAtStart();

  const schedules: Schedule[] = [];
  let webhook: WebhookServer | undefined;
  let refWatch: RefWatch | undefined;
  try {
    if (o.webhook) {
      const { host, port } = parseListen(o.webhook.listen);
      webhook = await startWebhook({
        host,
        port,
        secret: o.webhook.secret,
        branch: o.branch,
        maxBodyBytes: o.webhook.maxBodyBytes,
        onTrigger: (src) => revisionLoop.trigger(src),
        log,
      });
      log.info(`webhook listening on ${webhook.url}`);
    }
    if (o.poll) schedules.push(startSchedule({ spec: o.poll, onTick: () => revisionLoop.trigger('poll') }));
    schedules.push(startSchedule({ spec: o.drift ?? '60', onTick: () => revisionLoop.checkDrift() }));
    if (!isUrl(o.repo) && o.watchLocal !== false)
      refWatch = await watchLocalBranch(remote, o.branch, (why) => revisionLoop.trigger(why));
  } catch (err) {
    for (const s of schedules) s.stop();
    await webhook?.close();
    throw err;
  }

  /** One status write on a fresh remote (the daemon's own is aborted), the whole of it bounded. */
  const lastStatusWrite = async (why: string) => {
    const ms = Math.min(LAST_STATUS_WRITE_MS, o.gitTimeoutMs ?? LAST_STATUS_WRITE_MS);
    const bound = new AbortController();
    const last = openRemote(o.repo, { cacheDir: join(o.cacheDir, 'git'), credentials, timeoutMs: ms, stop: bound.signal });
    const writer = new StatusWriter({ remote: last, branch: o.statusBranch ?? reconciler.statusBranch, node: o.node, signer: o.signer, maxAttempts: 3, stop: bound.signal });
    try {
      await withDeadline('last status write', ms, () => writer.write(reconciler.snapshot(), why), bound.signal);
    } catch (err) {
      log.warn(`last status write failed: ${(err as Error).message}`, { stage: 'status' });
    } finally {
      bound.abort();
    }
  };

  revisionLoop.trigger('start');
  log.info(`gitlb run: node ${o.node}, ${remote.description} branch ${o.branch}`);

  return {
    reconciler,
    runner,
    remote,
    webhook,
    trigger: (why) => revisionLoop.trigger(why),
    refreshHealth: (why) => healthRunner.refresh(why),
    healthChanged: (e) => healthRunner.changed(e),
    idle: async () => {
      await revisionLoop.idle();
      await healthRunner.idle();
      await reconciler.flushStatus();
    },
    stop: async (opts = {}) => {
      revisionLoop.stop();
      healthRunner.stop();
      reconciler.stopStatusRetries();
      stopping.abort();
      for (const s of schedules) s.stop();
      await webhook?.close();
      await refWatch?.close();
      await revisionLoop.idle();
      await healthRunner.idle();
      await reconciler.flushStatus();
      revisionLoop.clearRetry(); // a pass that ended after the stop set none, but be sure nothing keeps us alive
      // The last write says Stopped (Ready=False): a stopped daemon must not look Ready until its file goes stale.
      if (opts.lastStatus) reconciler.markStopped(opts.lastStatus);
      if (opts.lastStatus && o.writeStatus !== false) await lastStatusWrite(opts.lastStatus);
    },
  };
}
