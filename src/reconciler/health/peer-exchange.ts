// Consensus mode's votes, exchanged over the authenticated peer channel (src/reconciler/peer/) and nowhere else:
// every lb daemon answers 'health.observations' with its current observations, and asks every other lb node the
// same on the peer-poll schedule. A peer's status file on the status branch is never a vote (anyone who can push
// could write it); it is information for humans only.
//
// Besides the channel's checks (authentic, addressed to us, from an lb node of the config, answer bound to the
// request, dated inside the skew window), a vote's own publishedAt must lie inside the skew window of the local
// clock: a vote dated ahead would otherwise count as fresh until that date. Accepted votes are stored with
// publishedAt no later than the local time they arrived.
import type { ConfigModel } from '../../render/model.js';
import type { NodeObservations } from '../../render/health-quorum.js';
import { MAX_SKEW_MS, PeerError, type PeerAddress, type PeerChannel, type RejectReason } from '../peer/index.js';
import { peerObservations } from './status.js';

export const HEALTH_KIND = 'health.observations';
/** The request carries nothing ({}); answers are capped like the status documents they mirror. */
const MAX_REQUEST_BYTES = 1024;
const MAX_ANSWER_BYTES = 1024 * 1024;

/** The other lb nodes of `model` at their first address and `port`: who may vote, and where to ask. */
export function lbPeers(model: ConfigModel | null, self: string, port: number): PeerAddress[] {
  return (model?.nodes ?? [])
    .filter((n) => n.spec.role === 'lb' && n.metadata.name !== self && n.spec.addresses.length > 0)
    .map((n) => {
      const a = n.spec.addresses[0]!;
      return { node: n.metadata.name, url: `http://${a.includes(':') ? `[${a}]` : a}:${port}` };
    });
}

/** Answers peers' requests for this node's observations (`health`: HealthService.status()). */
export function serveObservations(channel: PeerChannel, node: string, health: () => unknown): void {
  // A peer polls every few seconds: 5/s sustained leaves room for restarts without letting one peer hog the node.
  channel.serve(HEALTH_KIND, () => ({ node, health: health() ?? null }), { maxBodyBytes: MAX_REQUEST_BYTES, ratePerSec: 5, burst: 10 });
}

/** Checks one authenticated answer; the peer's vote, or why it does not count. */
export function voteFromAnswer(peer: string, answer: unknown, now: number, skewMs = MAX_SKEW_MS):
  { obs: NodeObservations } | { reject: RejectReason; detail: string } {
  if (typeof answer !== 'object' || answer === null || (answer as { node?: unknown }).node !== peer)
    return { reject: 'bad-body', detail: 'answer speaks for another node' };
  const r = peerObservations(peer, answer);
  if ('error' in r) return { reject: 'bad-body', detail: r.error };
  const at = Date.parse(r.obs.publishedAt);
  if (at > now + skewMs) return { reject: 'future', detail: `vote published ${r.obs.publishedAt}, ahead of the local clock by more than ${skewMs / 1000} s` };
  if (at < now - skewMs) return { reject: 'stale', detail: `vote published ${r.obs.publishedAt}, behind the local clock by more than ${skewMs / 1000} s` };
  return { obs: { ...r.obs, publishedAt: new Date(Math.min(at, now)).toISOString() } };
}

/**
 * Asks every peer in parallel. A peer that cannot be read keeps its last good vote (the quorum's staleness bound
 * retires it), so one slow or unreachable peer neither blocks the others nor erases its vote at once.
 */
export class PeerVoteReader {
  private readonly last = new Map<string, NodeObservations>();
  private readonly lastError = new Map<string, string>();
  /** Per peer: when it last answered with a vote that counts, and when it was first asked (liveness, silentPeers). */
  private readonly heard = new Map<string, number>();
  private readonly firstAsked = new Map<string, number>();

  constructor(private readonly o: {
    channel: PeerChannel;
    timeoutMs: number;
    now?: () => number;
    /** Counts a vote refused after the channel accepted the answer (bad body, publishedAt out of the window). */
    rejected?: (reason: RejectReason, peer: string) => void;
    log?: { warn(m: string): void };
  }) {}

  async read(peers: string[]): Promise<NodeObservations[]> {
    const names = new Set(peers);
    for (const m of [this.last, this.heard, this.firstAsked, this.lastError] as Map<string, unknown>[]) for (const n of [...m.keys()]) if (!names.has(n)) m.delete(n);
    const asked = (this.o.now ?? Date.now)();
    for (const peer of peers) if (!this.firstAsked.has(peer)) this.firstAsked.set(peer, asked);
    await Promise.all(peers.map(async (peer) => {
      try {
        const answer = await this.o.channel.request(peer, HEALTH_KIND, {}, { timeoutMs: this.o.timeoutMs, maxAnswerBytes: MAX_ANSWER_BYTES });
        const vote = voteFromAnswer(peer, answer, (this.o.now ?? Date.now)());
        if ('reject' in vote) {
          this.o.rejected?.(vote.reject, peer);
          throw new PeerError(peer, HEALTH_KIND, vote.reject, vote.detail);
        }
        this.last.set(peer, vote.obs);
        this.heard.set(peer, (this.o.now ?? Date.now)());
        this.lastError.delete(peer);
      } catch (err) {
        const msg = (err as Error).message;
        // One warning per distinct problem, not one per round.
        if (this.lastError.get(peer) !== msg) this.o.log?.warn(`health: no vote from ${msg}`);
        this.lastError.set(peer, msg);
      }
    }));
    return [...this.last.values()];
  }

  /**
   * Peers that have not answered with a valid vote for `afterMs` or more (counted from their last good answer, or
   * from the first time they were asked): a stopped or killed daemon, a node cut off, or one that fails
   * authentication. Sorted by name.
   */
  silentPeers(afterMs: number): SilentPeer[] {
    const now = (this.o.now ?? Date.now)();
    const out: SilentPeer[] = [];
    for (const [peer, asked] of this.firstAsked) {
      const heard = this.heard.get(peer);
      const since = heard ?? asked;
      if (now - since < afterMs) continue;
      const error = this.lastError.get(peer);
      out.push({ peer, since: new Date(since).toISOString(), heard: heard !== undefined, ...(error && { lastError: error }) });
    }
    return out.sort((a, b) => (a.peer < b.peer ? -1 : a.peer > b.peer ? 1 : 0));
  }
}

/** A peer lb node this node has not heard from (status: health.peers.silent; `gitlb status` names it). */
export interface SilentPeer {
  peer: string;
  /** Its last valid answer, or (never heard) when this node first asked it. */
  since: string;
  heard: boolean;
  lastError?: string;
}
