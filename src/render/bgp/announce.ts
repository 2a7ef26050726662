// The announcement rule: which VIPs this lb node announces by BGP, and for each one it does not, why.
// Pure: the daemon gathers the facts (applied revision, data-plane state, health, shutdown) and asks here.
// A node announces a VIP only while it can serve it, because the router sends new flows wherever a route points.
import type { ConfigModel } from '../model.js';
import type { DesiredState } from '../state.js';
import { compareIps, ipFamily } from '../ip.js';

/** Why a VIP is not announced, in the order they are checked (the first that holds is reported). */
export type WithdrawReason =
  | 'stopping' // gitlb run is exiting with --withdraw-on-exit
  | 'decommissioned' // the applied revision does not name this node as an lb node with BGP settings
  | 'not applied' // no revision is applied and read back yet
  | 'data plane down' // the XDP program is not attached, or the last apply failed in the kernel
  | 'draining' // Node.spec.state: drain
  | 'awaiting resync' // rejoining with empty maps: the peers' connection state has not all arrived (rejoin-gate.ts)
  | 'no healthy real'; // no service on the VIP has an active, healthy real

export interface AnnounceFacts {
  node: string;
  /** The validated config of the revision the data plane serves (null before the first apply). */
  model: ConfigModel | null;
  /** The desired state as applied and read back, with the current health view (null: nothing applied). */
  desired: DesiredState | null;
  /** The XDP program is attached and the last apply of the served revision did not fail in the kernel. */
  dataPlaneUp: boolean;
  /** gitlb run is stopping and was told to withdraw first. */
  stopping: boolean;
  /** Services whose active reals are all down by the health checks, even where fail-open keeps them in the
   * table (so `desired` still calls them healthy). */
  servicesDown?: readonly string[];
  /** Rejoining with empty maps: announcements held until the peers' resync arrived or the bound passed. */
  awaitingResync?: boolean;
}

export interface VipAnnouncement {
  vip: string; // canonical address
  prefix: string; // vip/32 or vip/128
  family: 4 | 6;
  announced: boolean;
  reason?: WithdrawReason;
  /** Names of the services listening on the VIP, sorted. */
  services: string[];
}

/** Announced or the reason, as status and `gitlb status` print it: `announced`, `withdrawn: draining`. */
export function announcementText(a: Pick<VipAnnouncement, 'announced' | 'reason'>): string {
  return a.announced ? 'announced' : `withdrawn: ${a.reason}`;
}

/** One entry per VIP of the node's desired state, sorted by address. */
export function decideAnnouncements(f: AnnounceFacts): VipAnnouncement[] {
  const desired = f.desired;
  if (!desired) return [];
  const byVip = new Map<string, Set<number>>();
  for (const l of desired.vips) byVip.set(l.vip, (byVip.get(l.vip) ?? new Set()).add(l.serviceId));
  const node = f.model?.nodes.find((n) => n.metadata.name === f.node);
  const nodeReason: WithdrawReason | undefined = f.stopping
    ? 'stopping'
    : f.model && (!node || node.spec.role !== 'lb' || !node.spec.bgp || !f.model.cluster.spec.bgp)
      ? 'decommissioned'
      : !f.model
        ? 'not applied'
        : !f.dataPlaneUp
          ? 'data plane down'
          : node?.spec.state === 'drain'
            ? 'draining'
            : f.awaitingResync
              ? 'awaiting resync'
              : undefined;
  const services = new Map(desired.services.map((s) => [s.id, s]));
  const down = new Set(f.servicesDown ?? []);
  return [...byVip.keys()].sort(compareIps).map((vip) => {
    const svcs = [...byVip.get(vip)!].map((id) => services.get(id)).filter((s) => s !== undefined);
    // A real in `drain` keeps its flows but takes no new ones, so it does not make the VIP worth attracting.
    const serving = svcs.some((s) => !down.has(s.name) && s.reals.some((r) => r.healthy && r.state === 'active' && r.weight > 0));
    const reason = nodeReason ?? (serving ? undefined : 'no healthy real');
    const family = ipFamily(vip);
    return {
      vip,
      prefix: `${vip}/${family === 4 ? 32 : 128}`,
      family,
      announced: reason === undefined,
      ...(reason ? { reason } : {}),
      services: svcs.map((s) => s.name).sort(),
    };
  });
}
