// The reals of the applied desired state that a peer's connection-state entry may name (flow-sync.ts, importFlows).
import type { ServiceReals } from '../../bpf/dataplane/flow-state.js';
import type { DesiredState } from '../../render/state.js';

/** Which reals each service lists in the applied state (drained and unhealthy ones included). */
export function serviceRealsOf(d: DesiredState | null): ServiceReals | undefined {
  if (!d) return undefined;
  const listed = new Set<string>();
  for (const s of d.services) for (const r of s.reals) listed.add(`${s.id}/${r.realId}`);
  return (serviceId, realId) => listed.has(`${serviceId}/${realId}`);
}

/** Which reals each service sends new flows to in the applied state: active and healthy. */
export function servingRealsOf(d: DesiredState | null): ServiceReals | undefined {
  if (!d) return undefined;
  const serving = new Set<string>();
  for (const s of d.services) for (const r of s.reals) if (r.state === 'active' && r.healthy) serving.add(`${s.id}/${r.realId}`);
  return (serviceId, realId) => serving.has(`${serviceId}/${realId}`);
}
