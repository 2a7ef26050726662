// Passive failure signals from the data plane (docs/health.md, "Passive signals"). Pure: the caller samples the
// per-real traffic counters that xdp_lb already keeps (lb_real_stats: packets, and new flows = SYNs that took the
// ring) and passes them in with the time; no BPF change and nothing on the packet path.
//
// A TCP connection to a live real sends more than its SYN through the lb node within a round trip: the handshake's
// ACK, then data (in every dispatch mode the client -> real direction passes the lb). A real whose process died
// answers SYNs with resets, a port closed the same, a silent host not at all (the clients retransmit their SYNs): in
// each case the lb sees SYNs and nothing else. So a real is *suspect* when, over the last WINDOW_MS, at least
// MIN_SYNS of its SYNs are older than SETTLE_MS (their answers had time to come) and not one other packet reached
// it. Suspicion only triggers an immediate active probe (checker.suspect); the probe, hysteresis and consensus
// decide. A real with no new connections is never suspect: idle reals are left to the active checks.

export interface RealSample {
  /** Packets the lb node sent to the real (all CPUs, since the counters exist). */
  packets: number;
  /** New flows among them (TCP SYNs and first packets of other flows that took the ring). */
  newFlows: number;
}

export const PASSIVE = {
  /** How often the daemon samples the counters. */
  pollMs: 100,
  /** The span a verdict looks at. */
  windowMs: 500,
  /** SYNs younger than this may still be waiting for their answer: they do not count towards suspicion. */
  settleMs: 100,
  /** Unanswered SYNs (older than settleMs) needed in the window. */
  minSyns: 2,
} as const;

interface Point extends RealSample {
  at: number;
}

export class PassiveSignals {
  private readonly history = new Map<string, Point[]>();

  constructor(private readonly o: { windowMs: number; settleMs: number; minSyns: number } = PASSIVE) {}

  /**
   * Records one sample of every real (by address) taken at `at` (ms) and returns the addresses suspect now. Reals
   * missing from `samples` are forgotten (they left the config); a counter that went backwards (a new data plane)
   * starts that real's history again.
   */
  observe(at: number, samples: ReadonlyMap<string, RealSample>): string[] {
    for (const address of this.history.keys()) if (!samples.has(address)) this.history.delete(address);
    const suspects: string[] = [];
    for (const [address, s] of samples) {
      let h = this.history.get(address);
      const last = h?.[h.length - 1];
      if (!h || (last && (s.packets < last.packets || s.newFlows < last.newFlows))) this.history.set(address, (h = []));
      h.push({ at, packets: s.packets, newFlows: s.newFlows });
      // keep one point at or before the window's start (the base of the deltas)
      while (h.length > 2 && h[1]!.at <= at - this.o.windowMs) h.shift();
      if (this.suspect(h, at)) suspects.push(address);
    }
    return suspects;
  }

  private suspect(h: Point[], at: number): boolean {
    const base = h[0]!;
    const now = h[h.length - 1]!;
    if (at - base.at < this.o.windowMs) return false; // not a whole window of history yet
    // the newest point at least settleMs old: SYNs up to it had time to be answered
    let settled = base;
    for (const p of h) if (p.at <= at - this.o.settleMs) settled = p;
    const syns = settled.newFlows - base.newFlows;
    const others = (now.packets - base.packets) - (now.newFlows - base.newFlows);
    return syns >= this.o.minSyns && others === 0;
  }
}

/**
 * The reals passive signals may judge: those every service of which is TCP-only and checked. A UDP flow may be
 * one packet (a DNS query) and so look unanswered, and an unchecked real has no probe to trigger.
 */
export function passiveAddresses(model: { services: readonly { spec: { ports: readonly { protocol: string }[]; healthCheck: { type: string }; reals: readonly { address: string }[] } }[] }): Set<string> {
  const ok = new Set<string>();
  const not = new Set<string>();
  for (const svc of model.services) {
    const tcp = svc.spec.ports.length > 0 && svc.spec.ports.every((p) => p.protocol === 'TCP') && svc.spec.healthCheck.type !== 'none';
    for (const r of svc.spec.reals) (tcp ? ok : not).add(r.address);
  }
  for (const a of not) ok.delete(a);
  return ok;
}
