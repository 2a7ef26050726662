// Passive failure signals from the data plane (docs/health.md, "Passive signals"). Pure: the caller samples the
// per-real TCP counters that xdp_lb keeps (lb_real_stats' TCP part: TCP packets, and SYNs among them, a client's
// SYN retransmissions included, in every mode) and passes them in with the time; nothing on the packet path. UDP
// is not in them: a one-packet UDP flow has nothing behind it and would look like an unanswered SYN.
//
// A TCP connection to a live real sends at least one more packet through the lb node within a round trip of its
// SYN: the handshake's ACK (in every dispatch mode the client -> real direction passes the lb). A real whose process
// died answers SYNs with resets, a closed port the same, a silent host not at all (the clients retransmit their
// SYNs, which count as SYNs again): in each case its new SYNs get no packet behind them. So, between an earlier
// sample `a` and now, every SYN older than SETTLE_MS must be matched by a non-SYN packet that arrived after `a`; the
// **deficit** is the number of such SYNs minus those packets. A real is *suspect* when some sample of the last
// HISTORY_MS gives a deficit of at least MIN_SYNS **and** its other packets have all but stopped: over the last
// RECENT_MS at most a quarter as many as its SYNs. Packets of connections made before the real died (a client
// retransmitting its request) only lower the deficit: they can delay suspicion, never cause it. A live real's
// deficit stays at or below zero whatever its established traffic while its clients' round trips are under
// SETTLE_MS; clients farther away leave a deficit (their ACKs come later), but their ACKs and data keep arriving,
// which the second condition sees. Spoofed SYNs (a flood) make a real suspect, which costs a probe moved forward
// and nothing else. Suspicion only triggers an immediate active probe (checker.suspect); the
// probe, hysteresis and consensus decide. A real with no new connections is never suspect.

export interface RealSample {
  /** TCP packets the lb node sent to the real (all CPUs, since the counters exist). */
  packets: number;
  /** SYNs (ACK clear) among them: new connections and their retransmissions. */
  newFlows: number;
}

export const PASSIVE = {
  /** How often the daemon samples the counters. */
  pollMs: 100,
  /** How far back a sample may serve as the start of the comparison. */
  historyMs: 1000,
  /** SYNs younger than this may still be waiting for their answer: they do not count towards suspicion. */
  settleMs: 100,
  /** Unanswered SYNs (older than settleMs, beyond the other packets) that make a real suspect. */
  minSyns: 2,
  /** The span in which the real's other packets must have all but stopped (at most a quarter of its SYNs). */
  recentMs: 200,
} as const;

export type PassiveOptions = { historyMs: number; settleMs: number; minSyns: number; recentMs: number };

interface Point extends RealSample {
  at: number;
}

export class PassiveSignals {
  private readonly history = new Map<string, Point[]>();

  constructor(private readonly o: PassiveOptions = PASSIVE) {}

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
      while (h.length > 2 && h[0]!.at < at - this.o.historyMs) h.shift();
      if (deficit(h, at, this.o.settleMs) >= this.o.minSyns && quiet(h, at, this.o.recentMs)) suspects.push(address);
    }
    return suspects;
  }
}

/**
 * The largest number of SYNs, older than `settleMs`, that arrived after some sample of `h` with fewer non-SYN
 * packets behind them since that sample: each SYN a live real got has its ACK there. Pure.
 */
export function deficit(h: readonly Point[], at: number, settleMs: number): number {
  const now = h[h.length - 1]!;
  const othersNow = now.packets - now.newFlows;
  let settled: Point | undefined; // the newest point whose SYNs had time to be answered
  for (const p of h) if (p.at <= at - settleMs) settled = p;
  if (!settled) return 0;
  let worst = 0;
  for (const a of h) {
    if (a.at >= settled.at) break;
    const syns = settled.newFlows - a.newFlows;
    const others = othersNow - (a.packets - a.newFlows);
    worst = Math.max(worst, syns - others);
  }
  return worst;
}

/**
 * Whether the real's other packets have all but stopped over the last `recentMs`: at most a quarter as many as its
 * SYNs there (none at all when no SYN came either). A live real whose clients are far away keeps getting their
 * ACKs and data, one or more per SYN; a dead one gets at most its old connections' retransmissions. Pure.
 */
export function quiet(h: readonly Point[], at: number, recentMs: number): boolean {
  const now = h[h.length - 1]!;
  let base = h[0]!;
  for (const p of h) if (p.at <= at - recentMs) base = p;
  const syns = now.newFlows - base.newFlows;
  const others = (now.packets - now.newFlows) - (base.packets - base.newFlows);
  return others * 4 <= syns;
}

/**
 * The reals passive signals may judge: those of at least one checked service with a TCP port (a mixed TCP/UDP
 * service counts). The samples are the real's TCP traffic alone (lb_real_traffic's TCP part), so whatever UDP the
 * real also serves (a one-packet DNS query has nothing behind it) never counts; a real with no checked TCP
 * service has no TCP evidence that a probe would confirm, and an unchecked real has no probe to trigger.
 */
export function passiveAddresses(model: { services: readonly { spec: { ports: readonly { protocol: string }[]; healthCheck: { type: string }; reals: readonly { address: string }[] } }[] }): Set<string> {
  const ok = new Set<string>();
  for (const svc of model.services) {
    if (svc.spec.healthCheck.type === 'none' || !svc.spec.ports.some((p) => p.protocol === 'TCP')) continue;
    for (const r of svc.spec.reals) ok.add(r.address);
  }
  return ok;
}
