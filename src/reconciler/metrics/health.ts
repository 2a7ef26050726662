// Health metrics of an lb node: each real's checked state (read from the checker at scrape time, so a flip shows
// on the very next scrape), its transitions, and the consensus decision (voters, stale peers, quorum, reals the
// quorum holds down). Metric names and meaning: docs/metrics.md.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { HealthChange, HealthSnapshot } from '../health/checker.js';
import type { HealthDecision } from '../health/agreement.js';

export interface HealthSources {
  snapshot(): HealthSnapshot;
  decide(): HealthDecision | null;
}

const STATES = ['up', 'down', 'unknown'] as const;

export class HealthMetrics {
  private readonly transitions: Counter<'service' | 'real' | 'to'>;
  private sources: HealthSources | null = null;
  /** Label sets of the transitions counter, to prune those of reals no longer checked. */
  private readonly counted = new Map<string, { service: string; real: string; to: string }>();

  constructor(reg: Registry) {
    const self = this;
    this.transitions = new Counter({ name: 'gitlb_health_transitions_total', help: 'Health state flips of a real, by new state',
      labelNames: ['service', 'real', 'to'], registers: [reg],
      // Reals leave with config changes; their series go with them, so /metrics stays bounded by the current config.
      collect() {
        const checked = self.sources?.snapshot().services;
        if (!checked) return;
        for (const [key, labels] of self.counted) {
          if (checked[labels.service]?.reals[labels.real]) continue;
          this.remove(labels);
          self.counted.delete(key);
        }
      } });
    new Gauge({ name: 'gitlb_real_health_state', help: 'Checked health of a real: 1 for its current state (up, down, unknown)',
      labelNames: ['service', 'real', 'state'], registers: [reg],
      collect() {
        this.reset();
        const snap = self.sources?.snapshot();
        for (const [service, s] of Object.entries(snap?.services ?? {}))
          for (const [real, r] of Object.entries(s.reals))
            for (const state of STATES) this.set({ service, real, state }, r.state === state ? 1 : 0);
      } });
    new Counter({ name: 'gitlb_health_passive_checks_total', help: 'Checks moved forward because a real\'s new connections went unanswered (passive signals)',
      registers: [reg],
      collect() {
        this.reset();
        const n = self.sources?.snapshot().stats.suspected;
        if (n) this.inc(n);
      } });
    new Gauge({ name: 'gitlb_service_fail_open', help: '1 while every real of a service is down and it fails open',
      labelNames: ['service'], registers: [reg],
      collect() {
        this.reset();
        for (const service of self.sources?.decide()?.failOpen ?? []) this.set({ service }, 1);
      } });
    const consensus = (name: string, help: string, pick: (c: NonNullable<HealthDecision['consensus']>) => number) =>
      new Gauge({ name, help, registers: [reg],
        collect() {
          this.reset();
          const c = self.sources?.decide()?.consensus;
          if (c) this.set(pick(c));
        } });
    consensus('gitlb_health_consensus_voters', 'lb nodes whose health observations count (consensus mode)', (c) => c.voters.length);
    consensus('gitlb_health_consensus_stale_peers', 'lb nodes left out of the vote: no fresh observations', (c) => c.stale.length);
    consensus('gitlb_health_consensus_quorum', '"down" reports needed to take a real out (consensus mode)', (c) => c.quorum);
    new Gauge({ name: 'gitlb_health_consensus_down', help: '1 for a real a quorum of lb nodes reports down (consensus mode)',
      labelNames: ['service', 'real'], registers: [reg],
      collect() {
        this.reset();
        const down = self.sources?.decide()?.consensus?.down ?? {};
        for (const [service, reals] of Object.entries(down)) for (const real of reals) this.set({ service, real }, 1);
      } });
  }

  attach(sources: HealthSources): void {
    this.sources = sources;
  }

  observeChange(e: HealthChange): void {
    const labels = { service: e.service, real: e.address, to: e.to };
    this.counted.set(`${labels.service}\n${labels.real}\n${labels.to}`, labels);
    this.transitions.inc(labels);
  }
}
