// Connection-state sync metrics (src/reconciler/flows/flow-sync.ts, docs/datapath.md "Connection-state sync"), per peer,
// read from FlowSync.report() at scrape time: entries sent, received, applied and dropped, refusals by reason, the
// lag of the last batch and whether the peer has the whole table.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { FlowSyncLocalReport, PeerSyncReport } from '../flows/flow-sync.js';
import type { StatusDrain } from '../flows/drain-watch.js';
import type { HandbackReport } from '../flows/snat-takeover.js';

/** What the lb node's drain watch and SNAT takeover report (node-daemon.ts). */
export interface FlowExtras {
  drain?: () => StatusDrain | null;
  /** SNAT address -> the lost node it belonged to. */
  serving?: () => Record<string, string>;
  /** Of serving: the addresses held for owners that answer again but lack their own translations. */
  handback?: () => Record<string, HandbackReport>;
  /** This node's reading of what its XDP program published (FlowSync.localReport). */
  local?: () => FlowSyncLocalReport | null;
}

export class FlowSyncMetrics {
  private source: (() => Record<string, PeerSyncReport>) | null = null;
  private extras: FlowExtras = {};

  constructor(reg: Registry) {
    const self = this;
    const reports = () => Object.entries(self.source?.() ?? {});
    new Counter({ name: 'gitlb_flow_sync_entries_total',
      help: 'Connection-table entries and SNAT translations synced with each lb peer: sent, received, applied (inserted here), dropped (queue full, a resync follows), returned (of applied: this node\'s own SNAT translations the peer sent back while this node rejoined with empty maps)',
      labelNames: ['peer', 'event'], registers: [reg],
      collect() {
        this.reset();
        for (const [peer, r] of reports()) {
          this.inc({ peer, event: 'sent' }, r.sent);
          this.inc({ peer, event: 'received' }, r.received);
          this.inc({ peer, event: 'applied' }, r.applied);
          this.inc({ peer, event: 'dropped' }, r.dropped);
          this.inc({ peer, event: 'returned' }, r.returned);
        }
      } });
    new Counter({ name: 'gitlb_flow_sync_refused_total',
      help: 'Synced entries from each lb peer not inserted here, by reason (no-listener, no-real, exists, snat-address, snat-own-port, snat-port-taken, bad-age, not-owner, newer, table-full, rate-limited)',
      labelNames: ['peer', 'reason'], registers: [reg],
      collect() {
        this.reset();
        for (const [peer, r] of reports()) for (const [reason, n] of Object.entries(r.refused)) this.inc({ peer, reason }, n ?? 0);
      } });
    new Gauge({ name: 'gitlb_flow_sync_lag_seconds', help: 'Time from reading an entry to the peer\'s answer, of the last batch sent to each lb peer',
      labelNames: ['peer'], registers: [reg],
      collect() {
        this.reset();
        for (const [peer, r] of reports()) if (r.lagMs !== null) this.set({ peer }, r.lagMs / 1000);
      } });
    new Gauge({ name: 'gitlb_flow_sync_in_sync', help: '1 when the lb peer has been sent the whole table since the last failed send',
      labelNames: ['peer'], registers: [reg],
      collect() {
        this.reset();
        for (const [peer, r] of reports()) this.set({ peer }, r.inSync ? 1 : 0);
      } });
    new Gauge({ name: 'gitlb_flow_sync_resync_received', help: '1 once the lb peer\'s whole table (a resync it marked done) arrived since this daemon started',
      labelNames: ['peer'], registers: [reg],
      collect() {
        this.reset();
        for (const [peer, r] of reports()) this.set({ peer }, r.resyncReceived ? 1 : 0);
      } });
    const drain = () => self.extras.drain?.() ?? null;
    new Gauge({ name: 'gitlb_drain_can_stop', help: 'A drained lb node (Node.spec.state: drain): 1 when no VIP packet arrived for 30 s and no connection nor own SNAT translation is active (it can be stopped); absent when not drained',
      registers: [reg],
      collect() {
        this.reset();
        const d = drain();
        if (d) this.set(d.canStop ? 1 : 0);
      } });
    new Gauge({ name: 'gitlb_drain_vip_packets_per_second', help: 'A drained lb node: VIP packets per second it still receives (last 5 s)', registers: [reg],
      collect() {
        this.reset();
        const d = drain();
        if (d) this.set(d.packetsPerSecond);
      } });
    new Gauge({ name: 'gitlb_drain_active_connections', help: 'A drained lb node: connection-table entries that saw a packet here in the last 30 s', registers: [reg],
      collect() {
        this.reset();
        const d = drain();
        if (d) this.set(d.activeConnections);
      } });
    new Gauge({ name: 'gitlb_drain_active_snat_translations', help: 'A drained lb node: its own SNAT translations that saw a packet in the last 30 s', registers: [reg],
      collect() {
        this.reset();
        const d = drain();
        if (d) this.set(d.activeTranslations);
      } });
    new Gauge({ name: 'gitlb_snat_takeover_serving', help: 'A lost lb node\'s SNAT address this node serves (1), by address and owner', labelNames: ['address', 'owner'],
      registers: [reg],
      collect() {
        this.reset();
        for (const [address, owner] of Object.entries(self.extras.serving?.() ?? {})) this.set({ address, owner }, 1);
      } });
    new Gauge({ name: 'gitlb_snat_handback_pending',
      help: 'A taken-over SNAT address this node still holds for its owner (1), which answers again but has not shown it has its own translations back (at most --snat-handback-limit s), by address and owner',
      labelNames: ['address', 'owner'], registers: [reg],
      collect() {
        this.reset();
        for (const [address, h] of Object.entries(self.extras.handback?.() ?? {})) this.set({ address, owner: h.owner }, 1);
      } });
    const local = () => self.extras.local?.() ?? null;
    new Counter({ name: 'gitlb_flow_sync_published_total',
      help: 'New connection-table entries and new or changed SNAT translations read from the ring xdp_lb publishes them into (each sent to every lb peer)',
      registers: [reg],
      collect() {
        this.reset();
        const l = local();
        if (l) this.inc(l.published);
      } });
    new Counter({ name: 'gitlb_flow_sync_scans_total',
      help: 'Scans of the whole connection and NAT tables by the sync: a peer\'s (re)join, records the ring lost, a new program, and the safety interval',
      registers: [reg],
      collect() {
        this.reset();
        const l = local();
        if (l) this.inc(l.scans);
      } });
    new Gauge({ name: 'gitlb_flow_sync_queued', help: 'Entries waiting to be sent to each lb peer', labelNames: ['peer'], registers: [reg],
      collect() {
        this.reset();
        for (const [peer, r] of reports()) this.set({ peer }, r.queued);
      } });
    new Gauge({ name: 'gitlb_flow_sync_gone_deferred',
      help: 'Ends of SNAT translations from each lb peer over its entry budget, waiting here to be applied as the budget refills',
      labelNames: ['peer'], registers: [reg],
      collect() {
        this.reset();
        for (const [peer, r] of reports()) this.set({ peer }, r.goneDeferred);
      } });
  }

  attach(source: () => Record<string, PeerSyncReport>, extras: FlowExtras = {}): void {
    this.source = source;
    this.extras = extras;
  }
}
