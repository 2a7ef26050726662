// Control-plane metrics: what the reconciler applied (revision and per-service table digests as info metrics, so
// an alert can compare them across nodes), how reconciles ended, how long each stage took, how long a commit took
// to reach the data plane, and the reconciler's running counters. Events arrive through observe*(); the rest is
// read from the reconciler when Prometheus scrapes. Metric names and meaning: docs/metrics.md.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { NodeStatus } from '../status/status-doc.js';
import type { DesiredState } from '../../render/state.js';
import type { Outcome } from '../loops/reconciler.js';

export type ReconcileOutcome = Outcome;

export interface ControlSources {
  snapshot(): NodeStatus;
  desired(): DesiredState | null;
  /** The fetch outage in progress (epoch ms of its first failure, failed attempts), or null. */
  fetchFailing?(): { since: number; attempts: number } | null;
}

/** Seconds; reconcile stages run from milliseconds (unchanged revision) to tens of seconds (huge applies). */
const STAGE_BUCKETS = [0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const LATENCY_BUCKETS = [0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600];

/** Bounded label value for an outcome: the failing stage, or what happened. */
export function outcomeReason(out: ReconcileOutcome): string {
  switch (out.kind) {
    case 'failed': return out.stage;
    case 'waiting': return 'backoff';
    case 'applied': return 'changed';
    case 'unchanged': return 'no_change';
    case 'decommissioned': return 'decommissioned';
  }
}

/**
 * Where gitlb_commit_to_applied_seconds counts from (epoch seconds): the applied commit's committer time when it is
 * newer than the committer time of the revision applied before it (a new commit: the latency includes the push and
 * the poll), else the moment this node first fetched it as the branch head (a rollback by force-push or a reset to an
 * older commit: its committer time says nothing about this change). Also the first apply of a process, whose
 * previous commit is unknown, counts from the committer time. docs/metrics.md.
 */
export function commitLatencyStart(o: { commitTime: number; previousCommitTime: number | null; seenAtMs: number }): number {
  if (o.previousCommitTime === null || o.commitTime > o.previousCommitTime) return o.commitTime;
  return o.seenAtMs / 1000;
}

export class ControlMetrics {
  private readonly outcomes: Counter<'result' | 'reason'>;
  private readonly stages: Histogram<'stage'>;
  private readonly commitToApplied: Histogram;
  private sources: ControlSources | null = null;
  /** The config branch head the latest reconcile saw (null before one got that far). */
  private head: string | null = null;

  constructor(reg: Registry) {
    this.outcomes = new Counter({ name: 'gitlb_reconciles_total', help: 'Reconciles by result and reason (failing stage)',
      labelNames: ['result', 'reason'], registers: [reg] });
    this.stages = new Histogram({ name: 'gitlb_reconcile_stage_duration_seconds',
      help: 'Duration of each reconcile stage (fetch, ancestry, validate, render, plan, apply, readback)',
      labelNames: ['stage'], buckets: STAGE_BUCKETS, registers: [reg] });
    this.commitToApplied = new Histogram({ name: 'gitlb_commit_to_applied_seconds',
      help: 'From a commit\'s committer time (or, for a rewind to an older commit, from when this node first fetched it) to the moment this node applied it', buckets: LATENCY_BUCKETS, registers: [reg] });
    const self = this;
    const snap = () => self.sources?.snapshot() ?? null;

    new Gauge({ name: 'gitlb_applied_revision_info', help: 'The revision this node serves (value 1)',
      labelNames: ['revision', 'branch'], registers: [reg],
      collect() {
        this.reset();
        const s = snap();
        if (s?.appliedRevision) this.set({ revision: s.appliedRevision, branch: s.branch }, 1);
      } });
    new Gauge({ name: 'gitlb_branch_head_info', help: 'The config branch head the latest reconcile fetched (value 1)',
      labelNames: ['revision'], registers: [reg],
      collect() {
        this.reset();
        if (self.head) this.set({ revision: self.head }, 1);
      } });
    new Gauge({ name: 'gitlb_behind_branch', help: '1 when the served revision is not the branch head last fetched',
      registers: [reg],
      collect() {
        this.reset();
        const s = snap();
        if (s && self.head) this.set(s.appliedRevision === self.head ? 0 : 1);
      } });
    new Gauge({ name: 'gitlb_applied_timestamp_seconds', help: 'When the served revision was applied (unix time)',
      registers: [reg],
      collect() {
        this.reset();
        const at = snap()?.appliedAt;
        if (at) this.set(Date.parse(at) / 1000);
      } });
    new Gauge({ name: 'gitlb_service_table_info', help: 'Per-service Maglev table digest as read back from the kernel (value 1)',
      labelNames: ['service', 'digest', 'table_size'], registers: [reg],
      collect() {
        this.reset();
        for (const svc of snap()?.services ?? [])
          this.set({ service: svc.name, digest: svc.digest, table_size: String(svc.tableSize) }, 1);
      } });
    new Gauge({ name: 'gitlb_real_table_entries', help: 'Maglev table entries a real holds in a service (0: out of the table)',
      labelNames: ['service', 'real'], registers: [reg],
      collect() {
        this.reset();
        for (const svc of self.sources?.desired()?.services ?? [])
          for (const r of svc.reals) this.set({ service: svc.name, real: r.address }, r.entries);
      } });
    new Gauge({ name: 'gitlb_service_table_size', help: 'Maglev table size of a service', labelNames: ['service'], registers: [reg],
      collect() {
        this.reset();
        for (const svc of self.sources?.desired()?.services ?? []) this.set({ service: svc.name }, svc.tableSize);
      } });
    // status.xdp as labels: an alert on fell_back="true" (or forwards="false") finds lb nodes that run generic XDP
    // although native was asked for, also after a restart adopted that attachment (docs/datapath.md)
    new Gauge({ name: 'gitlb_xdp_attachment_info', help: 'How xdp_lb is attached (value 1): mode, mode asked for, native fell back, forwarding probe',
      labelNames: ['mode', 'requested', 'fell_back', 'forwards'], registers: [reg],
      collect() {
        this.reset();
        const x = snap()?.xdp;
        if (x) this.set({ mode: x.mode, requested: x.requested, fell_back: String(x.fellBack), forwards: x.forwards === null ? 'unknown' : String(x.forwards) }, 1);
      } });
    new Gauge({ name: 'gitlb_last_reconcile_failed', help: '1 when the latest reconcile attempt failed', registers: [reg],
      collect() {
        this.reset();
        const s = snap();
        if (s) this.set(s.lastAttempt?.result === 'failed' ? 1 : 0);
      } });
    // While a node cannot reach Git it cannot write its status either: this is where the outage shows meanwhile.
    new Gauge({ name: 'gitlb_config_fetch_failing_seconds', help: 'How long fetching the config branch has failed in a row (0 while it works)',
      registers: [reg],
      collect() {
        this.reset();
        if (!self.sources) return;
        const f = self.sources.fetchFailing?.() ?? null;
        this.set(f ? Math.max(0, (Date.now() - f.since) / 1000) : 0);
      } });
    new Gauge({ name: 'gitlb_config_fetch_failures', help: 'Failed fetches of the config branch in a row (0 while it works)',
      registers: [reg],
      collect() {
        this.reset();
        if (!self.sources) return;
        this.set(self.sources.fetchFailing?.()?.attempts ?? 0);
      } });
    const counter = (name: string, help: string, pick: (c: NodeStatus['counters']) => number) =>
      new Counter({ name, help, registers: [reg],
        collect() {
          const c = snap()?.counters;
          this.reset();
          if (c) this.inc(pick(c));
        } });
    counter('gitlb_map_writes_total', 'BPF map writes made by applies', (c) => c.mapWrites);
    counter('gitlb_map_deletes_total', 'BPF map deletes made by applies', (c) => c.mapDeletes);
    counter('gitlb_ring_switches_total', 'Atomic Maglev ring switches', (c) => c.ringSwitches);
    counter('gitlb_drift_checks_total', 'Drift checks of the kernel maps against the applied revision', (c) => c.driftChecks);
    counter('gitlb_drift_repairs_total', 'Drift checks that found and repaired a difference', (c) => c.driftRepairs);
    counter('gitlb_force_pushes_total', 'Branch heads that were not descendants of the applied revision', (c) => c.forcePushes);
    counter('gitlb_rollbacks_pushed_total', 'Automatic reverts pushed to the config branch', (c) => c.rollbacksPushed);
    counter('gitlb_status_push_retries_total', 'Status pushes retried after a race or timeout', (c) => c.statusPushRetries);
  }

  attach(sources: ControlSources): void {
    this.sources = sources;
  }

  observeReconcile(out: ReconcileOutcome): void {
    this.outcomes.inc({ result: out.kind, reason: outcomeReason(out) });
    if (out.revision) this.head = out.revision;
    if (out.kind === 'applied' && out.timings)
      for (const [stage, ms] of Object.entries(out.timings)) this.stages.observe({ stage }, ms / 1000);
  }

  /** `start`: epoch seconds the latency counts from (commitLatencyStart); `now` in ms. */
  observeCommitApplied(start: number, now = Date.now()): void {
    this.commitToApplied.observe(Math.max(0, now / 1000 - start));
  }
}
