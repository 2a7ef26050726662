// The contract between the reconciler and a node's data plane (lb: XDP, ./index.ts; backend: TC,
// ../backend/index.ts; in memory for the reconciler's unit tier, ./memory.ts). An adapter reads what it holds (a
// LiveState and its table sizes) and executes ops with undo; it does not plan. Planning is converge's job
// (src/reconciler/converge.ts: the one place where desired meets live, the planner's only runtime caller).
import type { DesiredState } from '../../render/state.js';
import type { LiveState, Op } from '../../render/ops.js';
import type { LbCapacity } from '../../render/ops-plan.js';
import type { BpfMap } from '../libbpf.js';
import type { XdpForwarding } from '../xdp-forwarding.js';

export type { LiveState, Op } from '../../render/ops.js';

export interface ApplyReport {
  /** Ops executed. */
  ops: number;
  mapWrites: number;
  mapDeletes: number;
  /** Services pointed at a new ring (one map update each). */
  ringSwitches: number;
  /** Ring entries written into new rings. */
  changedRingEntries: number;
}

export const EMPTY_REPORT: ApplyReport = { ops: 0, mapWrites: 0, mapDeletes: 0, ringSwitches: 0, changedRingEntries: 0 };

export interface ReadLiveOptions {
  /** Include each service's ring (Uint32Array) in the result; reads every ring. */
  tables?: boolean;
  /** Re-read every ring and recompute its digest instead of trusting the per-map digest cache. */
  verify?: boolean;
  /**
   * A drift check's turn in the slow rotation over ring contents: also re-read the rings of the services whose
   * id is congruent to `verifyTurn` modulo RING_ROTATION_CHECKS, so consecutive turns 0, 1, 2, ... re-read every
   * ring at least once every RING_ROTATION_CHECKS turns (docs/reconciler.md, "Drift").
   */
  verifyTurn?: number;
}

/** Length of the drift check's rotation over ring contents, in drift checks (an hour at the default 60 s). */
export const RING_ROTATION_CHECKS = 60;

export interface ExecuteOptions {
  /**
   * The state the ops lead to. Not planned from: an lb data plane that loads for the first time sizes its tables
   * from it (conntrack, SNAT); the backend's local VIPs follow it (src/reconciler/host/backend-vips.ts).
   */
  desired?: DesiredState;
  /** Progress of a long execute: called at most every PROGRESS_INTERVAL_MS with the ops done so far. */
  onProgress?(done: number, total: number, report: ApplyReport): void;
}

/** How often a long execute reports progress. */
export const PROGRESS_INTERVAL_MS = 2000;

/** What a desired state is checked against before it is planned into writes (src/bpf/dataplane/validate.ts). */
export interface DataPlaneTarget {
  /** The role whose desired states this data plane holds. */
  role: 'lb' | 'backend';
  /** The interface it was opened on (absent: not bound to one, not checked). */
  interface?: string;
}

/** The read-only half of a data plane: what converge's diff needs (also built from pins alone for `plan --live`). */
export interface LiveSource {
  /** What the node's maps hold. Cheap by default: rings are identified by their map, not read (see docs). */
  readLive(opts?: ReadLiveOptions): Promise<LiveState>;
  /** max_entries of the tables the desired state sizes (resize.ts, RESIZABLE_TABLES) by map name; absent: not created. */
  tableSizes(): Readonly<Record<string, number>>;
  /** What desired states are validated against (absent: only the planner's own checks). */
  readonly target?: DataPlaneTarget;
  /** Map capacities to plan within (absent: the kernel data plane's, lb_consts.h). */
  readonly capacity?: LbCapacity;
}

export interface DataPlane extends LiveSource {
  /** Runs `ops` in order; on any failure undoes what it did (the previous state stays intact) and throws. An
   * empty list writes nothing but still completes setup (first load, attach). */
  execute(ops: Op[], opts?: ExecuteOptions): Promise<ApplyReport>;
  counters(): Promise<Record<string, number | Record<string, number>>>;
  close(): void;
  /** lb data planes on an interface: how xdp_lb is attached (null until attached; absent for backends). */
  readonly forwarding?: XdpForwarding | null;
}

/** An undo log: each step registers how to revert itself; commit steps run only on success. */
export class UndoLog {
  private undo: Array<() => void> = [];
  private commits: Array<() => void> = [];

  onUndo(f: () => void): void {
    this.undo.push(f);
  }

  onCommit(f: () => void): void {
    this.commits.push(f);
  }

  /** Reverts every step, newest first; keeps going when one revert fails (restoring the rest matters more). */
  rollback(): void {
    for (const u of this.undo.reverse()) {
      try {
        u();
      } catch {
        /* keep restoring the rest */
      }
    }
    this.undo = [];
    this.commits = [];
  }

  commit(): void {
    for (const c of this.commits) c();
    this.undo = [];
    this.commits = [];
  }
}

/** Map writes that count themselves in `report` and register their own undo in `log` (a put restores or deletes
 * the previous value, a delete puts it back). Shared by the lb and backend executors. */
export function undoableMapWrites(log: UndoLog, report: ApplyReport): {
  put(map: BpfMap, key: Buffer, value: Buffer): void;
  del(map: BpfMap, key: Buffer): void;
} {
  return {
    put(map, key, value) {
      const prev = map.lookup(key);
      map.update(key, value);
      report.mapWrites++;
      log.onUndo(() => (prev ? map.update(key, prev) : map.delete(key)));
    },
    del(map, key) {
      const prev = map.lookup(key);
      if (!map.delete(key)) return;
      report.mapDeletes++;
      if (prev) log.onUndo(() => map.update(key, prev));
    },
  };
}
