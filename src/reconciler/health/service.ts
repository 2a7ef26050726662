// The lb daemon's health component: one HealthChecker, the agreement decision, the status fragment and the
// post-apply gate, behind the hooks the daemon already has (DaemonOptions.health / postApplyGate). Wiring:
//
//   const health = new HealthService({ node, peers: () => feed.current() });   // authenticated votes (peer-exchange.ts)
//   health.onChange(() => daemon.trigger('health change'));     // re-render when a real flips
//   startDaemon({ ..., health: () => health.view(), postApplyGate: health.postApplyGate({ maxCapacityLossShare: 0.5 }) });
//   on every new valid revision: health.update(model);          // (the gate does it too, before judging)
//   status/<node>.yaml: { ..., health: health.status() }
import type { ConfigModel } from '../../render/model.js';
import type { DesiredState } from '../../render/state.js';
import { renderDesiredState } from '../../render/desired.js';
import { localDownSet, type HealthView, type NodeObservations } from '../../render/health-quorum.js';
import { decideHealth, agreementMode, type HealthDecision } from './agreement.js';
import { HealthChecker, type HealthChange, type VipProbeRouter } from './checker.js';
import { healthGate, type GateResult, type GateState } from './gate.js';
import { healthStatus, type HealthStatus } from './status.js';
import { checkTargets, targetKey } from './targets.js';
import { checkFingerprint } from './checker.js';
import type { RealHealth } from './hysteresis.js';
import { probation } from './probation.js';
import type { HealthPeerReport } from './peer-wiring.js';

export interface HealthServiceOptions {
  node: string;
  /** Peers' votes (authenticated, over the peer channel: peer-exchange.ts); only read in consensus mode. */
  peers?: () => NodeObservations[];
  /** How peer votes are authenticated and what was refused: status health.peers (peer-wiring.ts). */
  peerReport?: () => HealthPeerReport | null;
  maxInFlight?: number;
  /** Steers via: vip probes (the lb node's VipProbePath); without one they fail. */
  vipRouter?: VipProbeRouter;
  clock?: () => number;
  log?: { warn(msg: string): void };
}

/** Same shape as state/node-state.ts's PostApplyGate (declared structurally so health does not import the reconciler). */
export type HealthPostApplyGate = (ctx: { revision: string; before: DesiredState | null; beforeModel?: ConfigModel | null; after: DesiredState; model: ConfigModel })
  => Promise<{ pass: boolean; reason: string }>;

/** Same shape as state/node-state.ts's PreApplyGate: pass=false fails the revision at `health` before anything is applied. */
export type HealthPreApplyGate = (ctx: { revision: string; beforeModel: ConfigModel | null; model: ConfigModel })
  => Promise<{ pass: boolean; reason: string; health?: HealthView }>;

export class HealthService {
  readonly checker: HealthChecker;
  private model: ConfigModel | null = null;
  /** Probation results of the revision being applied; the checker starts those checks from them (update()). */
  private seeds = new Map<string, { fingerprint: string; health: RealHealth }>();
  private readonly clock: () => number;
  private lastFailOpen = '';

  constructor(private readonly o: HealthServiceOptions) {
    this.checker = new HealthChecker({ maxInFlight: o.maxInFlight, vipRouter: o.vipRouter });
    this.clock = o.clock ?? Date.now;
  }

  /** Installs the checks of a revision and starts checking (idempotent; unchanged checks keep their state). */
  update(model: ConfigModel): void {
    this.model = model;
    this.checker.update(model, this.seeds);
    this.seeds = new Map();
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
    const peers = this.o.peerReport?.() ?? undefined;
    return { ...healthStatus({ now: this.clock(), mode: d.mode, observations: this.checker.observations(),
      snapshot: this.checker.snapshot(), failOpen: d.failOpen, failClosed: d.failClosed }), ...(peers && { peers }) };
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

  /**
   * The pre-apply gate (make-before-break for health): every check the new revision adds or changes (a new real,
   * a new address, port or target port, a new check) is probed before the revision is applied, `rise` successes
   * in a row admitting the real, `fall` failures in a row (or the deadline) refusing it. The revision fails at
   * `health` when the refused reals would cost a service more than `maxCapacityLossShare` of its healthy table
   * share (the same share comparison as the post-apply gate); nothing has been applied then, so the last good
   * state keeps serving. Otherwise render gets a view in which refused reals are unhealthy (no table entries) and
   * the checker later starts those checks from the probation result, so they earn entries only by `rise` successes.
   */
  preApplyGate(opts: { maxCapacityLossShare: number; deadlineMs?: number }): HealthPreApplyGate {
    return async ({ beforeModel, model }) => {
      if (!beforeModel) return { pass: true, reason: 'first revision on this node: nothing to protect' };
      const untried = this.checker.untried(model);
      if (untried.length === 0) return { pass: true, reason: 'no new or changed checks' };
      const results = await probation(untried, { deadlineMs: opts.deadlineMs ?? probationDeadlineMs(untried), probe: this.checker.probationProbe(untried) });
      const verdict = new Map(results.map((r) => [r.target.key, r.health.state === 'up']));
      const downBefore = localDownSet(this.checker.observations());
      const downAfter: Record<string, string[]> = {};
      for (const [svc, addrs] of Object.entries(downBefore)) downAfter[svc] = addrs.filter((a) => !verdict.has(targetKey(svc, a)));
      for (const r of results) if (!verdict.get(r.target.key)) (downAfter[r.target.service] ??= []).push(r.target.address);
      const gate = healthGate(observedTable(beforeModel, this.o.node, downBefore), observedTable(model, this.o.node, downAfter), opts.maxCapacityLossShare);
      const refused = results.filter((r) => !verdict.get(r.target.key));
      const refusedText = refused.map((r) => `${r.target.service}/${r.target.address}:${r.target.probe.port} ` +
        `(${r.health.last?.detail ?? 'no result before the deadline'}, ${r.checks} checks)`).join(', ');
      if (!gate.pass) return { pass: false, reason: `new or changed reals not healthy before traffic: ${refusedText}; ${gate.reason}` };
      for (const r of results) this.seeds.set(r.target.key, { fingerprint: checkFingerprint(r.target), health: r.health });
      const base = this.view();
      return {
        pass: true,
        reason: refused.length ? `admitted without ${refusedText}; ${gate.reason}` : `${results.length} new or changed checks passed`,
        health: { isHealthy: (svc, addr) => verdict.get(targetKey(svc, addr)) ?? base?.isHealthy(svc, addr) ?? true },
      };
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

/** Long enough for the slowest probation to finish: max(rise, fall) probes, each up to interval/timeout, plus one. */
function probationDeadlineMs(targets: readonly { rise: number; fall: number; intervalMs: number; probe: { timeoutMs: number } }[]): number {
  let worst = 0;
  for (const t of targets) worst = Math.max(worst, (Math.max(t.rise, t.fall) + 1) * Math.max(t.intervalMs, t.probe.timeoutMs));
  return worst;
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
