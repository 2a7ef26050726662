// Picks the health a node renders with, by the cluster's agreement mode (Cluster spec.health.mode):
//   local     — this node's own observations;
//   consensus — a real is excluded only when a quorum of fresh lb nodes reports it down (src/render/health-quorum.ts).
// Either way each service's fail mode is applied last. Pure given its inputs (the caller passes `now`).
import type { ConfigModel, HealthAgreementMode } from '../../render/model.js';
import {
  consensusHealth,
  localDownSet,
  resolveHealth,
  type ConsensusResult,
  type NodeObservations,
  type Observations,
  type ResolvedHealth,
} from '../../render/health-quorum.js';

/** Default staleness bound for a peer's published observations. */
export const DEFAULT_STALE_AFTER_MS = 60_000;

export interface HealthDecisionInput {
  model: ConfigModel;
  node: string;
  /** This node's observations (HealthChecker.observations(), or the copy it last published). */
  local: Observations;
  /** Peers' observations as read from their status files; ignored in local mode. */
  peers: NodeObservations[];
  now: number;
}

export interface HealthDecision extends ResolvedHealth {
  mode: HealthAgreementMode;
  /** Present in consensus mode: who voted, who was stale, the quorum. */
  consensus?: ConsensusResult;
}

export function agreementMode(model: ConfigModel): { mode: HealthAgreementMode; staleAfterMs: number } {
  const h = model.cluster.spec.health;
  return { mode: h?.mode ?? 'local', staleAfterMs: h?.staleAfterMs ?? DEFAULT_STALE_AFTER_MS };
}

export function decideHealth(input: HealthDecisionInput): HealthDecision {
  const { mode, staleAfterMs } = agreementMode(input.model);
  if (mode === 'local') return { mode, ...resolveHealth(input.model, localDownSet(input.local)) };
  const lbNodes = input.model.nodes.filter((n) => n.spec.role === 'lb').map((n) => n.metadata.name);
  const self: NodeObservations = { node: input.node, publishedAt: new Date(input.now).toISOString(), observations: input.local };
  const consensus = consensusHealth(self, input.peers, lbNodes, input.now, staleAfterMs);
  return { mode, consensus, ...resolveHealth(input.model, consensus.down) };
}
