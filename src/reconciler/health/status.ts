// The health part of status/<node>.yaml: what a node writes (its snapshot for `gitlb status` and its observations
// for peers) and how a node reads a peer's observations back. Pure. Proportional to what is wrong, not to the size
// of the config (a 1,000-service cluster writes this after every change). Layout (docs/health.md):
//   health:
//     publishedAt: <ISO>              # staleness bound in consensus mode is measured from this
//     mode: local | consensus
//     observations: { <service>: { <address>: { up: false, since: <ISO> } } }   # the down votes, every one
//     failOpen: [<service>...]        # services running fail-open right now (all active reals down)
//     failClosed: [<service>...]
//     services: { <service>: { counts: {total, up, down, unknown}, reals: { <address>: { state, since, check, lastCheck } } } }
//     omittedReals: <n>               # reals not up that the cap left out of services.*.reals
import type { HealthAgreementMode } from '../../render/model.js';
import type { NodeObservations, Observations } from '../../render/health-quorum.js';
import type { HealthSnapshot, RealHealthStatus } from './checker.js';
import type { HealthPeerReport } from './peer-wiring.js';

/** At most this many reals that are not up are listed (down ones first); the rest are only counted. */
export const MAX_LISTED_REALS = 200;

export interface HealthRealCounts {
  total: number;
  up: number;
  down: number;
  unknown: number;
}

export interface HealthStatusService {
  failOpen?: true;
  failClosed?: true;
  counts: HealthRealCounts;
  /** Only reals that are not up (down, or unknown: not checked enough yet), within the cap. */
  reals: Record<string, RealHealthStatus>;
}

export interface HealthStatus {
  publishedAt: string;
  mode: HealthAgreementMode;
  /** Only down observations: the consensus counts down votes alone (render/health-quorum.ts), so an up one
   * carries nothing a peer uses. Never capped: a vote left out would change the peers' down set. */
  observations: Observations;
  failOpen: string[];
  failClosed: string[];
  services: Record<string, HealthStatusService>;
  /** Reals not up that are counted in `counts` but not listed (over MAX_LISTED_REALS). */
  omittedReals: number;
  /** lb nodes: how peer votes are authenticated and what was refused (peer-wiring.ts). */
  peers?: HealthPeerReport;
}

const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

export function healthStatus(input: { now: number; mode: HealthAgreementMode; observations: Observations;
  snapshot: HealthSnapshot; failOpen: string[]; failClosed: string[] }, maxListed = MAX_LISTED_REALS): HealthStatus {
  const observations: Observations = {};
  for (const service of Object.keys(input.observations).sort(byText)) {
    const reals = input.observations[service]!;
    for (const address of Object.keys(reals).sort(byText)) {
      if (!reals[address]!.up) (observations[service] ??= {})[address] = reals[address]!;
    }
  }
  // Which reals that are not up get listed: down before unknown, then by service and address (deterministic).
  const notUp: { service: string; address: string; r: RealHealthStatus }[] = [];
  const names = Object.keys(input.snapshot.services).sort(byText);
  for (const service of names) {
    const reals = input.snapshot.services[service]!.reals;
    for (const address of Object.keys(reals).sort(byText)) if (reals[address]!.state !== 'up') notUp.push({ service, address, r: reals[address]! });
  }
  const rank = (x: (typeof notUp)[number]) => (x.r.state === 'down' ? 0 : 1);
  const listed = new Set(
    [...notUp].sort((a, b) => rank(a) - rank(b) || byText(a.service, b.service) || byText(a.address, b.address)).slice(0, Math.max(0, maxListed))
      .map((x) => `${x.service}\n${x.address}`),
  );
  const services: Record<string, HealthStatusService> = {};
  for (const service of names) {
    const snap = input.snapshot.services[service]!;
    const counts: HealthRealCounts = { total: 0, up: 0, down: 0, unknown: 0 };
    for (const r of Object.values(snap.reals)) {
      counts.total++;
      counts[r.state]++;
    }
    services[service] = { ...(snap.failOpen && { failOpen: true }), ...(snap.failClosed && { failClosed: true }), counts, reals: {} };
  }
  for (const x of notUp) if (listed.has(`${x.service}\n${x.address}`)) services[x.service]!.reals[x.address] = x.r;
  return {
    publishedAt: new Date(input.now).toISOString(),
    mode: input.mode,
    observations,
    failOpen: input.failOpen,
    failClosed: input.failClosed,
    services,
    omittedReals: notUp.length - listed.size,
  };
}

/**
 * Reads a peer's observations from its parsed status document (`status/<node>.yaml` as a plain object). Accepts
 * `health.{publishedAt, observations}`. Returns an error string instead of throwing for a malformed document, so
 * one peer's broken status never stops a node from rendering (that peer simply does not vote).
 */
export function peerObservations(node: string, statusDoc: unknown): { obs: NodeObservations } | { error: string } {
  const health = isObject(statusDoc) ? statusDoc['health'] : undefined;
  if (!isObject(health)) return { error: `status/${node}.yaml: no 'health' mapping` };
  const publishedAt = health['publishedAt'];
  if (typeof publishedAt !== 'string' || Number.isNaN(Date.parse(publishedAt))) {
    return { error: `status/${node}.yaml: health.publishedAt is not an ISO time` };
  }
  const raw = health['observations'];
  if (!isObject(raw)) return { error: `status/${node}.yaml: health.observations is not a mapping` };
  const observations: Observations = {};
  for (const [service, reals] of Object.entries(raw)) {
    if (!isObject(reals)) return { error: `status/${node}.yaml: health.observations.${service} is not a mapping` };
    const out: Observations[string] = {};
    for (const [address, o] of Object.entries(reals)) {
      if (!isObject(o) || typeof o['up'] !== 'boolean' || typeof o['since'] !== 'string') {
        return { error: `status/${node}.yaml: health.observations.${service}.${address} needs up: bool and since: ISO time` };
      }
      out[address] = { up: o['up'], since: o['since'] };
    }
    observations[service] = out;
  }
  return { obs: { node, publishedAt, observations } };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
