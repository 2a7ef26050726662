// Health checks for lb nodes: active checks with hysteresis, the HealthView render uses, agreement across
// nodes, and the post-apply health gate. See docs/health.md.
export { HealthChecker, VIP_PROBE_PORTS, type VipProbeRouter, type HealthChange, type HealthCheckerOptions, type HealthSnapshot, type RealHealthStatus } from './checker.js';
export { decideHealth, agreementMode, DEFAULT_STALE_AFTER_MS, type HealthDecision, type HealthDecisionInput } from './agreement.js';
export { healthGate, healthyShare, type GateResult, type GateState, type ServiceShare } from './gate.js';
export { stepHealth, initialHealth, type CheckResult, type HealthState, type RealHealth } from './hysteresis.js';
export { runProbe, tcpProbe, httpProbe, describeProbe, type Probe } from './probes.js';
export { Semaphore } from './semaphore.js';
export { checkTargets, type CheckTarget } from './targets.js';
export {
  consensusHealth,
  localDownSet,
  resolveHealth,
  type ConsensusResult,
  type DownSet,
  type HealthView,
  type NodeObservations,
  type Observations,
  type RealObservation,
  type ResolvedHealth,
} from '../../render/health-quorum.js';
export { healthStatus, peerObservations, type HealthStatus } from './status.js';
export { HealthService, type HealthServiceOptions, type HealthPostApplyGate } from './service.js';
export { formatHealthStatus } from './format.js';
