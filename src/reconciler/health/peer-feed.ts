// Consensus mode needs what the other lb nodes observe. This feed reads it on a schedule, over the authenticated
// peer channel only (peer-exchange.ts), keeps the peers' votes, and reports when they change so the daemon
// re-renders (a real leaves the tables once a quorum of lb nodes sees it down). Peers' status files on the status
// branch are never read as votes: anyone who can push to that branch could write them.
import type { NodeObservations } from '../../render/health-quorum.js';

export interface PeerFeedOptions {
  /** This node's name: a vote in its name from elsewhere is not a peer's vote. */
  node: string;
  /** Reads the peers' votes (authenticated and checked; peer-exchange.ts). Without it no peer votes. */
  readObservations?: () => Promise<NodeObservations[]>;
  /** Called when any peer's observations changed since the last refresh. */
  onChange: () => void;
  /** Called on a refresh without a way to read authenticated votes (consensus mode without a peer secret). */
  onUnauthenticated?: () => void;
}

export class PeerObservationFeed {
  private peers: NodeObservations[] = [];
  private fingerprint = '';

  constructor(private readonly o: PeerFeedOptions) {}

  /** The latest observations of every other node that published some. */
  current(): NodeObservations[] {
    return this.peers;
  }

  async refresh(): Promise<void> {
    if (!this.o.readObservations) {
      this.o.onUnauthenticated?.();
      return;
    }
    this.accept((await this.o.readObservations()).filter((p) => p.node !== this.o.node));
  }

  private accept(peers: NodeObservations[]): void {
    peers.sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
    // publishedAt moves on every read; only the observations themselves change the decision.
    const fingerprint = JSON.stringify(peers.map((p) => [p.node, p.observations]));
    this.peers = peers;
    if (fingerprint !== this.fingerprint) {
      this.fingerprint = fingerprint;
      this.o.onChange();
    }
  }
}
