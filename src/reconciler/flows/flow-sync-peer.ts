// One peer's side of the connection-state sync (flow-sync.ts): what this node keeps per peer, and the rule for a batch
// of the peer's resync that may give this node its own SNAT translations back (docs/security.md "Connection state").
import type { RefuseReason, SnatEntry } from '../../bpf/dataplane/flow-state.js';
import type { Item, ResyncMark } from './flow-sync-wire.js';

export interface PeerSyncReport {
  /** The whole table has been sent since the last failure. */
  inSync: boolean;
  sent: number;
  received: number;
  applied: number;
  refused: Partial<Record<RefuseReason | 'rate-limited', number>>;
  /** Entries dropped for this peer: queue full (a resync follows). */
  dropped: number;
  queued: number;
  /** Time from reading an entry (from the ring, or a scan) to the peer's answer, of the last batch sent (ms). */
  lagMs: number | null;
  lastError?: string;
  /** The peer's whole table (a resync it marked done, nothing of it refused for the rate) arrived since start; while
   * this node rejoins with a SNAT address of its own, only a resync that brought its own translations back counts. */
  resyncReceived: boolean;
  /** The peer's ends of translations over its entry budget, waiting here to be applied as the budget refills. */
  goneDeferred: number;
  /** Of `applied`: this node's own SNAT translations the peer sent back while this node rejoined. */
  returned: number;
}

export interface PeerState {
  queue: Item[];
  inSync: boolean;
  report: PeerSyncReport;
  /** The full-table send under way to this peer: its seq and the table's entries still at the head of the queue;
   * `ownBack`: it carries the peer's own translations (`returned` of them) back. */
  resync: { seq: number; left: number; first: boolean; ownBack: boolean; returned: number } | null;
  /** The peer's resync arriving here: its seq, whether every entry of it so far was taken (not rate-limited), whether
   * it is the answer to this node's ask for its own translations (`ownBack`: they are taken from its batches only), and
   * whether its last batch arrived (`done`: closed, no batch of it takes anything of this node's own any more). */
  incoming: { seq: number; whole: boolean; ownBack: boolean; done: boolean } | null;
  /** Seqs of the peer's earlier resyncs (the last few): a batch of one of them is not of the resync under way. */
  pastSeqs: number[];
  /** This node asked the peer for its own translations back (`needOwn` sent in a mark or an answer) since start. */
  askedOwn: boolean;
  /** The peer's ends over its budget (oldest first), with when they arrived: applied as the budget refills. */
  deferredGone: Array<{ e: SnatEntry; at: number }>;
  /** This node's ends that were queued for the peer when its queue was lost (a failed send, an overflow): a resync
   * sends the table, which holds no ends, so they lead the next one (bounded by maxGoneToResend). */
  goneToResend: Item[];
  /** The peer asked for its own translations back (`needOwn`) and no send carrying them has completed since. */
  ownOwed: boolean;
  /** A message of the peer asked for a (new) resync: the next round drops what is queued and starts one. Set by
   * receive(), applied by tick(), so that a send in flight cannot mark the peer in sync over the request. */
  resyncWanted: boolean;
  /** When a message of the peer last arrived here, and when it last answered one of this node's (this node's clock;
   * null: none since start): its daemon lives. */
  heardAt: number | null;
  answeredAt: number | null;
  /** Asked for by nudge(): an empty message this round if nothing else is sent, so that the peer answers. */
  helloWanted: boolean;
}

export function newPeerState(): PeerState {
  return { queue: [], inSync: false, resync: null, incoming: null, pastSeqs: [], askedOwn: false, deferredGone: [], goneToResend: [],
    ownOwed: false, resyncWanted: false, heardAt: null, answeredAt: null, helloWanted: false,
    report: { inSync: false, sent: 0, received: 0, applied: 0, refused: {}, dropped: 0, queued: 0, lagMs: null, resyncReceived: false,
      goneDeferred: 0, returned: 0 } };
}

/**
 * A batch of the peer's resync `mark` arrived: a new seq opens a new incoming resync (the one before it is over);
 * `asked`: this node's gate is held and it asked this peer for its own translations (`needOwn` sent). Returns whether
 * this batch may give this node its own translations back (importFlows takeOwnBack). Only a resync marked `ownBack` that this node asked this peer for: its gate held, its ask sent to this peer and not yet answered
 * by a whole resync, and the resync still open (its `done` batch not yet arrived, no later one begun). Any other
 * message (a delta, a resync not marked so, an earlier or closed one, one begun after the ask was answered) is
 * refused such translations as at any other time: a peer cannot make translations of this node's address whenever
 * the gate is held, nor have them passed on to third nodes as this node's own (full resyncs send owner-0 entries).
 */
export function incomingBatch(s: PeerState, mark: ResyncMark, asked: boolean): boolean {
  if (s.incoming?.seq !== mark.seq) {
    // a seq of an earlier resync of the peer is no answer to the ask (it is counted as before, nothing is taken back)
    const earlier = s.pastSeqs.includes(mark.seq);
    const was = s.incoming?.seq;
    if (was !== undefined) s.pastSeqs = [...s.pastSeqs.filter((x) => x !== was).slice(-7), was];
    s.incoming = { seq: mark.seq, whole: true, ownBack: !earlier && asked && !s.report.resyncReceived && mark.ownBack === true, done: false };
  }
  const open = s.incoming.ownBack && !s.incoming.done;
  if (mark.done) s.incoming.done = true;
  return open && asked && mark.ownBack === true;
}
