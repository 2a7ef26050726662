// Post-apply health gate for auto-rollback. Pure (no I/O, no clock): the reconciler renders the state before and
// after a revision, each with the health it observed, and asks whether the new revision cost too much capacity.
//
// Healthy capacity of a service = sum of weights of its reals that are `active` and healthy. A service that exists
// in both states fails the gate when it lost more than `maxCapacityLossShare` of its previous healthy capacity.
// A service removed by the revision is an intentional change and is not judged; a new service has nothing to lose.

/** The part of DesiredState (src/render/state.ts) the gate reads; a DesiredState is assignable to it. */
export interface GateState {
  services: { name: string; reals: { address: string; weight: number; state: string; healthy: boolean }[] }[];
}

export interface ServiceCapacity {
  service: string;
  before: number;
  after: number;
  /** (before - after) / before; 0 when before is 0 or capacity grew. */
  lossShare: number;
}

export interface GateResult {
  pass: boolean;
  /** One line for status and logs: why it failed, or a summary when it passed. */
  reason: string;
  /** Every service present in both states, sorted by name. */
  services: ServiceCapacity[];
}

export function healthyCapacity(reals: GateState['services'][number]['reals']): number {
  let sum = 0;
  for (const r of reals) if (r.state === 'active' && r.healthy) sum += r.weight;
  return sum;
}

export function healthGate(before: GateState, after: GateState, maxCapacityLossShare: number): GateResult {
  if (!(maxCapacityLossShare >= 0 && maxCapacityLossShare <= 1)) {
    throw new RangeError(`healthGate: maxCapacityLossShare must be within [0, 1], got ${maxCapacityLossShare}`);
  }
  const afterByName = new Map(after.services.map((s) => [s.name, s]));
  const services: ServiceCapacity[] = [];
  for (const old of before.services) {
    const now = afterByName.get(old.name);
    if (!now) continue;
    const b = healthyCapacity(old.reals);
    const a = healthyCapacity(now.reals);
    const lossShare = b > 0 && a < b ? (b - a) / b : 0;
    services.push({ service: old.name, before: b, after: a, lossShare });
  }
  services.sort((x, y) => (x.service < y.service ? -1 : x.service > y.service ? 1 : 0));
  const failed = services.filter((s) => s.lossShare > maxCapacityLossShare);
  if (failed.length > 0) {
    const parts = failed.map(
      (s) => `${s.service} lost ${pct(s.lossShare)} of healthy capacity (${s.before} -> ${s.after})`,
    );
    return { pass: false, reason: `${parts.join('; ')}; limit ${pct(maxCapacityLossShare)}`, services };
  }
  const worst = services.reduce<ServiceCapacity | null>((w, s) => (!w || s.lossShare > w.lossShare ? s : w), null);
  const reason = worst && worst.lossShare > 0
    ? `largest loss ${worst.service} ${pct(worst.lossShare)} within limit ${pct(maxCapacityLossShare)}`
    : `no service lost healthy capacity`;
  return { pass: true, reason, services };
}

function pct(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}
