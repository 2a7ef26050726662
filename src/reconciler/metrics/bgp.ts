// BGP metrics of an lb node with BGP settings: per VIP whether it is announced and, if not, why (the same decision
// the BIRD file and the status carry), and whether BIRD refused the last reload. Read at scrape time.
// Metric names and meaning: docs/metrics.md.
import { Gauge, type Registry } from 'prom-client';
import type { BgpStatus } from '../bgp/announcer.js';

export class BgpMetrics {
  private source: (() => BgpStatus | null) | null = null;

  constructor(reg: Registry) {
    const self = this;
    new Gauge({ name: 'gitlb_bgp_vip_announced', help: 'Per VIP: 1 while this lb node announces it by BGP, 0 while withdrawn',
      labelNames: ['vip'], registers: [reg],
      collect() {
        this.reset();
        for (const v of self.source?.()?.vips ?? []) this.set({ vip: v.vip }, v.state === 'announced' ? 1 : 0);
      } });
    new Gauge({ name: 'gitlb_bgp_vip_withdrawn', help: 'Per withdrawn VIP: 1 with the reason (draining, no healthy real, ...)',
      labelNames: ['vip', 'reason'], registers: [reg],
      collect() {
        this.reset();
        for (const v of self.source?.()?.vips ?? []) if (v.state !== 'announced') this.set({ vip: v.vip, reason: v.state.replace(/^withdrawn: /, '') }, 1);
      } });
    new Gauge({ name: 'gitlb_bgp_rejoin_held', help: 'An lb node rejoining with empty maps: 1 while its announcements are held for its peers\' resync, 0 once released; absent when not armed',
      registers: [reg],
      collect() {
        this.reset();
        const r = self.source?.()?.rejoin;
        if (r && r.state !== 'off') this.set(r.state === 'held' ? 1 : 0);
      } });
    new Gauge({ name: 'gitlb_bgp_bird_error', help: '1 while the last write of the BIRD file or birdc configure failed',
      registers: [reg],
      collect() {
        this.reset();
        const s = self.source?.();
        if (s) this.set(s.bird.error ? 1 : 0);
      } });
  }

  /** `source` returns null while the node has no BGP settings. */
  attach(source: () => BgpStatus | null): void {
    this.source = source;
  }
}
