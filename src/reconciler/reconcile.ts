// One node's reconciler: fetch -> validate -> render -> plan against live -> apply -> read back -> status.
// The data plane is reached only through the DataPlane interface (src/bpf/dataplane/index.ts), so the same
// core drives an lb node (XDP) and a backend node (TC).
//
// Invariants (docs/reconciler.md):
// - Anything failing before apply leaves the data plane untouched; a failing apply is undone by the data
//   plane itself; a failing read-back or health gate re-applies the last good state.
// - A failed revision is recorded with its stage and reason; the node keeps serving its last good revision.
//   Transient failures (apply, read-back) are retried with exponential backoff; deterministic ones
//   (validation, render) are not. A newer commit always supersedes a failed one.
// - After a restart the revision the pinned maps serve is adopted from the local Git cache before any fetch
//   (adoptAtStart), so health and the health re-render work while Git is down; the first reconcile that
//   fetches applies the last good revision again, which writes nothing when nothing changed.
// - Git I/O (fetch, ancestry, revert push) never runs under the data-plane lock: a health re-render waits at
//   most for one apply/read-back section, never for the Git server (docs/reconciler.md, "Health path").
// - A revision that no longer names this node decommissions it: teardown, final status, never a revert.
//   Automatic reverts are pushed only by lb nodes and only for revisions whose own content is bad.
import { parseConfig, formatDiagnostic } from '../render/config/index.js';
import { renderDesiredState, rerenderServices, type HealthView } from '../render/desired.js';
import type { ConfigModel } from '../render/model.js';
import type { DesiredState } from '../render/state.js';
import type { ApplyReport, DataPlane, LiveState, ReadLiveOptions } from '../bpf/dataplane/index.js';
import { readCommitInfo, readRevisionFiles } from './source/git-objects.js';
import type { GitRemote } from './source/git-remote.js';
import { isStopped } from './source/deadline.js';
import { describeOp, type Op } from '../render/ops.js';
import { Converger, type ConvergeOptions, type Converged } from './converge.js';
import { isRevertMessage, pushAutoRevert, type RevertOutcome } from './revert/rollback.js';
import { Mutex } from './loops/mutex.js';
import { FetchBackoff, humanMs } from './source/fetch-backoff.js';
import { describeXdp, statusXdp } from './status/xdp-report.js';
import { StatusPublisher } from './status/publisher.js';
import { setCondition, type Condition, type ConditionReason } from './status/conditions.js';
import { checkRevision, policyFor, type RecordedPolicy } from './verify/revision-check.js';
import type { Trust } from './verify/trust.js';
import type { PayloadSigner } from './source/git-objects.js';
import {
  emptyCounters,
  statusService,
  type AttemptResult,
  type FailureStage,
  type AppliedCommit,
  type NodeStatus,
  type StatusVerification,
  type StatusAttempt,
  type StatusCounters,
  type StatusBgp,
} from './status/status-doc.js';

export const DEFAULT_STATUS_BRANCH = 'gitlb-status';

/** Post-apply health gate (health engineer's hook): pass=false rolls the data plane back to the last good state. */
export type PostApplyGate = (ctx: {
  revision: string;
  before: DesiredState | null;
  /** The config of the last good revision (null on the first apply): the gate compares its table shares. */
  beforeModel: ConfigModel | null;
  after: DesiredState;
  model: ConfigModel;
}) => Promise<{ pass: boolean; reason: string }>;

/**
 * Pre-apply health gate: probes the reals a revision adds or changes before anything is applied. pass=false fails
 * the revision at `health` while the last good state keeps serving; `health`, when given, is the view the
 * revision is rendered with (reals that failed their probation unhealthy).
 */
export type PreApplyGate = (ctx: { revision: string; beforeModel: ConfigModel | null; model: ConfigModel })
  => Promise<{ pass: boolean; reason: string; health?: HealthView }>;

export interface Logger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  /** Routine events (maintenance rounds); loggers without it log them at info. */
  debug?(msg: string, fields?: Record<string, unknown>): void;
}

export interface ReconcilerOptions {
  node: string;
  branch: string;
  remote: GitRemote;
  dataPlane: DataPlane;
  /**
   * Reopens the data plane (close + open on the same pins). The drift check uses it after finding drift, so the
   * data plane re-reads the kernel maps instead of trusting its in-memory view of what it last wrote.
   */
  reopenDataPlane?: () => Promise<DataPlane>;
  /** Writes status to Git; omitted in unit use. Receives the status branch from the applied config. */
  statusSink?: (status: NodeStatus, statusBranch: string, why: string) => Promise<void>;
  /**
   * This node's own last verified and applied revision and its policy, from its local state (local-state.ts; never
   * from the status branch): the base of the next verification, and the revision the pinned data plane serves
   * (adopted at start).
   */
  lastVerified?: { revision: string; verification?: RecordedPolicy } | null;
  /** A commit the operator allows a rewind to under `enforce` (--allow-rewind-to; the full 40-hex id). */
  allowRewindTo?: string;
  health?: () => HealthView | undefined;
  preApplyGate?: PreApplyGate;
  postApplyGate?: PostApplyGate;
  /** Called with the model the data plane now serves (after an apply, or when adopting after a restart). */
  onApplied?: (model: ConfigModel) => void;
  /** The `health` mapping of the status file (from the health checker), or null to leave it out. */
  statusHealth?: () => unknown;
  /** The `bgp` mapping of the status file (per VIP announced or withdrawn, from the BGP announcer). */
  statusBgp?: () => StatusBgp | null;
  retry?: { baseMs: number; maxMs: number };
  /** This node's data plane (default: the Node document's role). Only lb nodes push automatic reverts. */
  role?: 'lb' | 'backend';
  /**
   * Removes this node's data plane (detach, VIPs, pins) when a revision no longer names the node. The data
   * plane handle is closed before it is called.
   */
  teardown?: () => Promise<void>;
  /** Subdirectory of the repository that holds the config (`gitlb run --path`); '' for the root. */
  configPath?: string;
  /** Root of trust for commit signatures (--trust); null or absent: none (docs/verification.md). */
  trust?: Trust | null;
  /** Signs this node's automatic revert commits (--signing-key). */
  signer?: PayloadSigner;
  /**
   * Before anything was verified, commits reachable from this one count as verified (history from before the
   * team signed its commits; --trust-from). Once a revision is applied, that revision is the base instead.
   */
  trustFrom?: string;
  clock?: () => Date;
  log?: Logger;
}

export type Outcome =
  | { kind: 'unchanged'; revision: string; report?: ApplyReport }
  | { kind: 'applied'; revision: string; report: ApplyReport; plan: Op[]; warnings: string[]; timings: Record<string, number>;
      /** Epoch ms this node first fetched the revision as the branch head (gitlb_commit_to_applied_seconds). */
      seenAt: number }
  | { kind: 'failed'; revision: string | null; stage: FailureStage; reason: string; rollback?: RevertOutcome }
  | { kind: 'waiting'; revision: string | null; retryAt: Date; reason: string }
  | { kind: 'decommissioned'; revision: string };

interface FailedRevision {
  stage: FailureStage;
  reason: string;
  retryable: boolean;
  attempts: number;
  retryAt: number; // epoch ms; Infinity when not retryable
  /** The condition reason when it is not the stage's own (NonFastForward at verify). */
  condition?: ConditionReason;
}

const RETRYABLE: ReadonlySet<FailureStage> = new Set(['fetch', 'apply', 'readback']);
/** Stages at which the revision's own content is at fault: the only ones an automatic revert may answer. */
const CONTENT_BAD: ReadonlySet<FailureStage> = new Set(['validate', 'render', 'health']);
const STAGE_REASON: Record<FailureStage, ConditionReason> = {
  fetch: 'FetchFailed',
  verify: 'VerificationFailed',
  validate: 'ValidationFailed',
  render: 'RenderFailed',
  apply: 'ApplyFailed',
  readback: 'ReadbackMismatch',
  health: 'HealthGateFailed',
  status: 'ApplyFailed',
};
const quietLog: Logger = { info: () => {}, warn: () => {} };

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A plan this long is announced before it runs (its progress follows every couple of seconds). */
const LARGE_PLAN_OPS = 1000;


export class Reconciler {
  readonly counters: StatusCounters = emptyCounters();
  private applied: string | null;
  private appliedAt: string | null = null;
  private appliedModel: ConfigModel | null = null;
  private appliedDesired: DesiredState | null = null;
  private adopting: boolean;
  private lastAttempt: StatusAttempt | null = null;
  private lastFailure: StatusAttempt | null = null;
  private warnings: string[] = [];
  private readonly failed = new Map<string, FailedRevision>();
  private readonly startedAt: string;
  private readonly clock: () => Date;
  private readonly log: Logger;
  private readonly retry: { baseMs: number; maxMs: number };
  private lastServices: NodeStatus['services'] = [];
  /** Set by a drift check that repaired something; cleared by the next clean one (condition Degraded). */
  private driftRepaired: string | null = null;
  private verification: StatusVerification | undefined;
  private appliedCommit: AppliedCommit | undefined;
  /** The data plane's report of the most recent apply (reconcile, restore or drift repair). */
  lastReport: ApplyReport | null = null;
  /** Serialises every section that writes or compares the data plane; never held across Git I/O. */
  private readonly dpLock = new Mutex();
  /** The config whose tables are in the kernel: the applied one, or a candidate while its health gate runs. */
  private liveModel: ConfigModel | null = null;
  private conditions: Condition[] = [];
  private readonly fetchBackoff: FetchBackoff;
  /** Hands snapshots to the status writer, retries failed pushes (status/publisher.ts). */
  private readonly publisher: StatusPublisher;
  private decommissioned: string | null = null;
  /** The role this node served before a decommission removed its data plane (the status keeps saying it). */
  private decommissionedRole: 'lb' | 'backend' | null = null;
  /** The branch head as first fetched, and when (Outcome.seenAt). */
  private headSeen: { revision: string; at: number } | null = null;
  /** The last fetch outage, recorded on the status branch once the node can write again (status `fetchOutage`). */
  private fetchOutage: NodeStatus['fetchOutage'];
  /** The outcome of the latest reconcile pass (`run --once` exits by it). */
  lastOutcome: Outcome | null = null;
  /** Milliseconds per stage of the latest reconcile (fetch, verify, validate, render, plan, apply, readback). */
  timings: Record<string, number> = {};

  private dp: DataPlane;
  /** The one way to the data plane: plans, executes, reads back (converge.ts); its memo spares an idle drift check. */
  readonly converger = new Converger();
  /** What the last converge put into the kernel (the previous state when one failed): an incremental health
   * re-render builds on it (rerenderServices). */
  private kernel: { model: ConfigModel; desired: DesiredState } | null = null;

  constructor(private readonly o: ReconcilerOptions) {
    this.dp = o.dataPlane;
    this.clock = o.clock ?? (() => new Date());
    this.log = o.log ?? quietLog;
    this.retry = o.retry ?? { baseMs: 1000, maxMs: 300_000 };
    this.fetchBackoff = new FetchBackoff(this.retry);
    this.publisher = new StatusPublisher({ sink: o.statusSink, snapshot: () => this.snapshot(), branch: () => this.statusBranch,
      clock: this.clock, retryMaxMs: this.retry.maxMs, log: this.log });
    this.applied = o.lastVerified?.revision ?? null;
    this.adopting = true;
    this.startedAt = this.clock().toISOString();
  }

  get appliedRevision(): string | null {
    return this.applied;
  }

  /**
   * The policy recorded by the last verified revision (its `Cluster.spec.verification`, null for none), for the
   * local state; undefined while that revision's config is not known (nothing applied or adopted yet).
   */
  get verifiedPolicy(): RecordedPolicy | undefined {
    if (this.appliedModel) return this.appliedModel.cluster.spec.verification ?? null;
    return this.applied && this.applied === this.o.lastVerified?.revision ? this.o.lastVerified.verification : undefined;
  }

  /** The data plane in use (it changes when the drift check reopens it). */
  get dataPlane(): DataPlane {
    return this.dp;
  }

  get desired(): DesiredState | null {
    return this.appliedDesired;
  }

  /** The fetch outage in progress (first failure, failed attempts, last error), or null while fetching works. */
  get fetchFailing(): { since: number; attempts: number; reason: string } | null {
    const f = this.fetchBackoff.state;
    return f ? { since: f.since, attempts: f.attempts, reason: f.reason } : null;
  }

  /** When the earliest pending retry of a failed revision is due (for the daemon's timer), or null. */
  get nextRetryAt(): Date | null {
    let t = this.fetchBackoff.state?.retryAt ?? Infinity;
    for (const f of this.failed.values()) if (f.retryable) t = Math.min(t, f.retryAt);
    return Number.isFinite(t) ? new Date(t) : null;
  }

  /** The status branch named by the applied config (Cluster.spec.status.branch). */
  /** The validated config of the applied revision (null before the first apply). */
  get appliedConfig(): ConfigModel | null {
    return this.appliedModel;
  }

  get statusBranch(): string {
    return this.appliedModel?.cluster.spec.status.branch ?? DEFAULT_STATUS_BRANCH;
  }

  snapshot(): NodeStatus {
    const now = this.clock().toISOString();
    return {
      apiVersion: 'gitlb/v1',
      kind: 'NodeStatus',
      node: this.o.node,
      role: this.appliedDesired?.role ?? this.decommissionedRole ?? this.o.role ?? 'lb',
      branch: this.o.branch,
      appliedRevision: this.applied,
      appliedAt: this.appliedAt,
      lastAttempt: this.lastAttempt,
      lastFailure: this.lastFailure,
      warnings: [...this.warnings],
      services: this.lastServices,
      conditions: this.currentConditions(now),
      counters: { ...this.counters },
      startedAt: this.startedAt,
      updatedAt: now,
      ...this.statusSection('health', this.o.statusHealth),
      ...this.statusSection('bgp', this.o.statusBgp),
      ...(this.fetchOutage && { fetchOutage: this.fetchOutage }),
      ...(this.verification && { verification: this.verification }),
      ...(this.appliedCommit && { appliedCommit: this.appliedCommit }),
      ...(this.dp.forwarding && { xdp: statusXdp(this.dp.forwarding) }),
    };
  }

  private loggedXdp = '';

  /** Logs the data plane's XDP attachment once each time it changes: a fallback from native is a warning. */
  private noteXdp(): void {
    const f = this.dp.forwarding;
    if (!f) return;
    const line = describeXdp(f);
    if (line === this.loggedXdp) return;
    this.loggedXdp = line;
    const fields = { stage: 'apply', xdpMode: f.mode, xdpRequested: f.requested, xdpFellBack: f.fellBack, forwards: f.forwards };
    if (f.fellBack || f.forwards === false) this.log.warn(line, fields);
    else this.log.info(line, fields);
  }

  private condition(type: Condition['type'], status: Condition['status'], reason: ConditionReason, message: string): void {
    this.conditions = setCondition(this.conditions, { type, status, reason, message }, this.clock().toISOString());
  }

  /** Ready/Reconciling/Stalled as last set by an outcome; Degraded from what the node serves right now. */
  private currentConditions(now: string): Condition[] {
    if (!this.conditions.some((c) => c.type === 'Ready'))
      this.conditions = setCondition(this.conditions, { type: 'Ready', status: 'Unknown', reason: 'Progressing', message: 'no reconcile finished yet' }, now);
    if (!this.decommissioned) {
      const down = this.lastServices.flatMap((s) => s.reals.filter((r) => r.state === 'active' && !r.healthy).map((r) => `${s.name}/${r.address}`));
      const degraded = this.driftRepaired
        ? { status: 'True' as const, reason: 'DriftRepaired' as const, message: this.driftRepaired }
        : down.length
          ? { status: 'True' as const, reason: 'RealsUnhealthy' as const, message: `unhealthy: ${down.slice(0, 10).join(', ')}${down.length > 10 ? ` (+${down.length - 10})` : ''}` }
          : { status: 'False' as const, reason: 'Healthy' as const, message: 'every active real is healthy' };
      this.conditions = setCondition(this.conditions, { type: 'Degraded', ...degraded }, now);
    }
    return this.conditions.map((c) => ({ ...c }));
  }

  private succeeded(revision: string, msg = `applied ${revision.slice(0, 12)}`): void {
    this.condition('Ready', 'True', 'Succeeded', msg);
    this.condition('Reconciling', 'False', 'Succeeded', msg);
    this.condition('Stalled', 'False', 'Succeeded', msg);
  }

  /** An optional section of the status file from its provider; left out (and logged) when the provider fails. */
  private statusSection<K extends string, T>(key: K, read: (() => T | null | undefined) | undefined): Partial<Record<K, T>> {
    try {
      const v = read?.();
      return v === null || v === undefined ? {} : ({ [key]: v } as Partial<Record<K, T>>);
    } catch (err) {
      this.log.warn(`${key} status unavailable: ${errorText(err)}`);
      return {};
    }
  }

  private notifyApplied(model: ConfigModel): void {
    try {
      this.o.onApplied?.(model);
    } catch (err) {
      this.log.warn(`onApplied hook failed: ${errorText(err)}`);
    }
  }

  /**
   * Rewrites the status when nothing else did for `maxAgeMs`, so an idle healthy node's status stays fresh and
   * `gitlb status` can tell a quiet node from a dead one (its UPDATED column and --stale-after).
   */
  heartbeat(maxAgeMs: number): void {
    this.publisher.heartbeat(maxAgeMs);
  }

  /** Hands a status snapshot to the writer without waiting for the push (status/publisher.ts). */
  private publish(why: string): void {
    this.noteXdp();
    this.publisher.publish(why);
  }

  /**
   * The daemon is stopping (SIGTERM): from now on the status says Ready=False/Stopped, so its last write tells
   * `gitlb status` that nothing reconciles here any more (the pinned data plane keeps forwarding what it serves).
   */
  markStopped(why: string): void {
    const serving = this.decommissioned ? 'nothing (decommissioned)' : this.applied ? this.applied.slice(0, 12) : 'nothing';
    this.condition('Ready', 'False', 'Stopped', `gitlb run stopped (${why}); the pinned data plane keeps forwarding ${serving}, nothing reconciles it`);
    this.condition('Reconciling', 'False', 'Stopped', 'stopped');
  }

  /** Stops retrying failed status writes (daemon shutdown). */
  stopStatusRetries(): void {
    this.publisher.stop();
  }

  /**
   * Resolves when every status handed to the sink so far has been written (or has failed and been logged). Not
   * the ones handed over meanwhile (status/publisher.ts).
   */
  async flushStatus(): Promise<void> {
    await this.publisher.flush();
  }

  private attempt(revision: string, result: AttemptResult, stage?: FailureStage, reason?: string): StatusAttempt {
    const a: StatusAttempt = { revision, result, at: this.clock().toISOString() };
    if (stage) a.stage = stage;
    if (reason) a.reason = reason;
    return a;
  }

  /** Fills per-service status from the desired state and the digests read back from the kernel. */
  private async refreshServices(desired: DesiredState): Promise<void> {
    this.servicesFrom(await this.dp.readLive(), desired);
  }

  private servicesFrom(live: { services: { id: number; digest: string }[] }, desired: DesiredState): void {
    const liveDigest = new Map(live.services.map((s) => [s.id, s.digest]));
    this.lastServices = desired.services.map((s) => statusService(s, liveDigest.get(s.id) ?? s.digest));
  }

  private countReport(r: ApplyReport): void {
    this.lastReport = r;
    this.counters.mapWrites += r.mapWrites;
    this.counters.mapDeletes += r.mapDeletes;
    this.counters.ringSwitches += r.ringSwitches;
  }

  /** One reconcile pass. Never throws for revision problems: they end in a recorded, published failure. */
  async reconcile(trigger = 'manual'): Promise<Outcome> {
    this.lastOutcome = await this.reconcilePass(trigger);
    return this.lastOutcome;
  }

  private async reconcilePass(trigger: string): Promise<Outcome> {
    this.counters.reconciles++;
    let head: string | null;
    this.timings = {};
    const t = performance.now();
    try {
      head = await this.o.remote.fetch(this.o.branch, { depth: 1 });
      this.timings.fetch = Math.round(performance.now() - t);
      if (!head) throw new Error(`branch '${this.o.branch}' not found in ${this.o.remote.description}`);
    } catch (err) {
      // Aborted because the daemon is stopping: not a Git failure, nothing to record or publish.
      if (isStopped(err)) return { kind: 'failed', revision: null, stage: 'fetch', reason: 'stopping' };
      return this.fetchFailed(errorText(err));
    }
    const outage = this.fetchBackoff.recovered(this.clock().getTime());
    if (outage) {
      this.log.info(`fetch recovered after ${outage.attempts} failed attempts over ${humanMs(outage.durationMs)} (last error: ${outage.reason})`,
        { stage: 'fetch', attempts: outage.attempts, durationMs: outage.durationMs, reason: outage.reason });
      // Say again why the head is not applied, or that it is: the conditions still name the fetch failure.
      const failedHead = this.failed.get(head);
      this.fetchOutage = { since: new Date(outage.since).toISOString(), until: new Date(outage.until).toISOString(), attempts: outage.attempts, reason: outage.reason };
      if (failedHead) this.failureConditions(head, failedHead);
      // Nothing was applied: the node serves the head it already had (it says so, not "applied").
      else if (head === this.applied && !this.adopting)
        this.succeeded(head, `serving ${head.slice(0, 12)}, the branch head; fetch recovered after ${outage.attempts} failed attempts over ${humanMs(outage.durationMs)}`);
      // The outage goes on the status branch in any case (the apply below publishes it if the head moved).
      if (failedHead || (head === this.applied && !this.adopting) || this.decommissioned === head) this.publish('fetch recovered');
    }
    if (this.headSeen?.revision !== head) this.headSeen = { revision: head, at: this.clock().getTime() };

    if (this.decommissioned === head) return { kind: 'decommissioned', revision: head };
    if (head === this.applied && !this.adopting) return { kind: 'unchanged', revision: head };
    if (this.adopting && this.applied && head !== this.applied && !this.appliedDesired) {
      const problem = await this.adoptPinned(this.applied);
      if (problem) this.log.warn(`cannot adopt ${this.applied.slice(0, 12)} (${problem}); its state is unknown until the next apply`);
    }

    // A newer commit supersedes every failed one.
    for (const rev of [...this.failed.keys()]) if (rev !== head) this.failed.delete(rev);
    const prior = this.failed.get(head);
    if (prior) {
      if (!prior.retryable) return { kind: 'failed', revision: head, stage: prior.stage, reason: prior.reason };
      if (this.clock().getTime() < prior.retryAt)
        return { kind: 'waiting', revision: head, retryAt: new Date(prior.retryAt), reason: prior.reason };
    }
    return this.reconcileRevision(head, trigger);
  }

  /**
   * A failed fetch: recorded (status conditions, counters) and retried with exponential backoff besides the poll
   * (fetch-backoff.ts), while the node keeps serving its last good revision. Logged once per backoff step and
   * published only when the reason changes, so a long partition costs neither a log line nor a status push per poll.
   */
  private fetchFailed(reason: string): Outcome {
    this.counters.failures++;
    const now = this.clock().getTime();
    const changed = this.fetchBackoff.state?.reason !== reason;
    const { state, log, retryInMs } = this.fetchBackoff.failed(reason, now);
    const retry = `next retry in ${humanMs(retryInMs)} (backoff step ${state.step}), polls also retry`;
    if (log)
      this.log.warn(`fetch failed (attempt ${state.attempts}${state.attempts > 1 ? `, failing for ${humanMs(now - state.since)}` : ''}; ${retry}): ${reason}`,
        { stage: 'fetch', reason, attempts: state.attempts, step: state.step, retryMs: retryInMs });
    this.condition('Ready', 'False', 'FetchFailed', reason);
    this.condition('Reconciling', 'True', 'FetchFailed', `attempt ${state.attempts} failed; ${retry}`);
    if (changed) this.publish('fetch failed');
    return { kind: 'failed', revision: null, stage: 'fetch', reason };
  }

  private async reconcileRevision(head: string, trigger: string): Promise<Outcome> {
    let t = performance.now();
    const mark = (stage: string) => {
      const now = performance.now();
      this.timings[stage] = Math.round(now - t);
      t = now;
    };
    const { remote, branch, node } = this.o;
    const warnings: string[] = [];
    const adopting = this.adopting;

    // Verify the tip against this node's own verified history (ancestry, signatures, policy) before any of it is
    // read as config. Conditions Ready=False / Stalled=True name the commit, author and why (VerificationFailed),
    // or the rewind (NonFastForward).
    let appliedCommit: AppliedCommit;
    // A verified revision whose policy is unknown (a state file from before it was recorded, and a config the cache
    // cannot give any more) is judged as under enforce: fail closed, never off (docs/verification.md).
    const recorded = this.verifiedPolicy;
    try {
      const check = await checkRevision({
        remote,
        branch,
        head,
        verified: this.applied,
        trustFrom: this.o.trustFrom ?? null,
        policy: policyFor(recorded, !!this.o.trust || (recorded === undefined && this.applied !== null)),
        allowRewindTo: this.o.allowRewindTo ?? null,
        configPath: this.o.configPath,
        root: this.o.trust ?? null,
        now: this.clock(),
      });
      this.verification = check.status;
      appliedCommit = check.commit;
      warnings.push(...check.warnings);
      if (check.rewound) this.counters.forcePushes++;
      if (check.refused) return this.fail(head, 'verify', check.reason, null, false, check.refusal ?? undefined);
    } catch (err) {
      // Reading history failed (network, deepening): transient, retried like a fetch.
      return this.fail(head, 'fetch', `verification could not read history: ${errorText(err)}`, null);
    }
    mark('verify');
    // Validate.
    let model: ConfigModel;
    try {
      const files = await readRevisionFiles(remote.gitdir, head, this.o.configPath);
      const parsed = parseConfig(files);
      const errors = parsed.diagnostics.filter((d) => d.severity === 'error');
      if (!parsed.model || errors.length) {
        const shown = errors.slice(0, 5).map(formatDiagnostic);
        if (errors.length > 5) shown.push(`(${errors.length - 5} more errors)`);
        return this.fail(head, 'validate', shown.join('; ') || 'configuration rejected', null);
      }
      model = parsed.model;
    } catch (err) {
      return this.fail(head, 'validate', errorText(err), null);
    }

    mark('validate');
    // A revision that no longer names this node is its decommission, not a fault of the revision.
    if (!model.nodes.some((n) => n.metadata.name === node)) return this.decommission(head, model);
    if (this.decommissioned) await this.recommission();

    // New or changed reals are probed before they can receive a connection (make-before-break for health).
    let healthView = this.o.health?.();
    if (this.o.preApplyGate && !adopting && this.appliedModel) {
      let pre;
      try {
        pre = await this.o.preApplyGate({ revision: head, beforeModel: this.appliedModel, model });
      } catch (err) {
        pre = { pass: false, reason: `pre-apply probe error: ${errorText(err)}` };
      }
      if (!pre.pass) return this.fail(head, 'health', pre.reason, model);
      if (pre.health) healthView = pre.health;
      mark('probe');
    }

    // Render.
    let desired: DesiredState;
    try {
      desired = renderDesiredState(model, node, healthView);
    } catch (err) {
      return this.fail(head, 'render', errorText(err), model);
    }

    mark('render');
    // Plan against the live maps, apply, read back: one locked section (the health path waits for it, and a
    // health re-render from now on renders this candidate). The data plane restores itself if apply fails.
    type Applied = { ok: true; plan: Op[]; report: ApplyReport; after: { live: LiveState } } | { ok: false; stage: FailureStage; reason: string; permanent?: boolean };
    const applied: Applied = await this.dpLock.run(async (): Promise<Applied> => {
      let done;
      try {
        done = await this.convergeTo(model, desired, {
          onStage: (stage) => {
            mark(stage);
            if (stage === 'apply') this.liveModel = model;
          },
          onPlanned: (plan) => {
            if (plan.length >= LARGE_PLAN_OPS) this.log.info(`applying ${head.slice(0, 12)}: ${plan.length} ops`, { revision: head, stage: 'apply', ops: plan.length });
          },
          onProgress: (done, total, r) => this.log.info(`applying ${head.slice(0, 12)}: ${done}/${total} ops, ${r.mapWrites} map writes so far`,
            { revision: head, stage: 'apply', done, total, mapWrites: r.mapWrites }),
        });
        this.countReport(done.report);
      } catch (err) {
        // EINVAL: the data plane cannot represent this revision on this node (e.g. the Node's interface is not
        // the one the data plane was opened on); ENOSPC: the plan found no order of ops that fits the node's maps
        // (PlanCapacityError, nothing written). Retrying the same revision would fail the same way.
        const code = (err as { code?: string }).code;
        return { ok: false, stage: 'apply', reason: errorText(err), permanent: code === 'EINVAL' || code === 'ENOSPC' };
      }
      // Read back (converge did, with the same planner): the kernel must now hold exactly what was rendered.
      if (done.left.length) {
        await this.restoreLastGoodLocked();
        return { ok: false, stage: 'readback', reason: `live maps differ after apply: ${done.left.slice(0, 5).map(describeOp).join('; ')}` };
      }
      return { ok: true, plan: done.ops, report: done.report, after: { live: done.live } };
    });
    if (!applied.ok) return this.fail(head, applied.stage, applied.reason, model, applied.permanent);
    const { plan, report } = applied;
    let after = applied.after;

    // The health gate waits for checks to settle (seconds): outside the lock, so health keeps re-rendering.
    if (this.o.postApplyGate && !adopting) {
      let gate;
      try {
        gate = await this.o.postApplyGate({ revision: head, before: this.appliedDesired, beforeModel: this.appliedModel, after: desired, model });
      } catch (err) {
        gate = { pass: false, reason: `gate error: ${errorText(err)}` };
      }
      if (!gate.pass) {
        await this.dpLock.run(() => this.restoreLastGoodLocked());
        return this.fail(head, 'health', gate.reason, model);
      }
      // Health may have changed while the gate waited: the kernel holds the latest render of this revision.
      await this.dpLock.run(async () => {
        desired = renderDesiredState(model, node, this.o.health?.());
        const done = await this.convergeTo(model, desired);
        if (done.ops.length) this.countReport(done.report);
        after = { live: done.live };
      });
    }

    const changed = head !== this.applied || report.mapWrites + report.mapDeletes + report.ringSwitches > 0;
    this.adopting = false;
    this.failed.delete(head);
    if (head !== this.applied || !this.appliedAt) this.appliedAt = this.clock().toISOString();
    this.applied = head;
    this.appliedModel = model;
    this.liveModel = model;
    this.appliedDesired = desired;
    this.appliedCommit = appliedCommit;
    this.warnings = warnings;
    this.notifyApplied(model);
    if (changed) this.counters.applies++;
    this.servicesFrom(after.live, desired);
    const result: AttemptResult = changed ? 'applied' : 'unchanged';
    this.lastAttempt = this.attempt(head, result);
    this.succeeded(head);
    for (const w of warnings) this.log.warn(w);
    this.log.info(
      `${result} ${head.slice(0, 12)} (${trigger}${adopting && this.o.lastVerified ? `, adopted pinned state of ${this.o.lastVerified.revision.slice(0, 12)}` : ''}): ` +
        `${report.mapWrites} map writes, ${report.mapDeletes} deletes, ${report.ringSwitches} ring switches ` +
        `(${desired.services.length} services, ${desired.reals.length} reals, ${desired.vips.length} listeners)`,
      { revision: head, stage: 'apply', result, trigger, mapWrites: report.mapWrites, mapDeletes: report.mapDeletes,
        ringSwitches: report.ringSwitches, services: desired.services.length, reals: desired.reals.length, listeners: desired.vips.length,
        ...(changed ? { durationMs: Object.values(this.timings).reduce((a, b) => a + b, 0) } : {}) },
    );
    this.publish(adopting ? `start (${trigger})` : trigger);
    return changed
      ? { kind: 'applied', revision: head, report, plan, warnings, timings: { ...this.timings }, seenAt: this.headSeen?.revision === head ? this.headSeen.at : this.clock().getTime() }
      : { kind: 'unchanged', revision: head, report };
  }

  /**
   * The config no longer names this node: it is being decommissioned. Tear the data plane down (the teardown
   * hook detaches programs, removes VIPs and pins), write a final status, and never revert: every other node
   * applies the same revision.
   */
  private async decommission(head: string, model: ConfigModel): Promise<Outcome> {
    if (this.decommissioned === head) return { kind: 'decommissioned', revision: head };
    this.log.warn(`revision ${head.slice(0, 12)} no longer names node '${this.o.node}': decommissioning`);
    await this.dpLock.run(async () => {
      this.dp.close();
      if (this.o.teardown) {
        try {
          await this.o.teardown();
        } catch (err) {
          this.log.warn(`decommission teardown incomplete: ${errorText(err)}`);
        }
      }
      this.liveModel = null;
      this.kernel = null;
    });
    this.decommissionedRole = this.appliedDesired?.role ?? this.role(this.appliedModel);
    this.decommissioned = head;
    this.adopting = false;
    this.failed.clear();
    this.applied = head;
    this.appliedAt = this.clock().toISOString();
    this.appliedModel = model;
    this.appliedDesired = null;
    this.lastServices = [];
    this.warnings = [];
    this.lastAttempt = this.attempt(head, 'decommissioned');
    const msg = `node '${this.o.node}' is not named by ${head.slice(0, 12)}; data plane removed`;
    for (const type of ['Ready', 'Reconciling', 'Stalled', 'Degraded'] as const)
      this.condition(type, 'False', 'Decommissioned', msg);
    this.publish('decommissioned');
    return { kind: 'decommissioned', revision: head };
  }

  /** A later revision names this node again: reopen the data plane so the apply below rebuilds it. */
  private async recommission(): Promise<void> {
    this.log.info(`node '${this.o.node}' is named again: rebuilding its data plane`);
    if (!this.o.reopenDataPlane) throw new Error('cannot rebuild the data plane after a decommission in this process; restart gitlb run');
    this.dp = await this.o.reopenDataPlane();
    this.decommissioned = null;
    this.decommissionedRole = null;
    this.applied = null;
    this.appliedModel = null;
  }

  /**
   * After a restart while the branch moved on: learn what the pinned data plane serves (the adopted revision's
   * model and desired state) without writing, so status, drift checks and the rollback policy have a last good
   * revision even if the new head fails.
   */
  private async adoptPinned(revision: string): Promise<string | null> {
    let files;
    try {
      files = await readRevisionFiles(this.o.remote.gitdir, revision, this.o.configPath);
    } catch (err) {
      return (err as { code?: string }).code === 'NotFoundError'
        ? `revision ${revision.slice(0, 12)} is not in the Git cache (${this.o.remote.gitdir})`
        : `reading ${revision.slice(0, 12)} from the Git cache (${this.o.remote.gitdir}) failed: ${errorText(err)}`;
    }
    try {
      const parsed = parseConfig(files);
      if (!parsed.model) return `revision ${revision.slice(0, 12)} no longer validates`;
      if (!parsed.model.nodes.some((n) => n.metadata.name === this.o.node)) return `revision ${revision.slice(0, 12)} does not name node '${this.o.node}'`;
      const desired = renderDesiredState(parsed.model, this.o.node, this.o.health?.());
      await this.dpLock.run(async () => {
        this.appliedModel = parsed.model!;
        this.liveModel = parsed.model!;
        this.appliedDesired = desired;
        await this.refreshServices(desired);
      });
      this.notifyApplied(parsed.model);
      return null;
    } catch (err) {
      return `adopting ${revision.slice(0, 12)} failed: ${errorText(err)}`;
    }
  }

  /**
   * At start, before any fetch: learn what the pinned data plane serves from the revision recorded as applied,
   * read from the local Git cache (`<cache-dir>/git`), validated as adoption always is. Health checks, the health
   * re-render, the neighbour refresh, drift checks and BGP then work from it while the Git server is unreachable
   * ("packets and health never wait for Git"). Writes nothing to the data plane; the first reconcile after a
   * successful fetch still runs the full pipeline (with nothing to write when nothing changed).
   */
  async adoptAtStart(): Promise<{ adopted: string | null; problem: string | null }> {
    const revision = this.applied;
    if (!revision || this.appliedDesired || this.decommissioned) return { adopted: null, problem: null };
    const problem = await this.adoptPinned(revision);
    if (problem) {
      const line = `cannot adopt the pinned revision at start: ${problem}; health checks, neighbour refresh and drift checks wait for the first successful fetch`;
      this.warnings.push(line);
      this.log.warn(line, { revision, stage: 'adopt', reason: problem });
      return { adopted: null, problem };
    }
    const d = this.appliedDesired!;
    this.log.info(`adopted ${revision.slice(0, 12)} from the local Git cache before fetching: ${d.services.length} services, ${d.reals.length} reals; health checks and neighbour refresh run from it`,
      { revision, stage: 'adopt', services: d.services.length, reals: d.reals.length });
    return { adopted: revision, problem: null };
  }

  /** What differs between the kernel and `desired`: the planner's ops, described (empty when they agree). */
  private async compareLive(desired: DesiredState, opts: ReadLiveOptions = {}): Promise<{ differences: string[]; live: LiveState }> {
    // converge's read-only half; its memo spares an idle node's drift check the planning (see LiveMemo)
    const { ops, live } = await this.converger.diff(this.dp, desired, opts);
    return { differences: ops.map(describeOp), live };
  }

  /** converge, remembering what the kernel holds now (it is unchanged when converge throws: the data plane undid). */
  private async convergeTo(model: ConfigModel, desired: DesiredState, opts?: ConvergeOptions): Promise<Converged> {
    const done = await this.converger.converge(this.dp, desired, opts);
    this.kernel = { model, desired };
    return done;
  }

  /**
   * Re-applies the last good revision after a post-apply problem (read-back mismatch, health gate), rendered with
   * the health observed now. Caller holds the data-plane lock.
   */
  private async restoreLastGoodLocked(): Promise<void> {
    if (!this.appliedModel || !this.appliedDesired) return;
    this.liveModel = this.appliedModel;
    try {
      const desired = renderDesiredState(this.appliedModel, this.o.node, this.o.health?.());
      this.countReport((await this.convergeTo(this.appliedModel, desired)).report);
      this.appliedDesired = desired;
    } catch (err) {
      this.log.warn(`restoring last good revision failed: ${errorText(err)}`);
    }
    // The health checker follows the config in the kernel again (the gate had installed the candidate's checks).
    this.notifyApplied(this.appliedModel);
  }

  private async fail(head: string, stage: FailureStage, reason: string, model: ConfigModel | null, permanent = false, condition?: ConditionReason): Promise<Outcome> {
    this.counters.failures++;
    const prior = this.failed.get(head);
    const attempts = (prior?.attempts ?? 0) + 1;
    const retryable = RETRYABLE.has(stage) && !permanent;
    const delay = Math.min(this.retry.maxMs, this.retry.baseMs * 2 ** (attempts - 1));
    this.failed.set(head, {
      stage,
      reason,
      retryable,
      attempts,
      retryAt: retryable ? this.clock().getTime() + delay : Infinity,
      ...(condition && { condition }),
    });
    this.lastAttempt = this.lastFailure = this.attempt(head, 'failed', stage, reason);
    this.log.warn(`revision ${head.slice(0, 12)} failed at ${stage}: ${reason}${retryable ? ` (retry in ${delay} ms)` : ''}`,
      { revision: head, stage, reason, ...(retryable ? { retryMs: delay } : {}) });

    // The revert first: it is what brings the fleet back; the status write can follow.
    this.failureConditions(head, this.failed.get(head)!);

    // Only a revision whose own content is bad is reverted, and only by lb nodes (backends would race them with
    // less information: they run no health gate).
    let rollback: RevertOutcome | undefined;
    if (CONTENT_BAD.has(stage) && this.role(model) === 'lb' && this.rollbackPolicy(model) === 'auto')
      rollback = await this.autoRevert(head, stage, reason);
    this.publish(`failed at ${stage}`);
    return rollback ? { kind: 'failed', revision: head, stage, reason, rollback } : { kind: 'failed', revision: head, stage, reason };
  }

  /** Ready/Reconciling/Stalled for a head that failed (also re-stated when a fetch recovers onto it). */
  private failureConditions(head: string, f: FailedRevision): void {
    const reason = f.condition ?? STAGE_REASON[f.stage];
    this.condition('Ready', 'False', reason, `${head.slice(0, 12)} failed at ${f.stage}: ${f.reason}`);
    if (f.retryable) {
      const inS = Math.max(0, Math.round((f.retryAt - this.clock().getTime()) / 1000));
      this.condition('Reconciling', 'True', reason, `retrying in ${inS} s (attempt ${f.attempts})`);
      this.condition('Stalled', 'False', reason, 'the failure is transient');
    } else {
      this.condition('Reconciling', 'False', reason, 'waiting for a new commit');
      this.condition('Stalled', 'True', reason, `${head.slice(0, 12)} cannot be applied: ${f.reason}`);
    }
  }

  private role(model: ConfigModel | null): 'lb' | 'backend' {
    if (this.o.role) return this.o.role;
    const own = (m: ConfigModel | null) => m?.nodes.find((n) => n.metadata.name === this.o.node)?.spec.role;
    return own(this.appliedModel) ?? own(model) ?? 'lb';
  }

  /** The policy in force: the last good config's, or the failing revision's when nothing was applied yet. */
  private rollbackPolicy(failingModel: ConfigModel | null): 'auto' | 'manual' {
    return (this.appliedModel ?? failingModel)?.cluster.spec.rollback.policy ?? 'manual';
  }

  private async autoRevert(head: string, stage: FailureStage, reason: string): Promise<RevertOutcome> {
    let outcome: RevertOutcome;
    try {
      const info = await readCommitInfo(this.o.remote.gitdir, head);
      if (isRevertMessage(info.message)) outcome = { pushed: false, why: 'never revert a revert' };
      else
        outcome = await pushAutoRevert({
          remote: this.o.remote,
          branch: this.o.branch,
          bad: head,
          lastGood: this.applied,
          reason: `${stage}: ${reason}`,
          node: this.o.node,
          now: this.clock(),
          signer: this.o.signer,
        });
    } catch (err) {
      outcome = { pushed: false, why: `revert failed: ${errorText(err)}` };
    }
    if (outcome.pushed) {
      this.counters.rollbacksPushed++;
      this.log.warn(`pushed automatic revert ${outcome.commit.slice(0, 12)} of ${head.slice(0, 12)}`);
    } else this.log.info(`no automatic revert of ${head.slice(0, 12)}: ${outcome.why}`);
    return outcome;
  }

  /**
   * Re-renders the config in the kernel with the current health view (the health path calls this when a real
   * changes state) and applies the result if it differs. Holds only the data-plane lock: it never waits for a
   * fetch, a status push or a peer read. Returns the apply report, or null when there was nothing to do.
   * `services`: only these changed health since the last converge (the health loop's HealthChange events), so only
   * they are rendered again, on top of what the kernel holds; null renders everything.
   */
  async refreshHealth(why = 'health change', services: ReadonlySet<string> | null = null): Promise<ApplyReport | null> {
    const report = await this.dpLock.run(async () => {
      const model = this.liveModel ?? this.appliedModel;
      if (!model || !this.appliedDesired || this.decommissioned) return undefined;
      const base = services && this.kernel?.model === model ? this.kernel.desired : null;
      const desired = base ? rerenderServices(model, base, this.o.health?.(), services!) : renderDesiredState(model, this.o.node, this.o.health?.());
      // one converge: planned once, validated once, read back only when something was written
      const done = await this.convergeTo(model, desired);
      const candidate = model !== this.appliedModel; // a revision under its health gate: it records its own state
      if (!done.ops.length) {
        if (!candidate) {
          this.appliedDesired = desired; // real health flags may change without any ring change
          this.servicesFrom(done.live, desired);
        }
        return null;
      }
      const r = done.report;
      this.countReport(r);
      if (!candidate) {
        this.appliedDesired = desired;
        this.servicesFrom(done.live, desired);
      }
      if (done.left.length)
        this.log.warn(`re-render of ${candidate ? 'candidate' : this.applied?.slice(0, 12)} (${why}) left ${done.left.length} differences: ${done.left.slice(0, 3).map(describeOp).join('; ')}`,
          { stage: 'health', reason: why, left: done.left.length });
      this.log.info(`re-rendered ${candidate ? 'candidate' : this.applied?.slice(0, 12)} (${why}): ${r.mapWrites} map writes`,
        { stage: 'health', reason: why, mapWrites: r.mapWrites, mapDeletes: r.mapDeletes, ringSwitches: r.ringSwitches });
      return r;
    });
    // Publish even without a ring change: in consensus mode peers vote with what this node observes.
    if (report !== undefined) this.publish(why);
    return report ?? null;
  }

  /** Drift check: compare the kernel with the applied revision's desired state; repair and count differences. */
  async checkDrift(): Promise<{ differences: string[]; report?: ApplyReport }> {
    const r = await this.dpLock.run(() => this.checkDriftLocked());
    if (r.why) this.publish(r.why);
    return { differences: r.differences, ...(r.report && { report: r.report }) };
  }

  private async checkDriftLocked(): Promise<{ differences: string[]; report?: ApplyReport; why?: string }> {
    const desired = this.appliedDesired;
    if (!desired || this.decommissioned || this.liveModel !== this.appliedModel) return { differences: [] };
    // every check reads what it can compare cheaply (settings, reals, listeners, each ring's identity) and the
    // contents of the rings due in this turn of the slow rotation (docs/reconciler.md, "Drift")
    const drift = await this.compareLive(desired, { verifyTurn: this.counters.driftChecks++ });
    if (!drift.differences.length) {
      const was = this.driftRepaired;
      this.driftRepaired = null;
      return { differences: [], ...(was && { why: 'no drift' }) };
    }
    if (this.o.reopenDataPlane) {
      this.dp.close();
      this.dp = await this.o.reopenDataPlane();
    }
    const done = await this.convergeTo(this.appliedModel!, desired);
    const report = done.report;
    this.countReport(report);
    const left = done.left.map(describeOp);
    if (left.length) {
      this.driftRepaired = `${left.length} differences not repaired: ${left.slice(0, 3).join('; ')}`;
      this.log.warn(`drift not repaired (${left.length} differences left): ${left.slice(0, 3).join('; ')}`);
      return { differences: drift.differences, report, why: `drift not repaired: ${left.length} differences` };
    }
    this.counters.driftRepairs++;
    this.driftRepaired = `repaired ${drift.differences.length} differences: ${drift.differences.slice(0, 3).join('; ')}`;
    this.log.warn(`drift repaired (${drift.differences.length} differences): ${drift.differences.slice(0, 3).join('; ')}`,
      { stage: 'drift', count: drift.differences.length, mapWrites: report.mapWrites });
    this.servicesFrom(done.live, desired);
    return { differences: drift.differences, report, why: `drift repaired: ${drift.differences.length} differences` };
  }
}
