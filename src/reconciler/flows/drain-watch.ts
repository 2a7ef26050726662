// Graceful drain (issue 24, docs/bgp.md "Graceful drain"): a node with `Node.spec.state: drain` withdraws its VIPs but
// keeps its data plane and its connection-state sync, so the flows the routers still send it are served. This watch
// tells the operator when nothing arrives any more: every round it reads the data plane's VIP packet counters (all
// services, lb_service_stats), counts the connection-table entries that saw a packet here in the last 30 s (the DSR
// connections it still forwards, by their coarse last-seen) and this node's own SNAT translations that saw a packet
// in the last 30 s (the connections it would still have to translate replies for). The node can be stopped once no
// VIP packet arrived for QUIET_S seconds and no connection or own translation is active. Pure over its inputs (the
// counters and the clock are passed in).

/** No VIP packet for this long, and no active own translation: the drained node carries no more traffic. */
export const QUIET_S = 30;
/** An own translation counts as active while it saw a packet this recently. */
export const ACTIVE_TRANSLATION_S = 30;
/** A connection-table entry counts as an active connection while it saw a packet this recently. */
export const ACTIVE_CONNECTION_S = 30;

export interface DrainSample {
  /** Sum of the VIP packets of every service (monotonic counter). */
  vipPackets: number;
  /** This node's own SNAT translations (owner 0), open, that saw a packet within ACTIVE_TRANSLATION_S. */
  activeTranslations: number;
  /** Connection-table entries that saw a packet here within ACTIVE_CONNECTION_S. */
  activeConnections: number;
}

export interface StatusDrain {
  /** When this daemon first saw the node drained. */
  since: string;
  /** VIP packets per second over the last round. */
  packetsPerSecond: number;
  activeTranslations: number;
  /** Connections (connection-table entries) that saw a packet here in the last ACTIVE_CONNECTION_S. */
  activeConnections: number;
  /** The last time a VIP packet arrived (as seen by this daemon), or null when none arrived since the drain. */
  lastPacketAt: string | null;
  /** No VIP packet for QUIET_S s, no active connection and no active own translation: the node may be stopped. */
  canStop: boolean;
}

export class DrainWatch {
  private since: number | null = null;
  private last: { at: number; packets: number } | null = null;
  private lastPacketAt: number | null = null;
  private rate = 0;
  private active = 0;
  private connections = 0;

  /** One round: `sample` is null when the node is not drained (the watch resets). */
  observe(sample: DrainSample | null, now: number): void {
    if (!sample) {
      this.since = this.last = this.lastPacketAt = null;
      this.rate = this.active = this.connections = 0;
      return;
    }
    if (this.since === null) {
      this.since = now;
      this.lastPacketAt = now; // unknown before: counted from the drain
    }
    if (this.last && now > this.last.at) {
      const moved = Math.max(0, sample.vipPackets - this.last.packets);
      this.rate = (moved * 1000) / (now - this.last.at);
      if (moved > 0) this.lastPacketAt = now;
    }
    this.last = { at: now, packets: sample.vipPackets };
    this.active = sample.activeTranslations;
    this.connections = sample.activeConnections;
  }

  report(now: number): StatusDrain | null {
    if (this.since === null) return null;
    const quietMs = now - (this.lastPacketAt ?? this.since);
    return {
      since: new Date(this.since).toISOString(),
      packetsPerSecond: Math.round(this.rate * 10) / 10,
      activeTranslations: this.active,
      activeConnections: this.connections,
      lastPacketAt: this.lastPacketAt !== null && this.lastPacketAt > this.since ? new Date(this.lastPacketAt).toISOString() : null,
      canStop: this.active === 0 && this.connections === 0 && quietMs >= QUIET_S * 1000,
    };
  }
}
