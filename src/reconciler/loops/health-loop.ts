// The health loop: local, never blocked by the revision loop or any Git call. It receives the health checker's
// HealthChange events (and full refreshes: peers' observations changed, a flip before the daemon started), coalesces
// bursts on a runner of its own, and hands the re-render the services the events named, so only those are rendered
// again (rerenderServices, src/render/desired.ts) before converge (src/reconciler/converge.ts) applies the difference.
// The re-render itself is rerenderHealth below: it shares the data-plane lock with the revision loop's apply
// sections and nothing else. docs/reconciler.md, "Health path".
import type { ApplyReport } from '../../bpf/dataplane/index.js';
import { renderDesiredState, rerenderServices } from '../../render/desired.js';
import { describeOp } from '../../render/ops-text.js';
import type { HealthChange } from '../health/checker.js';
import type { NodeState } from '../state/node-state.js';
import { SerialRunner } from '../triggers/serial-runner.js';

export interface HealthLoopOptions {
  /** Re-renders the served revision under the current health view and converges: the services named, or all (null). */
  rerender(why: string, services: ReadonlySet<string> | null): Promise<unknown>;
  log: { warn(msg: string, fields?: Record<string, unknown>): void };
}

/** How a HealthChange reads in logs and as the re-render's reason. */
export function describeHealthChange(e: HealthChange): string {
  return `${e.service}/${e.address} ${e.from} -> ${e.to}`;
}

export class HealthLoop {
  /** Services named by events since the last run took them. */
  private pending = new Set<string>();
  /** A refresh of everything was asked for (or a run failed: what it took is re-rendered whole next time). */
  private everything = false;
  private readonly runner: SerialRunner;

  constructor(private readonly o: HealthLoopOptions) {
    this.runner = new SerialRunner({ refresh: (why) => this.run(why) },
      (kind, err) => o.log.warn(`health ${kind} failed: ${(err as Error).message}`));
  }

  /** A real changed state: its service is rendered again. */
  changed(e: HealthChange): void {
    this.pending.add(e.service);
    this.runner.trigger('refresh', describeHealthChange(e));
  }

  /** Everything is rendered again (the view changed in a way no event names: peers' observations, a start). */
  refresh(why: string): void {
    this.everything = true;
    this.runner.trigger('refresh', why);
  }

  private async run(why: string): Promise<void> {
    const services = this.everything ? null : this.pending;
    this.pending = new Set();
    this.everything = false;
    try {
      await this.o.rerender(why, services);
    } catch (err) {
      this.everything = true; // the next run may not build on what this one left
      throw err;
    }
  }

  /** Resolves when no re-render is running or queued. */
  idle(): Promise<void> {
    return this.runner.idle();
  }

  stop(): void {
    this.runner.stop();
  }
}

/**
 * Re-renders the config in the kernel with the current health view (the health path calls this when a real
 * changes state) and applies the result if it differs. Holds only the data-plane lock: it never waits for a
 * fetch, a status push or a peer read. Returns the apply report, or null when there was nothing to do.
 * `services`: only these changed health since the last converge (the health loop's HealthChange events), so only
 * they are rendered again, on top of what the kernel holds; null renders everything.
 */
export async function rerenderHealth(s: NodeState, why: string, services: ReadonlySet<string> | null): Promise<ApplyReport | null> {
  const report = await s.dpLock.run(async () => {
    const model = s.liveModel ?? s.appliedModel;
    if (!model || !s.appliedDesired || s.decommissioned) return undefined;
    const base = services && s.kernel?.model === model ? s.kernel.desired : null;
    const desired = base ? rerenderServices(model, base, s.o.health?.(), services!) : renderDesiredState(model, s.o.node, s.o.health?.());
    // one converge: planned once, validated once, read back only when something was written
    const done = await s.convergeTo(model, desired);
    const candidate = model !== s.appliedModel; // a revision under its health gate: it records its own state
    if (!done.ops.length) {
      if (!candidate) {
        s.appliedDesired = desired; // real health flags may change without any ring change
        s.servicesFrom(done.live, desired);
      }
      return null;
    }
    const r = done.report;
    s.countReport(r);
    if (!candidate) {
      s.appliedDesired = desired;
      s.servicesFrom(done.live, desired);
    }
    if (done.left.length)
      s.log.warn(`re-render of ${candidate ? 'candidate' : s.applied?.slice(0, 12)} (${why}) left ${done.left.length} differences: ${done.left.slice(0, 3).map(describeOp).join('; ')}`,
        { stage: 'health', reason: why, left: done.left.length });
    s.log.info(`re-rendered ${candidate ? 'candidate' : s.applied?.slice(0, 12)} (${why}): ${r.mapWrites} map writes`,
      { stage: 'health', reason: why, mapWrites: r.mapWrites, mapDeletes: r.mapDeletes, ringSwitches: r.ringSwitches });
    return r;
  });
  // Publish even without a ring change: in consensus mode peers vote with what this node observes.
  if (report !== undefined) s.publish(why);
  return report ?? null;
}
