// The lb daemon's side of consensus voting, assembled: the peer channel (when the peer secret is given), the
// observations it serves, the vote reader, and the report of refused messages that status and metrics show.
// Without a peer secret there are no peer votes at all: consensus mode then decides on this node's own
// observations and says so loudly (the daemon refuses to start in consensus mode without one; this covers a config
// that switches to consensus later).
import type { ConfigModel } from '../../render/model.js';
import type { NodeObservations } from '../../render/health-quorum.js';
import { startPeerChannel, type PeerAuth, type PeerChannel, type PeerChannelMetrics, type RejectReason } from '../peer/index.js';
import { agreementMode } from './agreement.js';
import { lbPeers, PeerVoteReader, serveObservations } from './peer-exchange.js';

/** status/<node>.yaml health.peers: how votes are authenticated and what was refused (docs/health.md). */
export interface HealthPeerReport {
  authentication: 'shared-secret' | 'none';
  /** Refused peer messages since start, by reason (requests in and answers out together). */
  rejected: Partial<Record<RejectReason, number>>;
  lastRejected?: { reason: RejectReason; direction: 'in' | 'out'; peer: string; at: string };
  /** Something the operator must fix: consensus without authentication, or refused messages in the last 10 min. */
  warning?: string;
}

export interface HealthPeers {
  /** Present with a peer secret: the authenticated votes of the other lb nodes. */
  readObservations?: () => Promise<NodeObservations[]>;
  /** The feed found no way to read authenticated votes in consensus mode. */
  unauthenticated(): void;
  report(): HealthPeerReport;
  channel: PeerChannel | null;
  close(): Promise<void>;
}

const RECENT_MS = 10 * 60_000;

export async function startHealthPeers(o: {
  node: string;
  peer?: { auth: PeerAuth; port: number; listen: { host: string; port: number } };
  health: () => unknown;
  model: () => ConfigModel | null;
  metrics?: PeerChannelMetrics;
  log: { info(m: string): void; warn(m: string): void };
  now?: () => number;
}): Promise<HealthPeers> {
  const now = o.now ?? Date.now;
  const rejected: Partial<Record<RejectReason, number>> = {};
  let last: HealthPeerReport['lastRejected'];
  const count = (reason: RejectReason, direction: 'in' | 'out', peer: string) => {
    rejected[reason] = (rejected[reason] ?? 0) + 1;
    last = { reason, direction, peer, at: new Date(now()).toISOString() };
  };
  const port = o.peer?.port ?? 0;
  const peers = () => lbPeers(o.model(), o.node, port);
  let channel: PeerChannel | null = null;
  let reader: PeerVoteReader | null = null;
  if (o.peer) {
    channel = await startPeerChannel({
      node: o.node, host: o.peer.listen.host, port: o.peer.listen.port, auth: o.peer.auth, peers, log: o.log, now,
      metrics: { rejected: (reason, direction) => {
        o.metrics?.rejected(reason, direction);
        const l = channel?.rejections().last;
        count(reason, direction, l?.who ?? '?');
      } },
    });
    serveObservations(channel, o.node, o.health);
    o.log.info(`health: serving observations to peers on ${channel.url} (authenticated: shared secret)`);
    reader = new PeerVoteReader({ channel, timeoutMs: 1000, now, log: o.log,
      rejected: (reason, peer) => {
        o.metrics?.rejected(reason, 'out');
        count(reason, 'out', peer);
      } });
  }
  let warnedUnauthenticated = false;
  return {
    channel,
    ...(reader && { readObservations: () => reader.read(peers().map((p) => p.node)) }),
    unauthenticated() {
      if (warnedUnauthenticated) return;
      warnedUnauthenticated = true;
      o.log.warn('health: consensus mode without peer authentication (no --peer-secret-file): peer votes are not read; deciding on this node\'s own observations only');
    },
    report() {
      const model = o.model();
      const consensus = model !== null && agreementMode(model).mode === 'consensus';
      const total = Object.values(rejected).reduce((a, b) => a + (b ?? 0), 0);
      const recent = last && now() - Date.parse(last.at) < RECENT_MS;
      const warning = consensus && !channel
        ? 'consensus mode without peer authentication: no peer votes, deciding on local observations only; give --peer-secret-file'
        : recent ? `${total} peer messages refused since start (latest: ${last!.reason} ${last!.direction === 'in' ? 'from' : 'answer of'} ${last!.peer} at ${last!.at})` : undefined;
      return { authentication: channel ? 'shared-secret' : 'none', rejected: { ...rejected }, ...(last && { lastRejected: last }), ...(warning && { warning }) };
    },
    async close() {
      await channel?.close();
    },
  };
}
