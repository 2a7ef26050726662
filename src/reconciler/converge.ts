// converge: the one place where desired meets live, and the planner's only runtime caller.
//
//   read live --> plan (table resizes + map ops, one function) --> validate --> execute --> read back --> report
//                                                                                (same planner: empty = converged)
//
// `diff` is its read-only half (read live, plan, validate): `gitlb plan --live` and the drift check use it. The data
// plane adapters (src/bpf/dataplane/index.ts, memory.ts, src/bpf/backend/index.ts) only read and execute; every
// loop of the reconciler (revision, health, drift, restore) reaches the kernel through here. docs/reconciler.md.
import type { Op } from '../render/ops.js';
import { planOps } from '../render/ops-plan.js';
import type { DesiredState } from '../render/state.js';
import { planResizes } from '../bpf/dataplane/resize.js';
import { validateFor } from '../bpf/dataplane/validate.js';
import type { ApplyReport, DataPlane, ExecuteOptions, LiveSource, LiveState, ReadLiveOptions } from '../bpf/dataplane/types.js';

/** What a read-only comparison found: the ops that would take `live` to the desired state (none: they agree). */
export interface Diff {
  ops: Op[];
  live: LiveState;
}

/** What a converge did: the ops it executed, the data plane's report, and the read-back (`left` empty: converged). */
export interface Converged {
  ops: Op[];
  report: ApplyReport;
  /** The live state after the execute (the one planned from when nothing was to do). */
  live: LiveState;
  /** What the read-back still finds to do: empty when the data plane holds the desired state. */
  left: Op[];
}

export type ConvergeStage = 'plan' | 'apply' | 'readback';

export interface ConvergeOptions {
  /** Called when a stage ends (the reconciler times its stages with it). */
  onStage?(stage: ConvergeStage): void;
  /** Called with the plan before it is executed (a long one is announced). */
  onPlanned?(ops: Op[]): void;
  onProgress?: ExecuteOptions['onProgress'];
}

/**
 * The one planner: the table resizes a data plane of `sizes` needs for `desired` (they run before every other op:
 * resize.ts), then the map ops (src/render/ops-plan.ts). Pure.
 */
export function planDataPlane(live: LiveState, sizes: Readonly<Record<string, number>>, desired: DesiredState,
  capacity?: LiveSource['capacity']): Op[] {
  const ops = planOps(live, desired, capacity);
  const resizes = planResizes(sizes, desired);
  return resizes.length ? [...resizes, ...ops] : ops;
}

/** Services whose ring a plan writes: only their ring contents are validated (not 10 M unchanged entries). */
function filledRings(ops: readonly Op[]): Set<number> {
  return new Set(ops.flatMap((o) => (o.op === 'ring.fill' ? [o.serviceId] : [])));
}

function sameSizes(a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}

/**
 * Plans and converges one node's data plane. Keeps the last plan: the lb data plane hands back the very same
 * (frozen) LiveState object while no map changed, and the planner is pure, so the same live state, table sizes and
 * desired state plan the same: an idle node's drift check does not plan again (LiveMemo, src/bpf/dataplane).
 */
export class Converger {
  /** Planner calls by purpose (memo hits not counted) and full validations of a desired state. */
  readonly stats = { plans: 0, readbacks: 0, diffs: 0, validations: 0 };
  private last: { live: LiveState; sizes: Readonly<Record<string, number>>; desired: DesiredState; ops: Op[] } | null = null;

  /**
   * The ops that take `source` to `desired`, from its live state now; nothing is written. Throws DataPlaneRefused
   * (src/errors.ts) when the data plane cannot hold `desired`, or CapacityExceeded (PlanCapacityError) when no order
   * of ops fits its maps.
   */
  async diff(source: LiveSource, desired: DesiredState, opts: ReadLiveOptions = {}): Promise<Diff> {
    const live = await source.readLive(opts);
    return { ops: this.plan(source, live, desired, 'diffs'), live };
  }

  /**
   * Takes `dp` to `desired`: read live, plan, validate, execute, read back. A failing execute is undone by the data
   * plane (the previous state stays intact) and its error is thrown; so are validation and capacity errors, before
   * anything is written. An empty plan is still executed (it writes nothing, but a fresh or adopted data plane loads
   * and attaches there) and needs no read-back.
   */
  async converge(dp: DataPlane, desired: DesiredState, opts: ConvergeOptions = {}): Promise<Converged> {
    const live = await dp.readLive();
    const ops = this.plan(dp, live, desired, 'plans');
    opts.onStage?.('plan');
    opts.onPlanned?.(ops);
    const report = await dp.execute(ops, { desired, ...(opts.onProgress && { onProgress: opts.onProgress }) });
    opts.onStage?.('apply');
    if (!ops.length) {
      opts.onStage?.('readback');
      return { ops, report, live, left: [] };
    }
    const after = await dp.readLive();
    const left = this.plan(dp, after, desired, 'readbacks');
    opts.onStage?.('readback');
    return { ops, report, live: after, left };
  }

  /** One planner call (or the memo of the last one); validates `desired` once, for the rings the plan writes. */
  private plan(source: LiveSource, live: LiveState, desired: DesiredState, why: 'plans' | 'readbacks' | 'diffs'): Op[] {
    const sizes = source.tableSizes();
    const m = this.last;
    if (m && m.live === live && m.desired === desired && sameSizes(m.sizes, sizes)) return m.ops;
    this.stats[why]++;
    // A read-back plans against the state just written for a desired state validated by the plan before it.
    const validate = why !== 'readbacks' && source.target ? source.target : null;
    let ops: Op[];
    try {
      ops = planDataPlane(live, sizes, desired, source.capacity);
    } catch (err) {
      // a desired state the data plane cannot hold may confuse the planner: the validator names the field instead
      if (validate) validateFor(validate, desired);
      throw err;
    }
    if (validate) {
      this.stats.validations++;
      validateFor(validate, desired, filledRings(ops));
    }
    this.last = { live, sizes, desired, ops };
    return ops;
  }
}

/** diff with no memo (one-shot callers: `gitlb plan --live`, tests). */
export function diff(source: LiveSource, desired: DesiredState, opts?: ReadLiveOptions): Promise<Diff> {
  return new Converger().diff(source, desired, opts);
}

/** converge with no memo (one-shot callers: tests, benchmarks, lab runners). */
export function converge(dp: DataPlane, desired: DesiredState, opts?: ConvergeOptions): Promise<Converged> {
  return new Converger().converge(dp, desired, opts);
}
