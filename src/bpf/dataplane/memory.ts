// A data plane that holds its LiveState in memory: the reconciler's unit tier runs against it without root, BPF
// or network namespaces (docs/reconciler.md, "Test tiers"). converge plans against it with the one planner and it
// executes with the one simulation of what ops do (applyOps), so it cannot disagree with `gitlb plan --live` or the
// planner's tests. Like the kernel executors, execute() is all or nothing: a failing op leaves the previous
// state intact and the error is thrown with its errno in `code`. A fault hook fails a chosen op so tests can
// reach the apply-failure, undo and retry paths the kernel only shows under pressure (E2BIG, ENOMEM, ...).
import { EMPTY_LIVE, type LiveState, type Op, type OpKind } from '../../render/ops.js';
import { LB_MAP_CAPACITY, type LbCapacity } from '../../render/ops-plan.js';
import { applyOps } from '../../render/ops-apply.js';
import { EMPTY_REPORT, type ApplyReport, type DataPlane, type DataPlaneTarget, type ExecuteOptions, type ReadLiveOptions } from './types.js';

/** Fails the `nth` op (1-based; counting only ops of `kind` when given) of each of the next `times` executes. */
export interface Fault {
  nth: number;
  errno: string;
  kind?: OpKind;
  /** How many executes fail (default 1); Infinity until clearFault(). */
  times?: number;
}

/** How each op counts in an ApplyReport: one map entry written or deleted per op, rings by their entries. */
function count(report: ApplyReport, o: Op): void {
  report.ops++;
  switch (o.op) {
    case 'ring.fill':
      report.mapWrites++;
      report.changedRingEntries += o.tableSize;
      break;
    case 'service.switch':
      report.mapWrites++;
      report.ringSwitches++;
      break;
    case 'vip.delete': case 'marker.delete': case 'service.delete': case 'real.delete': case 'source-range.delete':
    case 'backend-vip.delete': case 'backend-tunnel.delete':
      report.mapDeletes++;
      break;
    default:
      report.mapWrites++;
  }
}

const withoutRings = (live: LiveState): LiveState => ({
  ...live,
  services: live.services.map(({ ring: _ring, ...s }) => s),
});

export class MemoryDataPlane implements DataPlane {
  private live: LiveState;
  private fault: (Fault & { left: number }) | null = null;
  private closed = false;
  /** Every execute of a non-empty op list that ran to the end (tests assert what a reconcile wrote, or that it
   * wrote nothing: an empty execute, converge's "nothing to do", is not recorded). */
  readonly executed: Op[][] = [];
  /** Executes that failed (injected faults or invalid op sequences); their ops were undone. */
  failures = 0;
  /** What converge validates desired states against (validate.ts); unset: only the planner's own checks. */
  target?: DataPlaneTarget;

  /** `capacity`: the map sizes it plans within (default: the kernel data plane's, lb_consts.h). */
  constructor(initial: LiveState = EMPTY_LIVE, readonly capacity: LbCapacity = LB_MAP_CAPACITY) {
    this.live = initial;
  }

  /** Arms a fault for the next execute(s). */
  injectFault(f: Fault): void {
    if (!Number.isInteger(f.nth) || f.nth < 1) throw new Error(`fault: nth must be an integer >= 1, got ${f.nth}`);
    this.fault = { ...f, left: f.times ?? 1 };
  }

  clearFault(): void {
    this.fault = null;
  }

  /** Changes the state behind the reconciler's back (another writer, drift): runs `ops` outside execute(). */
  tamper(ops: Op[]): void {
    this.live = applyOps(this.live, ops);
  }

  /** Reopens after close() on the same state (what reopening the pins does for a kernel data plane). */
  reopen(): this {
    this.closed = false;
    return this;
  }

  /** Forgets everything (what a teardown does to the pins). */
  reset(): void {
    this.live = EMPTY_LIVE;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private open(): void {
    if (this.closed) throw Object.assign(new Error('memory data plane: used after close()'), { code: 'EBADF' });
  }

  async readLive(opts: ReadLiveOptions = {}): Promise<LiveState> {
    this.open();
    return structuredClone(opts.tables ? this.live : withoutRings(this.live));
  }

  /** No table here is sized by the desired state. */
  tableSizes(): Record<string, number> {
    this.open();
    return {};
  }

  async execute(ops: Op[], opts: ExecuteOptions = {}): Promise<ApplyReport> {
    this.open();
    const report: ApplyReport = { ...EMPTY_REPORT };
    const fault = this.firingFault(ops);
    // Nothing is written until every op succeeded: the previous state is the undo (applyOps is pure). The ops
    // before the failing one still run, so a sequence the kernel would refuse (a switch without its fill) throws.
    let next: LiveState;
    try {
      next = applyOps(this.live, fault ? ops.slice(0, fault.index) : ops);
    } catch (err) {
      this.failures++;
      throw err;
    }
    if (fault) {
      this.failures++;
      const o = ops[fault.index]!;
      throw Object.assign(new Error(`${o.op} (op ${fault.index + 1} of ${ops.length}) failed: ${fault.errno} (injected)`), { code: fault.errno });
    }
    for (const o of ops) count(report, o);
    this.live = next;
    if (ops.length) this.executed.push(ops);
    opts.onProgress?.(ops.length, ops.length, report);
    return report;
  }

  /** The op the armed fault fails in `ops` (and its errno), or null; consumes one of the fault's executes. */
  private firingFault(ops: Op[]): { index: number; errno: string } | null {
    const f = this.fault;
    if (!f) return null;
    let seen = 0;
    const index = ops.findIndex((o) => (!f.kind || o.op === f.kind) && ++seen === f.nth);
    if (index === -1) return null;
    if (--f.left <= 0) this.fault = null;
    return { index, errno: f.errno };
  }

  async counters(): Promise<Record<string, number>> {
    return { executes: this.executed.length, failures: this.failures };
  }

  close(): void {
    this.closed = true;
  }
}
