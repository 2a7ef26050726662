// Peer channel metrics: every refused peer message, by reason and direction ('in': a request this node refused,
// 'out': an answer it refused). Every reason starts at 0 so alerts on increase() see the first one.
import { Counter, type Registry } from 'prom-client';
import { REJECT_REASONS, type PeerChannelMetrics, type RejectReason } from '../peer/index.js';

export class PeerMetrics implements PeerChannelMetrics {
  private readonly counter: Counter<'reason' | 'direction'>;

  constructor(reg: Registry) {
    this.counter = new Counter({ name: 'gitlb_peer_messages_rejected_total',
      help: 'Peer messages refused (unauthenticated, unknown sender, replayed, out of the time window, too large, rate-bound, bad body), by reason and direction',
      labelNames: ['reason', 'direction'], registers: [reg] });
    for (const reason of REJECT_REASONS) for (const direction of ['in', 'out']) this.counter.inc({ reason, direction }, 0);
  }

  rejected(reason: RejectReason, direction: 'in' | 'out'): void {
    this.counter.inc({ reason, direction });
  }
}
