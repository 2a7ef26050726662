// Consensus mode needs what the other lb nodes observe. This feed reads it on a schedule — directly from the peers
// over HTTP (peer-http.ts, with the cluster's shared secret), or, without a secret, from their status files on the
// status branch — keeps the peers' observations, and reports when they change so the daemon re-renders (a real
// leaves the tables once a quorum of lb nodes sees it down).
import type { NodeObservations } from '../../render/health-quorum.js';
import { peerObservations } from './status.js';

export interface PeerFeedOptions {
  /** This node's name: its own status file is not a peer's vote. */
  node: string;
  /** Reads every node's status document from the status branch (parsed YAML objects with a `node` field). */
  readStatuses?: () => Promise<{ node: string }[]>;
  /** Reads the peers' observations directly (already checked); used instead of readStatuses when given. */
  readObservations?: () => Promise<NodeObservations[]>;
  /** Called when any peer's observations changed since the last refresh. */
  onChange: () => void;
  log?: { warn(msg: string): void; info?(msg: string): void };
}

export class PeerObservationFeed {
  private peers: NodeObservations[] = [];
  private fingerprint = '';
  private readonly reported = new Set<string>();
  /** The failure of reading the status branch last logged, and how many reads failed since (an outage logs once). */
  private readFailure: { message: string; count: number } | null = null;

  constructor(private readonly o: PeerFeedOptions) {}

  /** The latest observations of every other node that published some. */
  current(): NodeObservations[] {
    return this.peers;
  }

  async refresh(): Promise<void> {
    if (this.o.readObservations) {
      this.accept((await this.o.readObservations()).filter((p) => p.node !== this.o.node));
      return;
    }
    let docs: { node: string }[];
    try {
      docs = (await this.o.readStatuses?.()) ?? [];
    } catch (err) {
      // Keep the last known votes; the staleness bound in the quorum takes care of peers that went quiet.
      // Logged when the problem is new, not on every poll of a Git outage.
      const message = (err as Error).message;
      if (this.readFailure?.message !== message)
        this.o.log?.warn(`health: cannot read peers' status: ${message}${this.readFailure ? '' : ' (logged again only when the error changes)'}`);
      this.readFailure = { message, count: (this.readFailure?.count ?? 0) + 1 };
      return;
    }
    if (this.readFailure) {
      (this.o.log?.info ?? this.o.log?.warn)?.call(this.o.log, `health: reading peers' status recovered after ${this.readFailure.count} failed reads`);
      this.readFailure = null;
    }
    const peers: NodeObservations[] = [];
    for (const doc of docs) {
      if (doc.node === this.o.node || !('health' in doc)) continue;
      const r = peerObservations(doc.node, doc);
      if ('obs' in r) peers.push(r.obs);
      else if (!this.reported.has(r.error)) {
        this.reported.add(r.error); // one warning per distinct problem, not one per poll
        this.o.log?.warn(`health: ignoring a peer's vote: ${r.error}`);
      }
    }
    this.accept(peers);
  }

  private accept(peers: NodeObservations[]): void {
    peers.sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
    // publishedAt moves on every status write; only the observations themselves change the decision.
    const fingerprint = JSON.stringify(peers.map((p) => [p.node, p.observations]));
    this.peers = peers;
    if (fingerprint !== this.fingerprint) {
      this.fingerprint = fingerprint;
      this.o.onChange();
    }
  }
}
