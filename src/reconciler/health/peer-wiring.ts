// The lb daemon's side of consensus voting, assembled over the node's peer channel (when it has one: the peer
// secret is given): the observations it serves, the vote reader, and the report of refused messages that status
// shows. Without a channel there are no peer votes at all: consensus mode then decides on this node's own
// observations and says so loudly (the daemon refuses to start in consensus mode without a peer secret; this covers
// a config that switches to consensus later).
import type { ConfigModel } from '../../render/model.js';
import type { NodeObservations } from '../../render/health-quorum.js';
import type { PeerChannel, PeerChannelMetrics, RejectReason } from '../peer/index.js';
import { agreementMode } from './agreement.js';
import { lbPeers, PeerVoteReader, serveObservations, type SilentPeer } from './peer-exchange.js';

/**
 * A peer that has not answered for this long is reported silent (status health.peers.silent, `gitlb status`): five
 * rounds of the default 2 s peer poll, so one lost answer or a slow moment does not name a node.
 */
export const PEER_SILENT_MS = 10_000;

/** status/<node>.yaml health.peers: how votes are authenticated and what was refused (docs/health.md). */
export interface HealthPeerReport {
  authentication: 'shared-secret' | 'node-key' | 'none';
  /** Refused peer messages since start, by reason (requests in and answers out, every kind, together). */
  rejected: Partial<Record<RejectReason, number>>;
  lastRejected?: { reason: RejectReason; direction: 'in' | 'out'; peer: string; at: string };
  /** Something the operator must fix: consensus without authentication, or refused messages in the last 10 min. */
  warning?: string;
  /** Peer lb nodes that have not answered for PEER_SILENT_MS (their daemon stopped or was killed, or they are cut off). */
  silent?: SilentPeer[];
}

export interface HealthPeers {
  /** Present with a channel: the authenticated votes of the other lb nodes. */
  readObservations?: () => Promise<NodeObservations[]>;
  /** The feed found no way to read authenticated votes in consensus mode. */
  unauthenticated(): void;
  /** Peer lb nodes not heard for PEER_SILENT_MS (read on every poll, in any health mode, while there is a channel). */
  silent(): SilentPeer[];
  report(): HealthPeerReport;
}

const RECENT_MS = 10 * 60_000;

export function healthPeers(o: {
  node: string;
  channel: PeerChannel | null;
  /** How the channel authenticates (status only). */
  authentication?: HealthPeerReport['authentication'];
  health: () => unknown;
  model: () => ConfigModel | null;
  /** Votes refused after the channel accepted the answer are counted here too ('out'). */
  metrics?: PeerChannelMetrics;
  log: { warn(m: string): void };
  now?: () => number;
}): HealthPeers {
  const now = o.now ?? Date.now;
  const { channel } = o;
  // Refusals of votes the channel accepted (bad body, publishedAt out of the window); the channel counts the rest.
  const voteRejected: Partial<Record<RejectReason, number>> = {};
  let lastVote: HealthPeerReport['lastRejected'];
  let reader: PeerVoteReader | null = null;
  if (channel) {
    serveObservations(channel, o.node, o.health);
    reader = new PeerVoteReader({ channel, timeoutMs: 1000, now, log: o.log,
      rejected: (reason, peer) => {
        o.metrics?.rejected(reason, 'out');
        voteRejected[reason] = (voteRejected[reason] ?? 0) + 1;
        lastVote = { reason, direction: 'out', peer, at: new Date(now()).toISOString() };
      } });
  }
  let warnedUnauthenticated = false;
  // Only lb nodes of the applied config: a node the config dropped is no longer a peer, silent or not.
  const silentNow = () => {
    const current = new Set(lbPeers(o.model(), o.node, 0).map((p) => p.node));
    return (reader?.silentPeers(PEER_SILENT_MS) ?? []).filter((p) => current.has(p.peer));
  };
  return {
    ...(reader && channel && { readObservations: () => reader.read(lbPeers(o.model(), o.node, 0).map((p) => p.node)) }),
    unauthenticated() {
      if (warnedUnauthenticated) return;
      warnedUnauthenticated = true;
      o.log.warn('health: consensus mode without peer authentication (no --peer-secret-file or --peer-key): peer votes are not read; deciding on this node\'s own observations only');
    },
    silent: () => silentNow(),
    report() {
      const silent = silentNow();
      const model = o.model();
      const consensus = model !== null && agreementMode(model).mode === 'consensus';
      const fromChannel = channel?.rejections() ?? { counts: {}, last: null };
      const rejected = { ...fromChannel.counts };
      for (const [reason, n] of Object.entries(voteRejected) as [RejectReason, number][]) rejected[reason] = (rejected[reason] ?? 0) + n;
      const c = fromChannel.last;
      const channelLast = c ? { reason: c.reason, direction: c.direction, peer: c.who, at: c.at } : undefined;
      const last = !channelLast ? lastVote : !lastVote ? channelLast : Date.parse(lastVote.at) > Date.parse(channelLast.at) ? lastVote : channelLast;
      const total = Object.values(rejected).reduce((a, b) => a + (b ?? 0), 0);
      const recent = last && now() - Date.parse(last.at) < RECENT_MS;
      const warning = consensus && !channel
        ? 'consensus mode without peer authentication: no peer votes, deciding on local observations only; give --peer-secret-file or --peer-key'
        : recent ? `${total} peer messages refused since start (latest: ${last!.reason} ${last!.direction === 'in' ? 'from' : 'answer of'} ${last!.peer} at ${last!.at})` : undefined;
      return { authentication: o.authentication ?? (channel ? 'shared-secret' : 'none'), rejected, ...(last && { lastRejected: last }), ...(warning && { warning }),
        ...(silent.length && { silent }) };
    },
  };
}
