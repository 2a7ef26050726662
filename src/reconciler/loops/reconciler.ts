// One node's reconciler: the state its two loops share (state/node-state.ts) and the entry points they call —
// a revision pass (./revision-pass.ts, scheduled by ./revision-loop.ts), the health re-render (./health-loop.ts),
// the drift check (drift/drift-check.ts), adoption at start (state/adoption.ts) — plus the status the node
// publishes (status/publisher.ts, conditions by status/conditions.ts). Each of those reaches the data plane only
// through converge (converge.ts), under the one data-plane lock. docs/reconciler.md, "Architecture".
import type { ConfigModel } from '../../render/model.js';
import type { DesiredState } from '../../render/state.js';
import type { ApplyReport, DataPlane } from '../../bpf/dataplane/index.js';
import type { Converger } from '../converge.js';
import type { RecordedPolicy } from '../verify/revision-check.js';
import type { NodeStatus, StatusCounters } from '../status/status-doc.js';
import { NodeState, type ReconcilerOptions } from '../state/node-state.js';
import { RevisionPass, type Outcome } from './revision-pass.js';
import { rerenderHealth } from './health-loop.js';
import { checkDrift, type DriftResult } from '../drift/drift-check.js';
import { adoptAtStart } from '../state/adoption.js';

export { DEFAULT_STATUS_BRANCH, type Logger, type PostApplyGate, type PreApplyGate, type ReconcilerOptions } from '../state/node-state.js';
export type { Outcome } from './revision-pass.js';

export class Reconciler {
  private readonly s: NodeState;
  private readonly pass: RevisionPass;

  constructor(o: ReconcilerOptions) {
    this.s = new NodeState(o);
    this.pass = new RevisionPass(this.s);
  }

  /** One reconcile pass. Never throws for revision problems: they end in a recorded, published failure. */
  reconcile(trigger = 'manual'): Promise<Outcome> {
    return this.pass.reconcile(trigger);
  }

  /**
   * Re-renders the config in the kernel with the current health view and applies any difference (the health loop):
   * only `services` when given, else everything. Returns the apply report, or null when there was nothing to do.
   */
  refreshHealth(why = 'health change', services: ReadonlySet<string> | null = null): Promise<ApplyReport | null> {
    return rerenderHealth(this.s, why, services);
  }

  /** Drift check: compare the kernel with the applied revision's desired state; repair and count differences. */
  checkDrift(): Promise<DriftResult> {
    return checkDrift(this.s);
  }

  /** At start, before any fetch: adopt what the pinned data plane serves from the local Git cache. */
  adoptAtStart(): Promise<{ adopted: string | null; problem: string | null }> {
    return adoptAtStart(this.s);
  }

  get counters(): StatusCounters {
    return this.s.counters;
  }

  get appliedRevision(): string | null {
    return this.s.applied;
  }

  /**
   * The policy recorded by the last verified revision (its `Cluster.spec.verification`, null for none), for the
   * local state; undefined while that revision's config is not known (nothing applied or adopted yet).
   */
  get verifiedPolicy(): RecordedPolicy | undefined {
    return this.s.verifiedPolicy;
  }

  /** The data plane in use (it changes when the drift check reopens it). */
  get dataPlane(): DataPlane {
    return this.s.dp;
  }

  get desired(): DesiredState | null {
    return this.s.appliedDesired;
  }

  /** The validated config of the applied revision (null before the first apply). */
  get appliedConfig(): ConfigModel | null {
    return this.s.appliedModel;
  }

  /** The status branch named by the applied config (Cluster.spec.status.branch). */
  get statusBranch(): string {
    return this.s.statusBranch;
  }

  /** The data plane's report of the most recent apply (reconcile, restore or drift repair). */
  get lastReport(): ApplyReport | null {
    return this.s.lastReport;
  }

  /** The one way to the data plane (converge.ts); `stats` counts planner calls. */
  get converger(): Converger {
    return this.s.converger;
  }

  /** The fetch outage in progress (first failure, failed attempts, last error), or null while fetching works. */
  get fetchFailing(): { since: number; attempts: number; reason: string } | null {
    return this.pass.fetchFailing;
  }

  /** When the earliest pending retry of a failed revision is due (for the daemon's timer), or null. */
  get nextRetryAt(): Date | null {
    return this.pass.nextRetryAt;
  }

  /** The outcome of the latest reconcile pass (`run --once` exits by it). */
  get lastOutcome(): Outcome | null {
    return this.pass.lastOutcome;
  }

  /** Milliseconds per stage of the latest reconcile (fetch, verify, validate, render, plan, apply, readback). */
  get timings(): Record<string, number> {
    return this.pass.timings;
  }

  snapshot(): NodeStatus {
    return this.s.snapshot();
  }

  /** Writes the status now (without waiting for the push): something it reports changed outside a reconcile. */
  publishStatus(why: string): void {
    this.s.publish(why);
  }

  /**
   * Rewrites the status when nothing else did for `maxAgeMs`, so an idle healthy node's status stays fresh and
   * `gitlb status` can tell a quiet node from a dead one (its UPDATED column and --stale-after).
   */
  heartbeat(maxAgeMs: number): void {
    this.s.publisher.heartbeat(maxAgeMs);
  }

  /**
   * The daemon is stopping (SIGTERM): from now on the status says Ready=False/Stopped, so its last write tells
   * `gitlb status` that nothing reconciles here any more (the pinned data plane keeps forwarding what it serves).
   */
  markStopped(why: string): void {
    const s = this.s;
    s.conditions.stopped(why, s.decommissioned ? 'nothing (decommissioned)' : s.applied ? s.applied.slice(0, 12) : 'nothing');
  }

  /** Stops retrying failed status writes (daemon shutdown). */
  stopStatusRetries(): void {
    this.s.publisher.stop();
  }

  /**
   * Resolves when every status handed to the sink so far has been written (or has failed and been logged). Not
   * the ones handed over meanwhile (status/publisher.ts).
   */
  async flushStatus(): Promise<void> {
    await this.s.publisher.flush();
  }
}
