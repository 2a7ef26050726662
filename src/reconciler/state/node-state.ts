// What one node serves and knows, shared by the parts of its reconciler (the revision pass, the health re-render,
// drift, decommission, adoption): the applied revision, its model and desired state, what the kernel holds, the
// data plane and its lock, the counters and the facts its status reports. The one way to the data plane is
// `convergeTo` (converge.ts), under `dpLock`, never held across Git I/O. docs/reconciler.md, "Architecture".
import type { HealthView } from '../../render/desired.js';
import type { ConfigModel } from '../../render/model.js';
import type { DesiredState } from '../../render/state.js';
import type { ApplyReport, DataPlane } from '../../bpf/dataplane/index.js';
import type { GitRemote } from '../source/git-remote.js';
import type { PayloadSigner } from '../source/git-objects.js';
import { Converger, type ConvergeOptions, type Converged } from '../converge.js';
import { Mutex } from '../loops/mutex.js';
import { describeXdp, statusXdp } from '../status/xdp-report.js';
import { StatusPublisher } from '../status/publisher.js';
import { NodeConditions } from '../status/conditions.js';
import type { RecordedPolicy } from '../verify/revision-check.js';
import type { Trust } from '../verify/trust.js';
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
} from '../status/status-doc.js';
import { errorText } from '../../errors.js';

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
  /** The `flows` mapping of the status file (lb nodes with --flow-sync: sync per peer, SNAT takeover, drain). */
  statusFlows?: () => unknown;
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

const quietLog: Logger = { info: () => {}, warn: () => {} };

export { errorText };

export class NodeState {
  readonly counters: StatusCounters = emptyCounters();
  applied: string | null;
  appliedAt: string | null = null;
  appliedModel: ConfigModel | null = null;
  appliedDesired: DesiredState | null = null;
  /** Until the first pass that fetched: the pinned state is adopted, not yet applied by this process. */
  adopting = true;
  lastAttempt: StatusAttempt | null = null;
  lastFailure: StatusAttempt | null = null;
  warnings: string[] = [];
  readonly startedAt: string;
  readonly clock: () => Date;
  readonly log: Logger;
  readonly retry: { baseMs: number; maxMs: number };
  lastServices: NodeStatus['services'] = [];
  /** Set by a drift check that repaired something; cleared by the next clean one (condition Degraded). */
  driftRepaired: string | null = null;
  verification: StatusVerification | undefined;
  appliedCommit: AppliedCommit | undefined;
  /** The data plane's report of the most recent apply (reconcile, restore or drift repair). */
  lastReport: ApplyReport | null = null;
  /** Serialises every section that writes or compares the data plane; never held across Git I/O. */
  readonly dpLock = new Mutex();
  /** The config whose tables are in the kernel: the applied one, or a candidate while its health gate runs. */
  liveModel: ConfigModel | null = null;
  /** The status policy (status/conditions.ts). */
  readonly conditions: NodeConditions;
  /** Hands snapshots to the status writer, retries failed pushes (status/publisher.ts). */
  readonly publisher: StatusPublisher;
  decommissioned: string | null = null;
  /** The role this node served before a decommission removed its data plane (the status keeps saying it). */
  decommissionedRole: 'lb' | 'backend' | null = null;
  /** The last fetch outage, recorded on the status branch once the node can write again (status `fetchOutage`). */
  fetchOutage: NodeStatus['fetchOutage'];
  /** The data plane in use (it changes when the drift check or a recommission reopens it). */
  dp: DataPlane;
  /** The one way to the data plane: plans, executes, reads back (converge.ts); its memo spares an idle drift check. */
  readonly converger = new Converger();
  /** What the last converge put into the kernel (the previous state when one failed): an incremental health
   * re-render builds on it (rerenderServices). */
  kernel: { model: ConfigModel; desired: DesiredState } | null = null;
  private loggedXdp = '';

  constructor(readonly o: ReconcilerOptions) {
    this.dp = o.dataPlane;
    this.clock = o.clock ?? (() => new Date());
    this.log = o.log ?? quietLog;
    this.retry = o.retry ?? { baseMs: 1000, maxMs: 300_000 };
    this.conditions = new NodeConditions(this.clock);
    this.publisher = new StatusPublisher({ sink: o.statusSink, snapshot: () => this.snapshot(), branch: () => this.statusBranch,
      clock: this.clock, retryMaxMs: this.retry.maxMs, log: this.log });
    this.applied = o.lastVerified?.revision ?? null;
    this.startedAt = this.clock().toISOString();
  }

  /**
   * The policy recorded by the last verified revision (its `Cluster.spec.verification`, null for none), for the
   * local state; undefined while that revision's config is not known (nothing applied or adopted yet).
   */
  get verifiedPolicy(): RecordedPolicy | undefined {
    if (this.appliedModel) return this.appliedModel.cluster.spec.verification ?? null;
    return this.applied && this.applied === this.o.lastVerified?.revision ? this.o.lastVerified.verification : undefined;
  }

  /** The status branch named by the applied config (Cluster.spec.status.branch). */
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
      conditions: this.conditions.current(now, { decommissioned: !!this.decommissioned, driftRepaired: this.driftRepaired, services: this.lastServices }),
      counters: { ...this.counters },
      startedAt: this.startedAt,
      updatedAt: now,
      ...this.statusSection('health', this.o.statusHealth),
      ...this.statusSection('bgp', this.o.statusBgp),
      ...this.statusSection('flows', this.o.statusFlows),
      ...(this.fetchOutage && { fetchOutage: this.fetchOutage }),
      ...(this.verification && { verification: this.verification }),
      ...(this.appliedCommit && { appliedCommit: this.appliedCommit }),
      ...(this.dp.forwarding && { xdp: statusXdp(this.dp.forwarding) }),
    };
  }

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

  notifyApplied(model: ConfigModel): void {
    try {
      this.o.onApplied?.(model);
    } catch (err) {
      this.log.warn(`onApplied hook failed: ${errorText(err)}`);
    }
  }

  /** Hands a status snapshot to the writer without waiting for the push (status/publisher.ts). */
  publish(why: string): void {
    this.noteXdp();
    this.publisher.publish(why);
  }

  attempt(revision: string, result: AttemptResult, stage?: FailureStage, reason?: string): StatusAttempt {
    const a: StatusAttempt = { revision, result, at: this.clock().toISOString() };
    if (stage) a.stage = stage;
    if (reason) a.reason = reason;
    return a;
  }

  /** Fills per-service status from the desired state and the digests read back from the kernel. */
  async refreshServices(desired: DesiredState): Promise<void> {
    this.servicesFrom(await this.dp.readLive(), desired);
  }

  servicesFrom(live: { services: { id: number; digest: string }[] }, desired: DesiredState): void {
    const liveDigest = new Map(live.services.map((s) => [s.id, s.digest]));
    this.lastServices = desired.services.map((s) => statusService(s, liveDigest.get(s.id) ?? s.digest));
  }

  countReport(r: ApplyReport): void {
    this.lastReport = r;
    this.counters.mapWrites += r.mapWrites;
    this.counters.mapDeletes += r.mapDeletes;
    this.counters.ringSwitches += r.ringSwitches;
  }

  /** converge, remembering what the kernel holds now (it is unchanged when converge throws: the data plane undid). */
  async convergeTo(model: ConfigModel, desired: DesiredState, opts?: ConvergeOptions): Promise<Converged> {
    const done = await this.converger.converge(this.dp, desired, opts);
    this.kernel = { model, desired };
    return done;
  }

  /** This node's role: the option, else the Node document of the applied config, else of `model`. */
  role(model: ConfigModel | null): 'lb' | 'backend' {
    if (this.o.role) return this.o.role;
    const own = (m: ConfigModel | null) => m?.nodes.find((n) => n.metadata.name === this.o.node)?.spec.role;
    return own(this.appliedModel) ?? own(model) ?? 'lb';
  }
}
