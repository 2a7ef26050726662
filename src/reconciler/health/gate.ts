// Post-apply health gate for auto-rollback. Pure (no I/O, no clock): the caller renders the tables of the state
// before and after a revision (as if every real were healthy, so the tables are the ones the configs ask for)
// and marks each real with the health observed for it; the gate asks whether the revision cost too much of the
// traffic that lands on healthy reals.
//
// Healthy share of a service = the share of its table entries that point at reals observed healthy. A service
// present in both states fails the gate when it lost more than `maxLossShare` of its previous healthy share.
// Weights only matter through the table: a revision that moves no entry (e.g. all weights scaled alike) keeps
// every share and can never fail. A service removed by the revision is intentional and not judged; a new
// service has nothing to lose.

/** The part of DesiredState (src/render/state.ts) the gate reads; a DesiredState is assignable to it. */
export interface GateState {
  services: { name: string; tableSize: number; reals: { address: string; healthy: boolean; entries: number }[] }[];
}

export interface ServiceShare {
  service: string;
  /** Share of the table on healthy reals, before and after (0..1). */
  before: number;
  after: number;
  /** (before - after) / before; 0 when before is 0 or the share grew. */
  lossShare: number;
}

export interface GateResult {
  pass: boolean;
  /** One line for status and logs: why it failed, or a summary when it passed. */
  reason: string;
  /** Every service present in both states, sorted by name. */
  services: ServiceShare[];
}

export function healthyShare(service: GateState['services'][number]): number {
  if (service.tableSize <= 0) return 0;
  let n = 0;
  for (const r of service.reals) if (r.healthy) n += r.entries;
  return n / service.tableSize;
}

export function healthGate(before: GateState, after: GateState, maxLossShare: number): GateResult {
  if (!(maxLossShare >= 0 && maxLossShare <= 1)) {
    throw new RangeError(`healthGate: maxLossShare must be within [0, 1], got ${maxLossShare}`);
  }
  const afterByName = new Map(after.services.map((s) => [s.name, s]));
  const services: ServiceShare[] = [];
  for (const old of before.services) {
    const now = afterByName.get(old.name);
    if (!now) continue;
    const b = healthyShare(old);
    const a = healthyShare(now);
    // Shares are ratios of integers: compare with a tolerance so float noise never fails a no-op.
    const lossShare = b > 0 && b - a > 1e-9 ? (b - a) / b : 0;
    services.push({ service: old.name, before: b, after: a, lossShare });
  }
  services.sort((x, y) => (x.service < y.service ? -1 : x.service > y.service ? 1 : 0));
  const failed = services.filter((s) => s.lossShare > maxLossShare + 1e-9);
  if (failed.length > 0) {
    const parts = failed.map(
      (s) => `${s.service} lost ${pct(s.lossShare)} of its healthy table share (${pct(s.before)} -> ${pct(s.after)} of entries on healthy reals)`,
    );
    return { pass: false, reason: `${parts.join('; ')}; limit ${pct(maxLossShare)}`, services };
  }
  const worst = services.reduce<ServiceShare | null>((w, s) => (!w || s.lossShare > w.lossShare ? s : w), null);
  const reason = worst && worst.lossShare > 0
    ? `largest loss ${worst.service} ${pct(worst.lossShare)} within limit ${pct(maxLossShare)}`
    : `no service lost healthy table share`;
  return { pass: true, reason, services };
}

function pct(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}
