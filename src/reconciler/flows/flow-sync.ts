// Connection-state sync between lb nodes (issue 24; docs/datapath.md "Connection-state sync"). xdp_lb publishes every
// new connection-table entry and every new SNAT translation or change of its state into a ring buffer (lb_sync.h)
// while this node has sync peers; every interval each lb node reads what the ring holds (flow-events.ts), decodes it
// (FlowDelta) and sends it, in bounded batches, to every other lb node over the authenticated peer channel
// (src/reconciler/peer/, kind 'flows.sync'); a peer inserts what its own current maps accept (importFlows). A scan
// of the whole tables (FlowDelta.read) remains for what the ring cannot tell: a peer not yet in sync (first contact,
// or after a failed send) is sent the whole table, in batches across intervals; records the ring had no room for and
// a new program (restart, resize) are found by a scan, run then and every scanIntervalMs as a safety net. The NAT
// table alone is read every natReadIntervalMs for what XDP does not publish: translations in use sent again at half
// their idle timeout, and translations that ended. Nothing in the packet path waits for this: publishing never
// blocks, and the maps are read and written from here, never from XDP. Nor does the daemon's event loop (health
// checks, peer channels): scans, the ring's read and a peer's import go in slices of SCAN_PAGE_ENTRIES with the
// loop's turn between them.
import type { BpfObject } from '../../bpf/libbpf.js';
import { FlowDelta, SCAN_PAGE_ENTRIES, nextTurn, RECENCY_MARGIN_MS, importFlows, type CtEntry, type FlowEntries, type ImportResult, type RefuseReason,
  type SnatEntry } from '../../bpf/dataplane/flow-state.js';
import type { DesiredState } from '../../render/state.js';
import { SyncEventReader, setSyncPublish, syncLost } from '../../bpf/dataplane/flow-events.js';
import { copiesOwnedBy } from '../../bpf/dataplane/snat-return.js';
import type { PeerChannel } from '../peer/index.js';
import { agedBy, encodeFlowSync, parseFlowSync, parseResyncMark, type Item, type ResyncMark } from './flow-sync-wire.js';
import { EntryBudget } from './entry-budget.js';
import { incomingBatch, newPeerState, type PeerState, type PeerSyncReport } from './flow-sync-peer.js';
import { serviceRealsOf, servingRealsOf } from './service-reals.js';
import type { HandBackWait } from './snat-takeover.js';

export { encodeFlowSync, parseFlowSync, parseResyncMark, type ResyncMark } from './flow-sync-wire.js';
export type { PeerSyncReport } from './flow-sync-peer.js';
export { serviceRealsOf, servingRealsOf } from './service-reals.js';

export const FLOW_SYNC_KIND = 'flows.sync';
export const FLOW_SYNC_DEFAULTS = {
  /** How often the ring of published entries is read and the batches sent. */
  intervalMs: 100,
  /** The scan of the whole tables as a safety net (it also runs on a resync, a lost record and a new program). */
  scanIntervalMs: 10_000,
  /** The NAT table alone between scans: translations' refreshes and ends (the ring carries new and changed ones). */
  natReadIntervalMs: 1_000,
  /** Records read from the ring per interval (the rest waits in the ring for the next). */
  maxEventsPerTick: 65_536,
  /** Entries in one message; a body of this many entries stays under maxBodyBytes. */
  maxEntriesPerMessage: 2048,
  maxBodyBytes: 512 * 1024,
  /** Messages sent to one peer per interval: a delta or resync beyond it waits for the next interval. */
  maxMessagesPerTick: 8,
  /** Entries one peer may have inserted here per second (sustained; twice that at once): what it can evict. */
  importPerSecond: 50_000,
  /** Entries waiting for one peer (its resync plus deltas); beyond it they are dropped and a resync is due. */
  maxQueued: 262_144,
  /** A peer's ends of translations ('gone') over its entry budget, kept here per peer and applied as the budget
   * refills (the peer does not send them again, and a copy left in place would linger until its idle timeout);
   * beyond it they are dropped and counted ('rate-limited'). */
  maxDeferredGone: 4096,
  /** This node's ends queued for a peer when its queue was lost (a failed send, an overflow): kept for the resync that
   * follows (the table it sends holds no ends); beyond it they are dropped and counted ('dropped'). */
  maxGoneToResend: 4096,
  timeoutMs: 2_000,
  /** A peer's connection-table entry replaces this node's only when its choice is this much newer (flow-state.ts). */
  recencyMarginMs: RECENCY_MARGIN_MS,
};


export interface FlowSyncOptions {
  node: string;
  channel: Pick<PeerChannel, 'serve' | 'request'>;
  /** The other lb nodes of the applied config. */
  peers: () => string[];
  /** The data plane's object (it changes when the tables are resized). */
  object: () => BpfObject | null;
  /** The applied desired state: which reals each service lists. */
  desired: () => DesiredState | null;
  /** An lb node's own SNAT address (the applied config): a peer's translations are accepted only with the sender's. */
  snatAddressOf?: (node: string) => string | undefined;
  /** This node started with empty maps and its rejoin gate is held (rejoin-gate.ts): it asks its peers for its own
   * SNAT translations back and takes them (importFlows takeOwnBack); at any other time it refuses them. */
  rejoining?: () => boolean;
  log?: { warn(m: string): void; info?(m: string): void };
  now?: () => number;
  limits?: Partial<typeof FLOW_SYNC_DEFAULTS>;
}

/** A translation's identity on the wire: its client flow, real endpoint and SNAT address and port (not its times). */
const snatIdentity = (e: SnatEntry): string =>
  `${e.client}/${e.clientPort}/${e.vip}/${e.vipPort}/${e.proto}/${e.realId}/${e.realPort}/${e.snatAddress}/${e.snatPort}`;

/** xs.push(...more) without passing every element as an argument (a scan of 100,000 entries exceeds the stack). */
function append<T>(xs: T[], more: T[]): void {
  for (const x of more) xs.push(x);
}


/** What this node's own reading found (not per peer): for status, metrics and bench/sync. */
export interface FlowSyncLocalReport {
  /** Entries read from the ring of published entries. */
  published: number;
  /** Records the program could not publish (its ring was full; a scan followed), since the program was loaded. */
  lost: number;
  /** Scans of the whole tables, and when the last one ran (ms since the epoch; null: none yet). */
  scans: number;
  lastScanAt: number | null;
  /** Whether xdp_lb publishes new entries now (this node has sync peers). */
  publishing: boolean;
}

export class FlowSync {
  private readonly limits: typeof FLOW_SYNC_DEFAULTS;
  private readonly delta = new FlowDelta();
  /** The ring reader of the loaded program (a new program, a new reader), and what it has seen. */
  private events: SyncEventReader | null = null;
  private lostSeen = 0;
  private scanDue = true;
  /** The least time between two scans: four times the last one's duration. */
  private scanGapMs = 0;
  /** The NAT table's own reads (between scans): when the last ran, and the least time to the next. */
  private lastNatReadAt = -Infinity;
  private natGapMs = 0;
  private readonly local: FlowSyncLocalReport = { published: 0, lost: 0, scans: 0, lastScanAt: null, publishing: false };
  private readonly peerState = new Map<string, PeerState>();
  private readonly budget: EntryBudget;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private resyncSeq = 0;
  /** Per peer: its batch being imported (and the ones queued behind it), settled: receive() chains the next on it. */
  private readonly receiving = new Map<string, Promise<void>>();

  constructor(private readonly o: FlowSyncOptions) {
    this.limits = { ...FLOW_SYNC_DEFAULTS, ...o.limits };
    this.now = o.now ?? Date.now;
    this.budget = new EntryBudget(this.limits.importPerSecond);
    o.channel.serve(FLOW_SYNC_KIND, (from, body) => this.receive(from, body), {
      maxBodyBytes: this.limits.maxBodyBytes,
      // one message per peer per interval and a resync's batches: the channel counts messages, EntryBudget entries
      ratePerSec: Math.ceil((1000 / this.limits.intervalMs) * this.limits.maxMessagesPerTick),
      burst: 2 * Math.ceil((1000 / this.limits.intervalMs) * this.limits.maxMessagesPerTick),
    });
  }

  start(): void {
    const loop = () => {
      if (this.stopped) return;
      this.running = this.tick().catch((e: unknown) => this.o.log?.warn(`flow sync: ${(e as Error).message}`))
        .finally(() => {
          this.running = null;
          if (!this.stopped) this.timer = setTimeout(loop, this.limits.intervalMs);
        });
    };
    this.timer = setTimeout(loop, this.limits.intervalMs);
  }

  /** Stops the rounds; the program stops publishing (nobody reads its ring any more). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    const obj = this.o.object();
    try {
      if (obj) setSyncPublish(obj, false);
    } catch (e) {
      this.o.log?.warn(`flow sync: ${(e as Error).message}`);
    }
    this.events?.close();
    this.events = null;
  }

  /** The ring reader of `obj` (a new one when the program changed: it has a ring of its own, and a scan finds what
   * the old ring held unread); null when the program has no ring (then every round scans). */
  private reader(obj: BpfObject): SyncEventReader | null {
    if (this.events?.obj === obj) return this.events;
    this.events?.close();
    this.events = null;
    this.lostSeen = 0;
    this.scanDue = true;
    try {
      this.events = new SyncEventReader(obj);
    } catch (e) {
      this.o.log?.warn(`flow sync: no ring of published entries (${(e as Error).message}); scanning the tables every round`);
    }
    return this.events;
  }

  private state(peer: string): PeerState {
    let s = this.peerState.get(peer);
    if (!s) {
      s = newPeerState();
      this.peerState.set(peer, s);
    }
    return s;
  }

  /**
   * One round: read what the program published, scan the tables when due (a peer to resync, records lost, a new
   * program, the safety interval), queue what is new for every peer (everything for a peer out of sync), send.
   */
  async tick(): Promise<void> {
    const obj = this.o.object();
    if (!obj) return;
    const peers = this.o.peers().filter((p) => p !== this.o.node);
    for (const p of [...this.peerState.keys()]) if (!peers.includes(p)) this.peerState.delete(p);
    for (const p of peers) {
      const s = this.state(p);
      if (!s.resyncWanted) continue;
      s.resyncWanted = false;
      // a send under way serves unless the peer asked for its own translations and it does not carry them
      if (s.resync && (s.resync.ownBack || !s.ownOwed)) continue;
      this.loseQueue(s); // the new resync leads with the ends that were queued
    }
    // the packet path publishes only while someone reads: a node without sync peers pays one branch per new flow
    setSyncPublish(obj, peers.length > 0);
    this.local.publishing = peers.length > 0;
    const at = this.now();
    // ends first: a port given to another client flow is free on the peer before the new translation arrives. `readAt`:
    // when the entries' ages were read (this clock), not the round's start: the round yields (ring slices, a peer's
    // deferred ends, scan pages) and encodeFlowSync adds the time since readAt, so an age stamped earlier would be
    // overstated by the gap (a peer's newer choice could then fail the recency margin)
    const items = (e: FlowEntries, readAt: number): Item[] => [...(e.gone ?? []).map((x): Item => ({ kind: 'gone', e: x, at: readAt })),
      ...e.ct.map((x): Item => ({ kind: 'ct', e: x, at: readAt })), ...e.snat.map((x): Item => ({ kind: 'snat', e: x, at: readAt }))];
    const events = this.reader(obj);
    const fresh: Item[] = [];
    if (events) {
      // in slices, the event loop's turn between them: decoding 65,536 records at once held it for up to a second
      for (let read = 0; read < this.limits.maxEventsPerTick;) {
        const raw = events.read(Math.min(SCAN_PAGE_ENTRIES, this.limits.maxEventsPerTick - read));
        read += raw.records;
        const readAt = this.now();
        const published = this.delta.published(obj, raw);
        this.local.published += published.ct.length + published.snat.length;
        append(fresh, items(published, readAt));
        if (raw.records < SCAN_PAGE_ENTRIES) break;
        await nextTurn();
      }
      const lost = syncLost(obj);
      if (lost !== this.lostSeen) this.scanDue = true; // the ring had no room: only a scan finds those entries
      this.lostSeen = lost;
      this.local.lost = lost;
    }
    // a peer's ends that waited for its budget: applied as it refills, before anything else of that peer
    for (const p of peers) await this.applyDeferredGone(obj, p, this.state(p));
    const resync = peers.some((p) => { const s = this.state(p); return !s.inSync && s.queue.length === 0; });
    let all: (() => Promise<FlowEntries>) | null = null;
    let scanAt = at;
    // a big table takes a while to read: scans (not the ring's rounds) get at most a fifth of the time
    const since = this.local.lastScanAt === null ? Infinity : at - this.local.lastScanAt;
    const wanted = !events || this.scanDue || resync;
    if ((wanted && since >= this.scanGapMs) || since >= Math.max(this.limits.scanIntervalMs, this.scanGapMs)) {
      const began = this.now();
      // cooperative: the read yields to the event loop between pages (FlowDelta.read), so a big table never holds
      // the daemon's health checks and peer channels for long
      const scan = await this.delta.read(obj); // its ages: as of its start (FlowDelta.read), `began`
      append(fresh, items(scan.changed, began));
      scanAt = began;
      all = scan.all;
      this.scanDue = false;
      this.local.scans++;
      this.local.lastScanAt = at;
      this.scanGapMs = 4 * (this.now() - began);
      this.lastNatReadAt = at;
    } else if (at - this.lastNatReadAt >= Math.max(this.limits.natReadIntervalMs, this.natGapMs)) {
      // the NAT table alone (its refreshes and ends, which the ring does not carry), spaced like the scans
      const began = this.now();
      append(fresh, items(await this.delta.readTranslations(obj), began));
      this.lastNatReadAt = at;
      this.natGapMs = 4 * (this.now() - began);
    }
    // the whole table as this scan read it, decoded once (cooperatively) for every peer that (re)joins
    const table = all && peers.some((p) => { const s = this.state(p); return !s.inSync && s.queue.length === 0; }) ? items(await all(), scanAt) : null;
    await Promise.all(peers.map(async (peer) => {
      const s = this.state(peer);
      if (!s.inSync && s.queue.length === 0) {
        if (!table) return; // a resync waits for the next scan
        // a rejoining peer that asked: the copies of its own translations this node kept, inside the resync
        const ownBack = s.ownOwed;
        const backAt = this.now();
        const back = ownBack ? await this.ownTranslationsOf(obj, peer) : [];
        // (re)join: the whole table, then deltas; ends lost with an earlier queue first (the table holds no ends)
        s.queue = [...s.goneToResend, ...table];
        s.goneToResend = [];
        append(s.queue, back.map((x): Item => ({ kind: 'snat', e: x, at: backAt })));
        // marked: its last batch says done (an empty table is one empty batch), so a rejoining peer knows it has all
        s.resync = { seq: this.nextSeq(), left: s.queue.length, first: true, ownBack, returned: back.length };
      } else append(s.queue, fresh);
      // the next round starts a resync with the table as it is then
      if (s.queue.length > this.limits.maxQueued) this.loseQueue(s, s.queue.length - this.limits.maxQueued);
      const answered = s.answeredAt;
      await this.send(peer, s);
      if (s.helloWanted) {
        s.helloWanted = false;
        if (s.answeredAt === answered) await this.hello(peer, s);
      }
    }));
  }

  /** Loses what is queued for the peer (a failed send, an overflow, a resync it asked for): the next round sends it
   * the whole table again, led by the queued ends (keepGone). `dropped` counts the entries over the queue's bound
   * (`overflow`) and the ends that did not fit (docs/metrics.md). */
  private loseQueue(s: PeerState, overflow = 0): void {
    s.report.dropped += overflow + this.keepGone(s);
    s.queue = [];
    s.resync = null;
    s.inSync = false;
    s.report.inSync = false;
  }

  /** Keeps the ends (`gone`) of a queue about to be lost for the peer's next resync, up to maxGoneToResend; returns
   * how many did not fit (dropped: the peer's copies then end by their own idle timeout). */
  private keepGone(s: PeerState): number {
    let lost = 0;
    for (const it of s.queue) {
      if (it.kind !== 'gone') continue;
      if (s.goneToResend.length < this.limits.maxGoneToResend) s.goneToResend.push(it);
      else lost++;
    }
    return lost;
  }

  /** An empty message, for the peer's answer (nudge). A failure counts like any failed send. */
  private async hello(peer: string, s: PeerState): Promise<void> {
    try {
      this.answered(peer, s, await this.o.channel.request(peer, FLOW_SYNC_KIND, { v: 1, ct: [], snat: [] }, { timeoutMs: this.limits.timeoutMs }));
    } catch (e) {
      s.report.lastError = (e as Error).message;
      this.loseQueue(s);
    }
  }

  /** The peer answered a message: its daemon lives; `needOwn` in the answer: it rejoins and its own translations have
   * not all reached it (a send of them under way serves; otherwise one is started). */
  private answered(peer: string, s: PeerState, answer: unknown): void {
    s.answeredAt = this.now();
    if ((answer as { needOwn?: unknown } | null)?.needOwn !== true || this.o.snatAddressOf?.(peer) === undefined) return;
    s.ownOwed = true;
    if (!s.resync?.ownBack) s.resyncWanted = true;
  }

  /** The copies this node holds of `peer`'s own SNAT translations (snat-return.ts); none without its address. */
  private async ownTranslationsOf(obj: BpfObject, peer: string): Promise<SnatEntry[]> {
    const address = this.o.snatAddressOf?.(peer);
    return address ? copiesOwnedBy(obj, address) : [];
  }

  /** This node rejoins with a SNAT address of its own: it asks for its translations back and waits for them. */
  private wantsOwnBack(): boolean {
    return (this.o.rejoining?.() ?? false) && this.o.snatAddressOf?.(this.o.node) !== undefined;
  }

  private nextSeq(): number {
    this.resyncSeq = this.resyncSeq >= 0xffffffff ? 1 : this.resyncSeq + 1;
    return this.resyncSeq;
  }

  private async send(peer: string, s: PeerState): Promise<void> {
    for (let m = 0; m < this.limits.maxMessagesPerTick && (s.queue.length > 0 || s.resync); m++) {
      const r = s.resync;
      // a resync's batches hold only its table's entries, so that `done` comes with the table's last one
      const batch = s.queue.slice(0, r ? Math.min(r.left, this.limits.maxEntriesPerMessage) : this.limits.maxEntriesPerMessage);
      const need = r?.first && !this.state(peer).report.resyncReceived;
      const mark: ResyncMark | undefined = r ? { seq: r.seq, done: batch.length >= r.left, ...(need && { need: true }),
        ...(need && this.wantsOwnBack() && { needOwn: true }), ...(r.ownBack && { ownBack: true }) } : undefined;
      if (mark?.needOwn) s.askedOwn = true;
      let answer: unknown;
      try {
        answer = await this.o.channel.request(peer, FLOW_SYNC_KIND, encodeFlowSync(batch, this.now(), mark), { timeoutMs: this.limits.timeoutMs });
      } catch (e) {
        s.report.lastError = (e as Error).message;
        // unknown what arrived: the table is sent again once the peer answers, after the ends that were waiting
        this.loseQueue(s);
        break;
      }
      if (r) {
        r.left -= batch.length;
        r.first = false;
        if (mark!.done) {
          if (s.resync === r) s.resync = null;
          if (r.ownBack) {
            s.ownOwed = false;
            this.o.log?.info?.(`flow sync: ${peer}'s own SNAT translations sent back: ${r.returned} (resync ${r.seq})`);
          }
        }
      }
      this.answered(peer, s, answer);
      s.queue.splice(0, batch.length);
      s.report.sent += batch.length;
      if (batch.length > 0) s.report.lagMs = this.now() - batch[0]!.at;
      delete s.report.lastError;
    }
    if (s.queue.length === 0 && !s.resync && s.report.lastError === undefined) s.inSync = true;
    s.report.inSync = s.inSync;
    s.report.queued = s.queue.length;
  }

  /**
   * A peer's batch: checked, bounded by the peer's entry budget, inserted where this node's maps accept it. One at a
   * time per peer, in arrival order: an import yields to the event loop between slices, and a sender that timed out
   * meanwhile resends (or sends its next batch) while the first still runs; its batches must not overtake each other
   * (a resync's `done` counted before an earlier batch of it was rate-limited would mark it whole).
   */
  receive(from: string, body: unknown): Promise<ImportResult & { needOwn?: true }> {
    const before = this.receiving.get(from) ?? Promise.resolve();
    const run = before.then(() => this.receiveNow(from, body));
    const settled = run.then(() => undefined, () => undefined);
    this.receiving.set(from, settled);
    void settled.then(() => { if (this.receiving.get(from) === settled) this.receiving.delete(from); });
    return run;
  }

  private async receiveNow(from: string, body: unknown): Promise<ImportResult & { needOwn?: true }> {
    const entries = parseFlowSync(body, this.limits.maxEntriesPerMessage);
    const mark = parseResyncMark(body);
    const s = this.state(from);
    const gone = entries.gone ?? [];
    const n = gone.length + entries.ct.length + entries.snat.length;
    s.report.received += n;
    const obj = this.o.object();
    if (!obj && n > 0) throw new Error('no data plane loaded');
    const ownBack = mark ? incomingBatch(s, mark, this.wantsOwnBack() && s.askedOwn) : false;
    const r = obj ? await this.import(obj, from, s, entries, n, ownBack) : { applied: 0, unchanged: 0, refused: {} };
    if (mark) this.resyncArrived(from, s, mark, (r.refused as { 'rate-limited'?: number })['rate-limited'] ?? 0);
    s.heardAt = this.now();
    // rejoining: every answer says whether this node still waits for its own translations from the sender
    if (!this.wantsOwnBack() || s.report.resyncReceived) return r;
    s.askedOwn = true;
    return { ...r, needOwn: true };
  }

  /** A batch of `from`'s resync arrived: its end completes the resync unless some of it was refused for the rate;
   * `need` (its first batch: it lacks this node's table, a restart) starts a resync to it unless one is under way. */
  private resyncArrived(from: string, s: PeerState, mark: ResyncMark, rateLimited: number): void {
    const incoming = s.incoming?.seq === mark.seq ? s.incoming : null; // incomingBatch opened it
    if (incoming && rateLimited > 0) incoming.whole = false;
    // rejoining with a SNAT address: a table without this node's own translations (a send that began before the
    // ask reached the peer, or one it did not ask for) is not the whole of what this node needs; the answer follows
    if (incoming && mark.done && incoming.whole && !s.report.resyncReceived && (incoming.ownBack || !this.wantsOwnBack())) {
      s.report.resyncReceived = true;
      this.o.log?.info?.(`flow sync: ${from}'s whole table received (resync ${mark.seq}${incoming.ownBack ? `, with ${s.report.returned} own SNAT translations back` : ''})`);
    }
    if (mark.need && !s.resync) s.resyncWanted = true; // the next round sends it the whole table
    if (mark.needOwn && this.o.snatAddressOf?.(from) !== undefined) {
      // it rejoins: its own translations go back inside a resync (one under way without them is started again)
      s.ownOwed = true;
      if (!s.resync?.ownBack) s.resyncWanted = true;
    }
  }

  private async import(obj: BpfObject, from: string, s: PeerState, entries: FlowEntries, n: number, ownBack: boolean)
    : Promise<ImportResult & { deferred?: number }> {
    // the ends that waited for this peer's budget go first: older than anything in this message
    await this.applyDeferredGone(obj, from, s);
    const gone = entries.gone ?? [];
    const granted = this.budget.take(from, n, this.now());
    let left = granted;
    const within = <T>(xs: T[]): T[] => { const t = xs.slice(0, left); left -= t.length; return t; };
    const take: FlowEntries = { gone: within(gone), ct: within(entries.ct), snat: within(entries.snat) };
    // ends over the budget wait here (bounded) rather than leave the peer's copies until their idle timeout; the
    // rest over the budget is refused (a flooding peer evicts no more than its budget either way)
    const late = gone.slice(take.gone!.length);
    const room = Math.max(0, this.limits.maxDeferredGone - s.deferredGone.length);
    const at = this.now();
    for (const e of late.slice(0, room)) s.deferredGone.push({ e, at });
    const deferred = Math.min(room, late.length);
    // an end still waiting is older than a translation of the same identity this message brings (the sender made it
    // again, or refreshed it): applied after it, it would delete the translation that lives again. Dropped.
    if (take.snat.length > 0 && s.deferredGone.length > 0) {
      const again = new Set(take.snat.map(snatIdentity));
      s.deferredGone = s.deferredGone.filter((d) => !again.has(snatIdentity(d.e)));
    }
    const over = n - granted - deferred;
    const r = await this.importAndCount(obj, from, s, take, ownBack);
    const refused: ImportResult['refused'] & { 'rate-limited'?: number } = { ...r.refused };
    if (over > 0) refused['rate-limited'] = over;
    if (over > 0) s.report.refused['rate-limited'] = (s.report.refused['rate-limited'] ?? 0) + over;
    s.report.goneDeferred = s.deferredGone.length;
    return { applied: r.applied, unchanged: r.unchanged, refused, ...(deferred > 0 && { deferred }), ...(r.returned && { returned: r.returned }) };
  }

  /**
   * Inserts what a peer's budget granted (importFlows) and counts it in the peer's report: in order (ends first), in
   * slices of SCAN_PAGE_ENTRIES with the event loop's turn between them, so a message of 2,048 entries (several
   * system calls each) does not hold health checks and other peers' messages for its whole import.
   */
  private async importAndCount(obj: BpfObject, from: string, s: PeerState, take: FlowEntries, ownBack = false): Promise<ImportResult> {
    const out: ImportResult = { applied: 0, unchanged: 0, refused: {} };
    const all = [...(take.gone ?? []).map((e) => ['gone', e] as const), ...take.ct.map((e) => ['ct', e] as const),
      ...take.snat.map((e) => ['snat', e] as const)];
    for (let at = 0; at < all.length; at += SCAN_PAGE_ENTRIES) {
      if (at > 0) await nextTurn();
      const slice: FlowEntries = { ct: [], snat: [], gone: [] };
      for (const [kind, e] of all.slice(at, at + SCAN_PAGE_ENTRIES)) {
        if (kind === 'ct') slice.ct.push(e as CtEntry);
        else (kind === 'gone' ? slice.gone! : slice.snat).push(e as SnatEntry);
      }
      const desired = this.o.desired();
      const r = importFlows(this.o.object() ?? obj, slice, { serviceReals: serviceRealsOf(desired), realServes: servingRealsOf(desired),
        senderSnatAddress: from === this.o.node ? undefined : this.o.snatAddressOf?.(from), marginMs: this.limits.recencyMarginMs,
        takeOwnBack: ownBack && from !== this.o.node && this.wantsOwnBack() });
      this.delta.remember(r.keys);
      out.applied += r.applied;
      if (r.returned) out.returned = (out.returned ?? 0) + r.returned;
      out.unchanged += r.unchanged;
      for (const [k, v] of Object.entries(r.refused)) out.refused[k as RefuseReason] = (out.refused[k as RefuseReason] ?? 0) + v;
    }
    s.report.applied += out.applied;
    s.report.returned += out.returned ?? 0;
    for (const [k, v] of Object.entries(out.refused)) s.report.refused[k as RefuseReason] = (s.report.refused[k as RefuseReason] ?? 0) + v;
    return out;
  }

  /** Applies as many of a peer's deferred ends as its budget grants now, aged by the time they waited (an end's idle
   * age says how long before sending its last packet was; the wait here adds to it, as a queue does at the sender). */
  private async applyDeferredGone(obj: BpfObject, from: string, s: PeerState): Promise<void> {
    if (s.deferredGone.length === 0) return;
    const now = this.now();
    const granted = this.budget.take(from, s.deferredGone.length, now);
    if (granted > 0) {
      const gone = s.deferredGone.splice(0, granted).map(({ e, at }) => ({ ...e, ageMs: agedBy(e.ageMs, now - at), idleMs: agedBy(e.idleMs, now - at) }));
      await this.importAndCount(obj, from, s, { ct: [], snat: [], gone });
    }
    s.report.goneDeferred = s.deferredGone.length;
  }

  /** Has `peer`'s whole table arrived since this node started (the rejoin gate, rejoin-gate.ts)? */
  resyncReceived(peer: string): boolean {
    return this.peerState.get(peer)?.report.resyncReceived ?? false;
  }

  /**
   * Whether `peer`, lost and answering again since `sinceMs` (this node's clock), has what it needs to take its SNAT
   * address back from this node (snat-takeover.ts): its sync spoke since (a message of it arrived, or it answered one
   * of this node's: its daemon lives), and no ask of it for its own translations is unanswered. A rebooted peer asks
   * on the first batch of its resync (`needOwn`) and in every answer while it still waits (so whichever comes first
   * tells); the ask is answered by a resync carrying them that completed. A node that only lost its link asks
   * nothing: its first message or answer suffices.
   */
  handBackReady(peer: string, sinceMs: number): boolean {
    return this.handBackWaitingFor(peer, sinceMs).length === 0;
  }

  /** What handBackReady still waits for (the takeover's report, the status): 'sync-spoke' (nothing heard from the
   * peer's sync since `sinceMs`), 'own-translations' (its ask for them is unanswered); empty: ready. */
  handBackWaitingFor(peer: string, sinceMs: number): HandBackWait[] {
    const s = this.peerState.get(peer);
    if (!s) return ['sync-spoke'];
    const spoke = Math.max(s.heardAt ?? -Infinity, s.answeredAt ?? -Infinity) >= sinceMs;
    return [...(spoke ? [] : ['sync-spoke' as const]), ...(s.ownOwed ? ['own-translations' as const] : [])];
  }

  /** Makes this node's next round send `peer` a message (an empty one if nothing else is due), so that it answers:
   * the takeover asks for this while a returned peer has not spoken (an idle sync sends nothing). */
  nudge(peer: string): void {
    this.state(peer).helloWanted = true;
  }

  /** This node's reading: entries published, records lost, scans (metrics, bench/sync). */
  localReport(): FlowSyncLocalReport {
    return { ...this.local };
  }

  /** Per peer: sync health (status, metrics). */
  report(): Record<string, PeerSyncReport> {
    return Object.fromEntries([...this.peerState].map(([p, s]) => [p, { ...s.report, refused: { ...s.report.refused }, queued: s.queue.length }]));
  }
}
