// One pass of the revision loop (./revision-loop.ts schedules them): fetch -> verify -> validate -> render ->
// [probation] -> converge (plan against live, apply, read back: converge.ts) -> [health gate] -> status.
// The data plane is reached only through converge, so the same pass drives an lb node (XDP) and a backend node (TC).
//
// Invariants (docs/reconciler.md):
// - Anything failing before apply leaves the data plane untouched; a failing apply is undone by the data
//   plane itself; a failing read-back or health gate re-applies the last good state.
// - A failed revision is recorded with its stage and reason; the node keeps serving its last good revision.
//   Transient failures (fetch, apply, read-back) are retried with exponential backoff; deterministic ones
//   (validation, render) are not. A newer commit always supersedes a failed one.
// - After a restart the revision the pinned maps serve is adopted from the local Git cache before any fetch
//   (state/adoption.ts), so health and the health re-render work while Git is down; the first pass that fetches
//   applies the last good revision again, which writes nothing when nothing changed.
// - Git I/O (fetch, ancestry, revert push) never runs under the data-plane lock: a health re-render waits at
//   most for one apply/read-back section, never for the Git server (docs/reconciler.md, "Health path").
// - A revision that no longer names this node decommissions it (decommission/decommission.ts): never a revert.
//   Automatic reverts are pushed only by lb nodes and only for revisions whose own content is bad
//   (revert/auto-revert.ts).
import { parseConfig, formatDiagnostic } from '../../render/config/index.js';
import { renderDesiredState } from '../../render/desired.js';
import type { ConfigModel } from '../../render/model.js';
import type { DesiredState } from '../../render/state.js';
import type { ApplyReport, LiveState } from '../../bpf/dataplane/index.js';
import { readRevisionFiles } from '../source/git-objects.js';
import { isStopped } from '../source/deadline.js';
import {
  GitlbError, asRevisionError, errorText, fromDataPlane, reactionTo, revisionError, type ErrorCode, type RevisionError,
} from '../../errors.js';
import type { Op } from '../../render/ops.js';
import { describeOp } from '../../render/ops-text.js';
import type { RevertOutcome } from '../revert/rollback.js';
import { autoRevert, shouldAutoRevert } from '../revert/auto-revert.js';
import { FetchBackoff, humanMs } from '../source/fetch-backoff.js';
import type { RevisionFailure } from '../status/conditions.js';
import { checkRevision, policyFor } from '../verify/revision-check.js';
import type { AttemptResult, FailureStage, AppliedCommit } from '../status/status-doc.js';
import { adoptPinned } from '../state/adoption.js';
import { decommission, recommission } from '../decommission/decommission.js';
import type { NodeState } from '../state/node-state.js';

export type Outcome =
  | { kind: 'unchanged'; revision: string; report?: ApplyReport }
  | { kind: 'applied'; revision: string; report: ApplyReport; plan: Op[]; warnings: string[]; timings: Record<string, number>;
      /** Epoch ms this node first fetched the revision as the branch head (gitlb_commit_to_applied_seconds). */
      seenAt: number }
  | { kind: 'failed'; revision: string | null; stage: FailureStage; reason: string; code: ErrorCode; rollback?: RevertOutcome }
  | { kind: 'waiting'; revision: string | null; retryAt: Date; reason: string }
  | { kind: 'decommissioned'; revision: string };

/** A plan this long is announced before it runs (its progress follows every couple of seconds). */
const LARGE_PLAN_OPS = 1000;

export class RevisionPass {
  private readonly failed = new Map<string, RevisionFailure>();
  private readonly fetchBackoff: FetchBackoff;
  /** The branch head as first fetched, and when (Outcome.seenAt). */
  private headSeen: { revision: string; at: number } | null = null;
  /** The outcome of the latest pass (`run --once` exits by it). */
  lastOutcome: Outcome | null = null;
  /** Milliseconds per stage of the latest pass (fetch, verify, validate, render, plan, apply, readback). */
  timings: Record<string, number> = {};

  constructor(private readonly s: NodeState) {
    this.fetchBackoff = new FetchBackoff(s.retry);
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

  /** One reconcile pass. Never throws for revision problems: they end in a recorded, published failure. */
  async reconcile(trigger = 'manual'): Promise<Outcome> {
    this.lastOutcome = await this.reconcilePass(trigger);
    return this.lastOutcome;
  }

  private async reconcilePass(trigger: string): Promise<Outcome> {
    this.s.counters.reconciles++;
    let head: string | null;
    this.timings = {};
    const t = performance.now();
    try {
      head = await this.s.o.remote.fetch(this.s.o.branch, { depth: 1 });
      this.timings.fetch = Math.round(performance.now() - t);
      if (!head) throw new GitlbError('BranchNotFound', `branch '${this.s.o.branch}' not found in ${this.s.o.remote.description}`);
    } catch (err) {
      // Aborted because the daemon is stopping: not a Git failure, nothing to record or publish.
      if (isStopped(err)) return { kind: 'failed', revision: null, stage: 'fetch', reason: 'stopping', code: 'Stopped' };
      return this.fetchFailed(asRevisionError(err, 'FetchFailed'));
    }
    const outage = this.fetchBackoff.recovered(this.s.clock().getTime());
    if (outage) {
      this.s.log.info(`fetch recovered after ${outage.attempts} failed attempts over ${humanMs(outage.durationMs)} (last error: ${outage.reason})`,
        { stage: 'fetch', attempts: outage.attempts, durationMs: outage.durationMs, reason: outage.reason });
      // Say again why the head is not applied, or that it is: the conditions still name the fetch failure.
      const failedHead = this.failed.get(head);
      this.s.fetchOutage = { since: new Date(outage.since).toISOString(), until: new Date(outage.until).toISOString(), attempts: outage.attempts, reason: outage.reason };
      if (failedHead) this.s.conditions.revisionFailed(head, failedHead);
      // Nothing was applied: the node serves the head it already had (it says so, not "applied").
      else if (head === this.s.applied && !this.s.adopting)
        this.s.conditions.succeeded(head, `serving ${head.slice(0, 12)}, the branch head; fetch recovered after ${outage.attempts} failed attempts over ${humanMs(outage.durationMs)}`);
      // The outage goes on the status branch in any case (the apply below publishes it if the head moved).
      if (failedHead || (head === this.s.applied && !this.s.adopting) || this.s.decommissioned === head) this.s.publish('fetch recovered');
    }
    if (this.headSeen?.revision !== head) this.headSeen = { revision: head, at: this.s.clock().getTime() };

    if (this.s.decommissioned === head) return { kind: 'decommissioned', revision: head };
    if (head === this.s.applied && !this.s.adopting) return { kind: 'unchanged', revision: head };
    if (this.s.adopting && this.s.applied && head !== this.s.applied && !this.s.appliedDesired) {
      const problem = await adoptPinned(this.s, this.s.applied);
      if (problem) this.s.log.warn(`cannot adopt ${this.s.applied.slice(0, 12)} (${problem}); its state is unknown until the next apply`);
    }

    // A newer commit supersedes every failed one.
    for (const rev of [...this.failed.keys()]) if (rev !== head) this.failed.delete(rev);
    const prior = this.failed.get(head);
    if (prior) {
      if (!prior.retryable) return { kind: 'failed', revision: head, stage: prior.stage, reason: prior.reason, code: prior.code };
      if (this.s.clock().getTime() < prior.retryAt)
        return { kind: 'waiting', revision: head, retryAt: new Date(prior.retryAt), reason: prior.reason };
    }
    return this.reconcileRevision(head, trigger);
  }

  /**
   * A failed fetch: recorded (status conditions, counters) and retried with exponential backoff besides the poll
   * (source/fetch-backoff.ts), while the node keeps serving its last good revision. Logged once per backoff step and
   * published only when the reason changes, so a long partition costs neither a log line nor a status push per poll.
   */
  private fetchFailed(failure: RevisionError): Outcome {
    const reason = failure.message;
    this.s.counters.failures++;
    const now = this.s.clock().getTime();
    const changed = this.fetchBackoff.state?.reason !== reason;
    const { state, log, retryInMs } = this.fetchBackoff.failed(reason, now);
    const retry = `next retry in ${humanMs(retryInMs)} (backoff step ${state.step}), polls also retry`;
    if (log)
      this.s.log.warn(`fetch failed (attempt ${state.attempts}${state.attempts > 1 ? `, failing for ${humanMs(now - state.since)}` : ''}; ${retry}): ${reason}`,
        { stage: 'fetch', reason, code: failure.code, attempts: state.attempts, step: state.step, retryMs: retryInMs });
    this.s.conditions.fetchFailed(reason, state.attempts, retry);
    if (changed) this.s.publish('fetch failed');
    return { kind: 'failed', revision: null, stage: 'fetch', reason, code: failure.code };
  }

  private async reconcileRevision(head: string, trigger: string): Promise<Outcome> {
    let t = performance.now();
    const mark = (stage: string) => {
      const now = performance.now();
      this.timings[stage] = Math.round(now - t);
      t = now;
    };
    const { remote, branch, node } = this.s.o;
    const warnings: string[] = [];
    const adopting = this.s.adopting;

    // Verify the tip against this node's own verified history (ancestry, signatures, policy) before any of it is
    // read as config. Conditions Ready=False / Stalled=True name the commit, author and why (VerificationFailed),
    // or the rewind (NonFastForward).
    let appliedCommit: AppliedCommit;
    // A verified revision whose policy is unknown (a state file from before it was recorded, and a config the cache
    // cannot give any more) is judged as under enforce: fail closed, never off (docs/verification.md).
    const recorded = this.s.verifiedPolicy;
    try {
      const check = await checkRevision({
        remote,
        branch,
        head,
        verified: this.s.applied,
        trustFrom: this.s.o.trustFrom ?? null,
        policy: policyFor(recorded, !!this.s.o.trust || (recorded === undefined && this.s.applied !== null)),
        allowRewindTo: this.s.o.allowRewindTo ?? null,
        configPath: this.s.o.configPath,
        root: this.s.o.trust ?? null,
        now: this.s.clock(),
      });
      this.s.verification = check.status;
      appliedCommit = check.commit;
      warnings.push(...check.warnings);
      if (check.rewound) this.s.counters.forcePushes++;
      if (check.refused) return this.fail(head, 'verify', revisionError(check.refusal ?? 'VerificationFailed', check.reason), null);
    } catch (err) {
      // Reading history failed (network, deepening): transient, retried like a fetch.
      return this.fail(head, 'fetch', revisionError('HistoryUnreadable', `verification could not read history: ${errorText(err)}`, { cause: err }), null);
    }
    mark('verify');
    // Validate.
    let model: ConfigModel;
    try {
      const files = await readRevisionFiles(remote.gitdir, head, this.s.o.configPath);
      const parsed = parseConfig(files);
      const errors = parsed.diagnostics.filter((d) => d.severity === 'error');
      if (!parsed.model || errors.length) {
        const shown = errors.slice(0, 5).map(formatDiagnostic);
        if (errors.length > 5) shown.push(`(${errors.length - 5} more errors)`);
        const first = errors[0];
        return this.fail(head, 'validate', revisionError('ConfigInvalid', shown.join('; ') || 'configuration rejected',
          first ? { at: { file: first.file, line: first.line, col: first.col } } : {}), null);
      }
      model = parsed.model;
    } catch (err) {
      // a config the reader refuses is the revision's fault; an object the cache lacks (GitObjectMissing) is not
      return this.fail(head, 'validate', asRevisionError(err, 'ConfigInvalid'), null);
    }

    mark('validate');
    // A revision that no longer names this node is its decommission, not a fault of the revision.
    if (!model.nodes.some((n) => n.metadata.name === node)) return this.decommission(head, model);
    if (this.s.decommissioned) await recommission(this.s);

    // New or changed reals are probed before they can receive a connection (make-before-break for health).
    let healthView = this.s.o.health?.();
    if (this.s.o.preApplyGate && !adopting && this.s.appliedModel) {
      let pre;
      try {
        pre = await this.s.o.preApplyGate({ revision: head, beforeModel: this.s.appliedModel, model });
      } catch (err) {
        pre = { pass: false, reason: `pre-apply probe error: ${errorText(err)}` };
      }
      if (!pre.pass) return this.fail(head, 'health', revisionError('HealthGateFailed', pre.reason), model);
      if (pre.health) healthView = pre.health;
      mark('probe');
    }

    // Render.
    let desired: DesiredState;
    try {
      desired = renderDesiredState(model, node, healthView);
    } catch (err) {
      return this.fail(head, 'render', asRevisionError(err, 'RenderFailed'), model);
    }

    mark('render');
    // Plan against the live maps, apply, read back: one locked section (the health path waits for it, and a
    // health re-render from now on renders this candidate). The data plane restores itself if apply fails.
    type Applied = { ok: true; plan: Op[]; report: ApplyReport; after: { live: LiveState } } | { ok: false; stage: FailureStage; failure: RevisionError };
    const applied: Applied = await this.s.dpLock.run(async (): Promise<Applied> => {
      let done;
      try {
        done = await this.s.convergeTo(model, desired, {
          onStage: (stage) => {
            mark(stage);
            if (stage === 'apply') this.s.liveModel = model;
          },
          onPlanned: (plan) => {
            if (plan.length >= LARGE_PLAN_OPS) this.s.log.info(`applying ${head.slice(0, 12)}: ${plan.length} ops`, { revision: head, stage: 'apply', ops: plan.length });
          },
          onProgress: (done, total, r) => this.s.log.info(`applying ${head.slice(0, 12)}: ${done}/${total} ops, ${r.mapWrites} map writes so far`,
            { revision: head, stage: 'apply', done, total, mapWrites: r.mapWrites }),
        });
        this.s.countReport(done.report);
      } catch (err) {
        // DataPlaneRefused: the data plane cannot represent this revision on this node (e.g. the Node's interface is
        // not the one the data plane was opened on); CapacityExceeded: the plan found no order of ops that fits the
        // node's maps (nothing written). Retrying the same revision would fail the same way; any other failure of
        // the kernel (ApplyFailed) was undone and is retried (src/errors.ts).
        return { ok: false, stage: 'apply', failure: fromDataPlane(err) };
      }
      // Read back (converge did, with the same planner): the kernel must now hold exactly what was rendered.
      if (done.left.length) {
        await this.restoreLastGoodLocked();
        return { ok: false, stage: 'readback', failure: revisionError('ReadbackMismatch', `live maps differ after apply: ${done.left.slice(0, 5).map(describeOp).join('; ')}`) };
      }
      return { ok: true, plan: done.ops, report: done.report, after: { live: done.live } };
    });
    if (!applied.ok) return this.fail(head, applied.stage, applied.failure, model);
    const { plan, report } = applied;
    let after = applied.after;

    // The health gate waits for checks to settle (seconds): outside the lock, so health keeps re-rendering.
    if (this.s.o.postApplyGate && !adopting) {
      let gate;
      try {
        gate = await this.s.o.postApplyGate({ revision: head, before: this.s.appliedDesired, beforeModel: this.s.appliedModel, after: desired, model });
      } catch (err) {
        gate = { pass: false, reason: `gate error: ${errorText(err)}` };
      }
      if (!gate.pass) {
        await this.s.dpLock.run(() => this.restoreLastGoodLocked());
        return this.fail(head, 'health', revisionError('HealthGateFailed', gate.reason), model);
      }
      // Health may have changed while the gate waited: the kernel holds the latest render of this revision.
      await this.s.dpLock.run(async () => {
        desired = renderDesiredState(model, node, this.s.o.health?.());
        const done = await this.s.convergeTo(model, desired);
        if (done.ops.length) this.s.countReport(done.report);
        after = { live: done.live };
      });
    }

    const changed = head !== this.s.applied || report.mapWrites + report.mapDeletes + report.ringSwitches > 0;
    this.s.adopting = false;
    this.failed.delete(head);
    if (head !== this.s.applied || !this.s.appliedAt) this.s.appliedAt = this.s.clock().toISOString();
    this.s.applied = head;
    this.s.appliedModel = model;
    this.s.liveModel = model;
    this.s.appliedDesired = desired;
    this.s.appliedCommit = appliedCommit;
    this.s.warnings = warnings;
    this.s.notifyApplied(model);
    if (changed) this.s.counters.applies++;
    this.s.servicesFrom(after.live, desired);
    const result: AttemptResult = changed ? 'applied' : 'unchanged';
    this.s.lastAttempt = this.s.attempt(head, result);
    this.s.conditions.succeeded(head);
    for (const w of warnings) this.s.log.warn(w);
    this.s.log.info(
      `${result} ${head.slice(0, 12)} (${trigger}${adopting && this.s.o.lastVerified ? `, adopted pinned state of ${this.s.o.lastVerified.revision.slice(0, 12)}` : ''}): ` +
        `${report.mapWrites} map writes, ${report.mapDeletes} deletes, ${report.ringSwitches} ring switches ` +
        `(${desired.services.length} services, ${desired.reals.length} reals, ${desired.vips.length} listeners)`,
      { revision: head, stage: 'apply', result, trigger, mapWrites: report.mapWrites, mapDeletes: report.mapDeletes,
        ringSwitches: report.ringSwitches, services: desired.services.length, reals: desired.reals.length, listeners: desired.vips.length,
        ...(changed ? { durationMs: Object.values(this.timings).reduce((a, b) => a + b, 0) } : {}) },
    );
    this.s.publish(adopting ? `start (${trigger})` : trigger);
    return changed
      ? { kind: 'applied', revision: head, report, plan, warnings, timings: { ...this.timings }, seenAt: this.headSeen?.revision === head ? this.headSeen.at : this.s.clock().getTime() }
      : { kind: 'unchanged', revision: head, report };
  }

  /**
   * Re-applies the last good revision after a post-apply problem (read-back mismatch, health gate), rendered with
   * the health observed now. Caller holds the data-plane lock.
   */
  private async restoreLastGoodLocked(): Promise<void> {
    if (!this.s.appliedModel || !this.s.appliedDesired) return;
    this.s.liveModel = this.s.appliedModel;
    try {
      const desired = renderDesiredState(this.s.appliedModel, this.s.o.node, this.s.o.health?.());
      this.s.countReport((await this.s.convergeTo(this.s.appliedModel, desired)).report);
      this.s.appliedDesired = desired;
    } catch (err) {
      this.s.log.warn(`restoring last good revision failed: ${errorText(err)}`);
    }
    // The health checker follows the config in the kernel again (the gate had installed the candidate's checks).
    this.s.notifyApplied(this.s.appliedModel);
  }

  /**
   * The config no longer names this node: tear its data plane down and write a final status; never a revert
   * (decommission/decommission.ts).
   */
  private async decommission(head: string, model: ConfigModel): Promise<Outcome> {
    if (await decommission(this.s, head, model)) {
      this.failed.clear();
      this.s.publish('decommissioned');
    }
    return { kind: 'decommissioned', revision: head };
  }

  /** Records a failed revision; retry, stall and revert follow the failure's code (src/errors.ts), not its text. */
  private async fail(head: string, stage: FailureStage, failure: RevisionError, model: ConfigModel | null): Promise<Outcome> {
    const { code, message: reason } = failure;
    this.s.counters.failures++;
    const prior = this.failed.get(head);
    const attempts = (prior?.attempts ?? 0) + 1;
    const retryable = reactionTo(code).retry;
    const delay = Math.min(this.s.retry.maxMs, this.s.retry.baseMs * 2 ** (attempts - 1));
    this.failed.set(head, {
      stage,
      reason,
      retryable,
      attempts,
      retryAt: retryable ? this.s.clock().getTime() + delay : Infinity,
      code,
    });
    this.s.lastAttempt = this.s.lastFailure = this.s.attempt(head, 'failed', stage, reason);
    this.s.log.warn(`revision ${head.slice(0, 12)} failed at ${stage}: ${reason}${retryable ? ` (retry in ${delay} ms)` : ''}`,
      { revision: head, stage, reason, code, ...(retryable ? { retryMs: delay } : {}) });

    // The revert first: it is what brings the fleet back; the status write can follow.
    this.s.conditions.revisionFailed(head, this.failed.get(head)!);

    // Only a revision whose own content is bad is reverted, and only by lb nodes (revert/auto-revert.ts).
    let rollback: RevertOutcome | undefined;
    if (shouldAutoRevert(this.s, code, model)) rollback = await autoRevert(this.s, head, stage, reason);
    this.s.publish(`failed at ${stage}`);
    return rollback ? { kind: 'failed', revision: head, stage, reason, code, rollback } : { kind: 'failed', revision: head, stage, reason, code };
  }
}
