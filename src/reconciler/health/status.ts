// The health part of status/<node>.yaml: what a node writes (its snapshot for `gitlb status` and its observations
// for peers) and how a node reads a peer's observations back. Pure. Layout (docs/health.md):
//   health:
//     publishedAt: <ISO>              # staleness bound in consensus mode is measured from this
//     mode: local | consensus
//     observations: { <service>: { <address>: { up: bool, since: <ISO> } } }
//     failOpen: [<service>...]        # services running fail-open right now (all active reals down)
//     services: { <service>: { reals: { <address>: { state, since, check, lastCheck: {ok, detail, at, durationMs} } } } }
import type { HealthAgreementMode } from '../../render/model.js';
import type { NodeObservations, Observations } from '../../render/health-quorum.js';
import type { HealthSnapshot } from './checker.js';

export interface HealthStatus {
  publishedAt: string;
  mode: HealthAgreementMode;
  observations: Observations;
  failOpen: string[];
  failClosed: string[];
  services: HealthSnapshot['services'];
}

export function healthStatus(input: { now: number; mode: HealthAgreementMode; observations: Observations;
  snapshot: HealthSnapshot; failOpen: string[]; failClosed: string[] }): HealthStatus {
  return {
    publishedAt: new Date(input.now).toISOString(),
    mode: input.mode,
    observations: input.observations,
    failOpen: input.failOpen,
    failClosed: input.failClosed,
    services: input.snapshot.services,
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
