// The lb daemon's health component: one HealthChecker, the agreement decision, the status fragment and the
// post-apply gate, behind the hooks the daemon already has (DaemonOptions.health / postApplyGate). Wiring:
//
//   const health = new HealthService({ node, peers: () => peersFromStatusBranch() });
//   health.onChange(() => daemon.trigger('health change'));     // re-render when a real flips
//   startDaemon({ ..., health: () => health.view(), postApplyGate: health.postApplyGate({ maxCapacityLossShare: 0.5 }) });
//   on every new valid revision: health.update(model);          // (the gate does it too, before judging)
//   status/<node>.yaml: { ..., health: health.status() }
import type { ConfigModel } from '../../render/model.js';
import type { DesiredState } from '../../render/state.js';
import { renderDesiredState } from '../../render/desired.js';
import { localDownSet, type HealthView, type NodeObservations } from '../../render/health-quorum.js';
import { decideHealth, agreementMode, type HealthDecision } from './agreement.js';
import { HealthChecker, type HealthChange } from './checker.js';
import { healthGate, type GateResult, type GateState } from './gate.js';
import { healthStatus, type HealthStatus } from './status.js';
import { checkTargets } from './targets.js';

export interface HealthServiceOptions {
  node: string;
  /** Peers' published observations (from the status branch); only read in consensus mode. */
  peers?: () => NodeObservations[];
  maxInFlight?: number;
  clock?: () => number;
  log?: { warn(msg: string): void };
}

/** Same shape as reconcile.ts's PostApplyGate (declared structurally so health does not import the reconciler). */
export type HealthPostApplyGate = (ctx: { revision: string; before: DesiredState | null; beforeModel?: ConfigModel | null; after: DesiredState; model: ConfigModel })
  => Promise<{ pass: boolean; reason: string }>;

export class HealthService {
  readonly checker: HealthChecker;
  private model: ConfigModel | null = null;
  private readonly clock: () => number;
  private lastFailOpen = '';

  constructor(private readonly o: HealthServiceOptions) {
    this.checker = new HealthChecker({ maxInFlight: o.maxInFlight });
    this.clock = o.clock ?? Date.now;
  }

  /** Installs the checks of a revision and starts checking (idempotent; unchanged checks keep their state). */
  update(model: ConfigModel): void {
    this.model = model;
    this.checker.update(model);
    this.checker.start();
  }

  onChange(listener: (e: HealthChange) => void): () => void {
    return this.checker.onChange(listener);
  }

  /** The decision for the current model, by the cluster's agreement mode. */
  decide(): HealthDecision | null {
    if (!this.model) return null;
    const d = decideHealth({
      model: this.model,
      node: this.o.node,
      local: this.checker.observations(),
      peers: agreementMode(this.model).mode === 'consensus' ? (this.o.peers?.() ?? []) : [],
      now: this.clock(),
    });
    const failOpen = d.failOpen.join(',');
    if (failOpen && failOpen !== this.lastFailOpen) {
      this.o.log?.warn(`health: every real of ${d.failOpen.join(', ')} is down; failing OPEN (keeping them all in the table)`);
    }
    this.lastFailOpen = failOpen;
    return d;
  }

  /** What render gets (DaemonOptions.health). Before the first update(), every real is healthy. */
  view(): HealthView | undefined {
    return this.decide()?.view;
  }

  /** The `health` mapping of status/<node>.yaml. */
  status(): HealthStatus | null {
    const d = this.decide();
    if (!d) return null;
    return healthStatus({ now: this.clock(), mode: d.mode, observations: this.checker.observations(),
      snapshot: this.checker.snapshot(), failOpen: d.failOpen, failClosed: d.failClosed });
  }

  /** Resolves once no check of `model` is still `unknown`, or after `timeoutMs`. */
  async settled(model: ConfigModel, timeoutMs: number): Promise<boolean> {
    const targets = checkTargets(model);
    const deadline = this.clock() + timeoutMs;
    for (;;) {
      if (targets.every((t) => this.checker.state(t.service, t.address)?.state !== 'unknown')) return true;
      if (this.clock() >= deadline) return false;
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /**
   * The post-apply gate: checks the new revision's reals (new checks start `unknown`), waits until they settle
   * (bounded by the slowest service's fall x interval + timeout, plus the first-check spread), and compares, per
   * service, the share of the table on reals observed healthy: the previous revision's table with the health
   * observed before, against the new revision's table with the health observed now. Local observations are used
   * even in consensus mode: peers have not checked the new revision's reals yet.
   */
  postApplyGate(opts: { maxCapacityLossShare: number; settleTimeoutMs?: number }): HealthPostApplyGate {
    return async ({ beforeModel, model }) => {
      const previous = beforeModel ?? this.model;
      const downBefore = localDownSet(this.checker.observations());
      this.update(model);
      const judged = await this.judge(previous, downBefore, model, opts.maxCapacityLossShare, opts.settleTimeoutMs);
      return { pass: judged.pass, reason: judged.reason };
    };
  }

  async judge(beforeModel: ConfigModel | null, downBefore: Record<string, string[]>, model: ConfigModel, maxLossShare: number, settleTimeoutMs?: number): Promise<GateResult> {
    const settleMs = settleTimeoutMs ?? worstSettleMs(model);
    const settled = await this.settled(model, settleMs);
    if (!beforeModel) return { pass: true, reason: 'first revision on this node: nothing to compare', services: [] };
    // Raw observations, without the fail-open rescue: a revision that breaks every real must fail the gate
    // even though fail-open would keep those reals in the table.
    const downAfter = localDownSet(this.checker.observations());
    const r = healthGate(observedTable(beforeModel, this.o.node, downBefore), observedTable(model, this.o.node, downAfter), maxLossShare);
    return settled ? r : { ...r, reason: `${r.reason} (some checks still unknown after ${settleMs} ms, counted healthy)` };
  }
}

/** The table a config asks for (every real healthy), each real marked with the health observed for it. */
function observedTable(model: ConfigModel, node: string, down: Record<string, string[]>): GateState {
  const intended = renderDesiredState(model, node);
  return {
    services: intended.services.map((s) => ({
      name: s.name,
      tableSize: s.tableSize,
      reals: s.reals.map((r) => ({ address: r.address, entries: r.entries, healthy: r.state === 'active' && !(down[s.name]?.includes(r.address) ?? false) })),
    })),
  };
}

/** Long enough for the slowest check to reach `down`: spread of the first check + fall probes, each up to interval/timeout. */
function worstSettleMs(model: ConfigModel): number {
  let worst = 0;
  for (const s of model.services) {
    const hc = s.spec.healthCheck;
    if (hc.type === 'none') continue;
    worst = Math.max(worst, Math.min(hc.intervalMs, 1000) + hc.fall * Math.max(hc.intervalMs, hc.timeoutMs) + hc.timeoutMs);
  }
  return worst;
}
