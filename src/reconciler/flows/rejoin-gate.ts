// The rejoin gate (issue 24; docs/bgp.md "Rejoining with empty maps"): an lb node that starts with EMPTY maps (a
// reboot, or its pins lost) must not attract flows before its peers' connection state has reached it, or ECMP
// moves established flows back to a node that knows nothing of them (SNAT connections get a new translation, DSR
// flows whose real is no longer the table's choice reset). So its BGP announcements are held until every sync peer
// of the applied config has sent it a complete resync (the `resync.done` mark, flow-sync.ts), or until the bound
// has passed since the gate was first asked (a lone or partitioned node, a peer that is down, an older peer that
// never marks its resync's end: none keeps the node dark for longer). Once released it stays released: a later
// resync (after a failed send) does not withdraw anything. A node that adopted its pinned maps (kill -9, upgrade),
// or runs without flow sync, is never held; one without sync peers is released at once. A node with a SNAT address
// also waits for its own translations: each peer's resync counts only once it brought back the copies of them that
// peer kept (flow-sync.ts, `needOwn` / `ownBack`), since replies of connections it translated before the reboot
// come back to it once it announces its address again.

export const REJOIN_BOUND_DEFAULT_MS = 30_000;

export type RejoinRelease = 'all peers resynced' | 'bound' | 'no peers';

export interface RejoinReport {
  /** 'off': not armed (pinned maps adopted, or no flow sync); 'held' / 'released' otherwise. */
  state: 'off' | 'held' | 'released';
  boundMs: number;
  /** When the gate was first asked with a config applied (ISO; null: not yet). */
  since: string | null;
  releasedAt: string | null;
  releasedBy: RejoinRelease | null;
  /** Sync peers whose complete resync has not arrived (while held; at a release by the bound, those it left out). */
  waitingFor: string[];
  /** Sync peers whose complete resync arrived since this node started. */
  resynced: string[];
}

export interface RejoinGateOptions {
  /** The node's maps were empty at start (no pinned data plane to adopt) and flow sync runs. */
  armed: boolean;
  boundMs?: number;
  /** The sync peers of the applied config (other lb nodes). */
  peers: () => string[];
  /** Has `peer`'s complete resync arrived since this node started (FlowSync.resyncReceived)? */
  resynced: (peer: string) => boolean;
  now?: () => number;
  log?: { info(m: string): void; warn(m: string): void };
  /** Told once, at the release (the status file is written then: it said `awaiting resync`). */
  onRelease?: (by: RejoinRelease) => void;
}

export class RejoinGate {
  private readonly boundMs: number;
  private readonly now: () => number;
  private since: number | null = null;
  private releasedAt: number | null = null;
  private releasedBy: RejoinRelease | null = null;
  private leftOut: string[] = [];

  constructor(private readonly o: RejoinGateOptions) {
    this.boundMs = o.boundMs ?? REJOIN_BOUND_DEFAULT_MS;
    this.now = o.now ?? Date.now;
  }

  /** Armed and not released yet (no clock read, nothing decided): while this holds the node takes its own SNAT
   * translations back from its peers (flow-sync.ts) and does not announce its own SNAT address (snat-takeover.ts). */
  rejoining(): boolean {
    return this.o.armed && this.releasedBy === null;
  }

  /** Whether announcements are held now; asked only once a config is applied (its peers are known then). */
  holding(): boolean {
    if (!this.o.armed || this.releasedBy) return false;
    const at = this.now();
    const peers = this.o.peers();
    if (this.since === null) {
      this.since = at;
      if (peers.length > 0) this.o.log?.info(`bgp: rejoining with empty maps: announcements held until ${peers.join(', ')} sent their whole table (at most ${this.boundMs / 1000} s)`);
    }
    const waiting = peers.filter((p) => !this.o.resynced(p));
    if (peers.length === 0) this.release(at, 'no peers', []);
    else if (waiting.length === 0) this.release(at, 'all peers resynced', []);
    else if (at - this.since >= this.boundMs) this.release(at, 'bound', waiting);
    return this.releasedBy === null;
  }

  private release(at: number, by: RejoinRelease, leftOut: string[]): void {
    this.releasedAt = at;
    this.releasedBy = by;
    this.leftOut = leftOut;
    const waited = `${((at - (this.since ?? at)) / 1000).toFixed(1)} s`;
    if (by === 'bound') this.o.log?.warn(`bgp: rejoin: announcements released by the bound (${this.boundMs / 1000} s) without the whole table of ${leftOut.join(', ')}`);
    else if (by === 'all peers resynced') this.o.log?.info(`bgp: rejoin: resync received from every peer (${this.o.peers().join(', ')}) after ${waited}: announcements released`);
    else this.o.log?.info('bgp: rejoin: no sync peers: announcements released');
    this.o.onRelease?.(by);
  }

  report(): RejoinReport {
    if (this.o.armed && this.since !== null) this.holding();
    const peers = this.o.peers();
    const iso = (x: number | null) => (x === null ? null : new Date(x).toISOString());
    return {
      state: !this.o.armed ? 'off' : this.releasedBy ? 'released' : 'held',
      boundMs: this.boundMs,
      since: iso(this.since),
      releasedAt: iso(this.releasedAt),
      releasedBy: this.releasedBy,
      waitingFor: this.releasedBy ? this.leftOut : peers.filter((p) => !this.o.resynced(p)),
      resynced: peers.filter((p) => this.o.resynced(p)),
    };
  }
}
