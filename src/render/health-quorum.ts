// Health agreement across lb nodes, and the HealthView that render consumes.
// Pure: no I/O, no clock (the caller passes `now`), no randomness. Same inputs => same output on every node,
// which is the point: nodes that see the same published observations render the same Maglev digests.
// See docs/health.md for the two modes (local, consensus) and their timing.
import type { ConfigModel, HealthFailMode } from './model.js';
import type { HealthView } from './service-table.js';

/** One node's opinion about one real of one service. `since` is when the opinion last flipped (ISO 8601). */
export interface RealObservation {
  up: boolean;
  since: string;
}

/** What a node observes: service name -> real address -> opinion. Reals the node has no opinion about
 * yet (not checked enough, or check type `none`) are simply absent: absence never counts as "down". */
export type Observations = Record<string, Record<string, RealObservation>>;

/** A node's published observations as found in its status file (status/<node>.yaml). */
export interface NodeObservations {
  node: string;
  /** When the node wrote these observations (ISO 8601); used for the staleness bound. */
  publishedAt: string;
  observations: Observations;
}

/** Service name -> addresses considered down, each list sorted. Services with nothing down are absent. */
export type DownSet = Record<string, string[]>;

export interface ConsensusResult {
  /** Reals that a quorum of voters reports down. */
  down: DownSet;
  /** lb nodes whose observations counted (fresh, or the local node), sorted. */
  voters: string[];
  /** lb nodes left out because their last publication is older than the staleness bound, or absent, sorted. */
  stale: string[];
  /** Number of "down" reports needed: a strict majority of the voters. */
  quorum: number;
}

/**
 * A real is down for the cluster when a strict majority of the lb nodes that published recently report it down.
 * `localObs` is the calling node's own observations and always counts as fresh (pass what it last published
 * to make every node compute from exactly the same inputs; pass its live observations to act sooner).
 * Peers not listed in `lbNodes` are ignored; so is a peer entry for the local node (the local copy wins).
 */
export function consensusHealth(
  localObs: NodeObservations,
  peerObs: NodeObservations[],
  lbNodes: string[],
  now: number,
  staleAfterMs: number,
): ConsensusResult {
  if (!Number.isFinite(staleAfterMs) || staleAfterMs <= 0) {
    throw new RangeError(`consensusHealth: staleAfterMs must be a positive number, got ${staleAfterMs}`);
  }
  const lbSet = new Set(lbNodes);
  const byNode = new Map<string, NodeObservations>();
  for (const peer of peerObs) {
    if (!lbSet.has(peer.node) || peer.node === localObs.node) continue;
    const seen = byNode.get(peer.node);
    // Two copies of one node's status (should not happen): keep the newer, deterministically.
    if (!seen || publishedMs(peer) > publishedMs(seen)) byNode.set(peer.node, peer);
  }
  if (lbSet.has(localObs.node)) byNode.set(localObs.node, localObs);

  const voters: NodeObservations[] = [];
  const stale: string[] = [];
  for (const node of [...lbSet].sort()) {
    const obs = byNode.get(node);
    if (obs && (node === localObs.node || isFresh(obs, now, staleAfterMs))) voters.push(obs);
    else stale.push(node);
  }
  // The local node votes even when it is not (or no longer) an lb node in the config: it is the one rendering.
  if (!lbSet.has(localObs.node)) voters.push(localObs);
  voters.sort((a, b) => compareText(a.node, b.node));

  const quorum = Math.floor(voters.length / 2) + 1;
  const downVotes = new Map<string, Map<string, number>>();
  for (const voter of voters) {
    for (const [service, reals] of Object.entries(voter.observations)) {
      for (const [address, obs] of Object.entries(reals)) {
        if (obs.up) continue;
        let perService = downVotes.get(service);
        if (!perService) downVotes.set(service, (perService = new Map()));
        perService.set(address, (perService.get(address) ?? 0) + 1);
      }
    }
  }
  const down: DownSet = {};
  for (const service of [...downVotes.keys()].sort(compareText)) {
    const addresses = [...downVotes.get(service)!.entries()]
      .filter(([, votes]) => votes >= quorum)
      .map(([address]) => address)
      .sort(compareText);
    if (addresses.length > 0) down[service] = addresses;
  }
  return { down, voters: voters.map((v) => v.node), stale, quorum };
}

/** The down set a node acts on in `local` mode: its own observations alone. */
export function localDownSet(obs: Observations): DownSet {
  const down: DownSet = {};
  for (const service of Object.keys(obs).sort(compareText)) {
    const addresses = Object.entries(obs[service]!)
      .filter(([, o]) => !o.up)
      .map(([address]) => address)
      .sort(compareText);
    if (addresses.length > 0) down[service] = addresses;
  }
  return down;
}

// The one HealthView render consumes (a type-only import: no runtime dependency on the table builder).
export type { HealthView } from './service-table.js';

export interface ResolvedHealth {
  view: HealthView;
  /** Services whose every active real is down and which keep them all (failMode open): report these loudly. */
  failOpen: string[];
  /** Services whose every active real is down and which drop new flows (failMode closed). */
  failClosed: string[];
  /** The effective down set after applying fail modes (what render will exclude). */
  excluded: DownSet;
}

/**
 * Turns a down set into the HealthView render uses, applying each service's fail mode: when every `active`
 * real of a service is down, `open` (the default) keeps them all, `closed` excludes them all.
 * Reals of services with check type `none`, unknown services and unknown addresses are healthy.
 */
export function resolveHealth(model: ConfigModel, down: DownSet): ResolvedHealth {
  const excluded: DownSet = {};
  const failOpen: string[] = [];
  const failClosed: string[] = [];
  for (const svc of model.services) {
    const name = svc.metadata.name;
    const spec = svc.spec;
    if (spec.healthCheck.type === 'none') continue;
    const downHere = new Set(down[name] ?? []);
    const known = spec.reals.filter((r) => r.state !== 'disabled' && downHere.has(r.address)).map((r) => r.address);
    if (known.length === 0) continue;
    const active = spec.reals.filter((r) => r.state === 'active');
    const allActiveDown = active.length > 0 && active.every((r) => downHere.has(r.address));
    if (allActiveDown) {
      const mode: HealthFailMode = spec.healthCheck.failMode ?? 'open';
      if (mode === 'open') {
        failOpen.push(name);
        continue; // keep every real: a service that drops everything is worse than one that might answer
      }
      failClosed.push(name);
    }
    excluded[name] = [...new Set(known)].sort(compareText);
  }
  const excludedSets = new Map(Object.entries(excluded).map(([s, a]) => [s, new Set(a)]));
  const view: HealthView = {
    isHealthy(serviceName: string, address: string): boolean {
      return !(excludedSets.get(serviceName)?.has(address) ?? false);
    },
  };
  return { view, failOpen: failOpen.sort(compareText), failClosed: failClosed.sort(compareText), excluded };
}

function publishedMs(n: NodeObservations): number {
  const t = Date.parse(n.publishedAt);
  return Number.isNaN(t) ? -Infinity : t;
}

function isFresh(n: NodeObservations, now: number, staleAfterMs: number): boolean {
  const t = publishedMs(n);
  // A timestamp from the future (clock skew) counts as fresh rather than silencing the node.
  return t !== -Infinity && now - t <= staleAfterMs;
}

/** Locale-independent ordering, so every node sorts identically. */
function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
