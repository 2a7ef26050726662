// Connection state of the LB program for sharing between lb nodes (issue 24, docs/datapath.md "Connection-state
// sync"): what is new or changed in the pinned connection table (lb_conntrack) and the NAT table (lb_snat_rev /
// lb_snat_fwd) since the last read, and the checked insert of entries another lb node sent. No I/O but the maps:
// the transport and its bounds are src/reconciler/flows/flow-sync.ts.
//
// Entries name reals by id and VIPs by listener, never by this node's slots: ids are rendered from the config, the
// same on every node; a slot is each node's own and is looked up here on insert.
import type { BpfMap, BpfObject } from '../libbpf.js';
import { deleteGone } from './flow-gone.js';
import { MAX_AGE_MS, ageOf, markOf, validAge } from './flow-age.js';
import { OWNER_BYTES, SnatOwners } from './snat-owners.js';
import { PAGE_ENTRIES, forEachPaged, nextTurn } from './paging.js';
import { takeBack } from './snat-return.js';
import { readRingMembership } from './rings.js';
import { mergeHeldTranslation, replaceHeldFlow, restoreForward } from './flow-merge.js';

export { MAX_AGE_MS, ageOf, markOf } from './flow-age.js';
import { addr16, addrText, decodeFlowKey, decodeFlowValue, decodeVipValue, encodeFlowKey, encodeFlowValue, encodeU32, encodeVipKey, familyOf,
  MODE, realSlotOf, type FlowKey } from './codec.js';
import { SNAT_MAPS, SNAT_REV_IDENTITY_BYTES as SNAT_IDENTITY_BYTES, SNAT_REV_LAST_SEEN_AT as SNAT_LAST_SEEN_AT,
  SNAT_REV_OWNER_AT as SNAT_OWNER_BYTE, SNAT_REV_STATE_AT as SNAT_STATE_AT, SNAT_STATE, decodeSnatConfig, decodeSnatFwd, decodeSnatRev,
  decodeSnatRevKey, encodeSnatFwd, encodeSnatRev, encodeSnatRevKey, monotonicNs, snatFwdKey, type SnatConfig } from './snat.js';

/**
 * A connection-table entry: the client's flow (dst = VIP), the real it was given and how long ago (`ageMs`: the
 * sender's now minus the entry's recency mark, null when unknown). Monotonic clocks differ between nodes, so a mark
 * crosses the wire only as an age; the receiver turns it back into a mark on its own clock.
 */
export interface CtEntry { src: string; dst: string; sport: number; dport: number; proto: number; realId: number; ageMs: number | null }

/** A SNAT translation: the client's flow, its real endpoint and the SNAT address and port it was given; `ageMs`: since
 * the translation was made, `idleMs`: since its last packet at the sender (null when unknown). */
export interface SnatEntry {
  client: string; vip: string; clientPort: number; vipPort: number; proto: number;
  realId: number; realPort: number; snatAddress: string; snatPort: number; closing: boolean; ageMs: number | null;
  idleMs: number | null;
}

/** `gone`: translations of this node that ended here (expired, swept, or their port given to another client), with
 * their last packet's age as `idleMs`: peers delete their copies (flow-gone.ts). */
export interface FlowEntries { ct: CtEntry[]; snat: SnatEntry[]; gone?: SnatEntry[] }

/** Why an entry from a peer was not inserted (counted per reason). */
export type RefuseReason =
  | 'no-listener' // the VIP:port/protocol is not a listener of this node, or of another mode
  | 'no-real' // the real is not a real of this node, or not one the service's current ring names
  | 'exists' // this node holds its own entry for the flow (with a real the current ring names): never overwritten
  | 'snat-address' // the translation's SNAT address is not the sending node's own
  | 'snat-own-port' // the port lies in this node's own snatPorts range: this node allocates it itself
  | 'snat-port-taken' // this node holds the port towards that real endpoint for another client flow
  | 'bad-age' // the age is negative, not a whole number of ms, or older than MAX_AGE_MS
  | 'not-owner' // a deletion of a translation that is not the sender's (this node's own, or another client flow's)
  | 'newer' // a deletion of a copy that saw a packet here after the sender's last one: the flow moved here
  | 'table-full';

export interface ImportResult {
  applied: number;
  unchanged: number;
  refused: Partial<Record<RefuseReason, number>>;
  /** Of `applied`: this node's own translations a peer sent back while it rejoins (ImportOptions.takeOwnBack). */
  returned?: number;
}

/** Entries of a table read in one batched system call, and handled before a scan yields to the event loop (paging.ts). */
export const SCAN_PAGE_ENTRIES = PAGE_ENTRIES;
export { nextTurn };

/** A connection-table value for a peer's entry, with the recency mark `chosenNs` (this node's clock) and no last-seen
 * (0: no packet of it seen here yet; xdp_lb writes it on the first hit). */
function encodeCtValue(realId: number, serviceId: number, slot: number, chosenNs: bigint): Buffer {
  return encodeFlowValue({ realId, serviceId, realSlot: slot, lastSeen: 0, chosenNs });
}

/** What identifies a connection-table value for the delta: its real and its recency mark (a SYN that re-read the
 * table changes the mark even when the real stays, and the peers' copies must learn it). */
const ctIdentity = (v: Buffer, at = 0) => `${v.readUInt32LE(at)}/${v.readBigUInt64LE(at + 16)}`;

// lb_snat_rev's value (snat.ts): a change of its identity (another value: another translation, the old one is gone) or
// of its state is sent; its owner byte tells another node's copy; its last packet's time says whether it is in use.

/** A translation as FlowDelta last read it: its value, when it was last queued for the peers, and whether a peer
 * sent it (then its end is not this node's to announce). */
interface SnatSeen { v: Buffer; sentNs: bigint; fromPeer: boolean }

/** How long after it was last sent a translation still in use is sent again: half its idle timeout, so the peers'
 * copies (whose idle timeout runs from the sender's last packet) never expire while it is in use here. */
function refreshAfterNs(proto: number, closing: boolean, cfg: SnatConfig): bigint {
  const t = proto === 17 ? cfg.timeouts.udpNs : closing ? cfg.timeouts.tcpClosingNs : cfg.timeouts.tcpEstablishedNs;
  return t / 2n;
}

const ctOf = (k: FlowKey, v: Buffer, at: number, nowNs: bigint): CtEntry => ({ src: k.src, dst: k.dst, sport: k.sport, dport: k.dport,
  proto: k.proto, realId: v.readUInt32LE(at), ageMs: ageOf(v.readBigUInt64LE(at + 16), nowNs) });

/**
 * What a node has to tell its peers: every read returns the entries that are new or changed since the previous
 * read (the first read: all of them). Entries this node inserted for a peer are remembered as seen, so they are
 * not sent back. Connection-table entries leave by LRU eviction on each node on its own (not sent: an eviction
 * says that node's table was full, not that the connection ended). This node's translations are sent again while
 * in use, at half their idle timeout (a peer's copy expires on its own otherwise), and their end (swept, expired,
 * the port given to another client) is sent as `gone`.
 */
export class FlowDelta {
  /** lb_conntrack key (latin1 string of its bytes) -> the real id and recency mark last seen (ctIdentity) */
  private ct = new Map<string, string>();
  /** lb_snat_rev key (latin1) -> the translation last seen (this node's own: owner 0) */
  private snat = new Map<string, SnatSeen>();
  /** The maps a read under way is building (it yields between pages): what remember() is told meanwhile goes there too. */
  private scanningCt: Map<string, string> | null = null;
  private scanningSnat: Map<string, SnatSeen> | null = null;

  /**
   * Reads both tables and returns what changed since the previous read, decoded; `all()` decodes the whole table as
   * read (for a peer's resync), only when asked: decoding is most of a read's cost. Cooperative: the tables are read
   * in pages of SCAN_PAGE_ENTRIES (one batched system call each) and `pause` (the event loop's next turn) runs after
   * every page, in all() too, so a table of 100,000 entries never holds the daemon's event loop (health checks,
   * peer channels) for more than a page's work. Entries a peer's sync inserts meanwhile (remember) count as seen.
   */
  async read(obj: BpfObject, pause: () => Promise<void> = nextTurn): Promise<{ changed: FlowEntries; all: () => Promise<FlowEntries> }> {
    const changed: FlowEntries = { ct: [], snat: [], gone: [] };
    const nowNs = monotonicNs();
    const ct = new Map<string, string>();
    const ctEntries: Array<[Buffer, Buffer]> = [];
    this.scanningCt = ct;
    try {
      await forEachPaged(obj.map('lb_conntrack'), (k, v) => {
        const id = k.toString('latin1');
        const what = ctIdentity(v);
        ct.set(id, what);
        ctEntries.push([k, v]);
        if (this.ct.get(id) !== what) changed.ct.push(ctOf(decodeFlowKey(k), v, 0, nowNs));
      }, pause);
    } finally {
      this.scanningCt = null;
    }
    this.ct = ct;
    const revEntries = await this.readSnat(obj, nowNs, changed, pause);
    const all = async (): Promise<FlowEntries> => {
      const snatOf = snatDecoder(obj, nowNs);
      const out: FlowEntries = { ct: [], snat: [] };
      for (let i = 0; i < ctEntries.length; i++) {
        const [k, v] = ctEntries[i]!;
        out.ct.push(ctOf(decodeFlowKey(k), v, 0, nowNs));
        if ((i + 1) % SCAN_PAGE_ENTRIES === 0) await pause();
      }
      for (let i = 0; i < revEntries.length; i++) {
        const [k, v] = revEntries[i]!;
        if (!v[SNAT_OWNER_BYTE]) {
          const e = snatOf(k, v);
          if (e) out.snat.push(e);
        }
        if ((i + 1) % SCAN_PAGE_ENTRIES === 0) await pause();
      }
      return out;
    };
    return { changed, all };
  }

  /**
   * The NAT table alone, as read() reads it (and as cooperatively): translations that changed or are new, the ones
   * due for a refresh, and the ones that ended (`gone`). Its cost follows the NAT table, not the connection table
   * (the sync reads it every second; the connection table's new entries come from the ring).
   */
  async readTranslations(obj: BpfObject, pause: () => Promise<void> = nextTurn): Promise<FlowEntries> {
    const changed: FlowEntries = { ct: [], snat: [], gone: [] };
    await this.readSnat(obj, monotonicNs(), changed, pause);
    return changed;
  }

  /** Reads lb_snat_rev into `changed` (and this.snat); returns its entries as read. */
  private async readSnat(obj: BpfObject, nowNs: bigint, changed: FlowEntries, pause: () => Promise<void>): Promise<Array<[Buffer, Buffer]>> {
    const cfgBuf = obj.map(SNAT_MAPS.config).lookup(Buffer.alloc(4));
    const cfg = cfgBuf ? decodeSnatConfig(Buffer.from(cfgBuf)) : null;
    const snatOf = snatDecoder(obj, nowNs);
    const rev = obj.map(SNAT_MAPS.rev);
    const revEntries: Array<[Buffer, Buffer]> = [];
    const snat = new Map<string, SnatSeen>();
    const ended = (k: Buffer, was: SnatSeen) => {
      // only what this node made: a copy a peer sent ends on its own (or by the peer's own word)
      if (was.fromPeer) return;
      const e = snatOf(k, was.v);
      if (e) changed.gone!.push(e);
    };
    this.scanningSnat = snat;
    try {
      await forEachPaged(rev, (k, v) => {
        revEntries.push([k, v]);
        if (v[SNAT_OWNER_BYTE]) return; // another node's translation (owner != 0): its owner sends it
        const id = k.toString('latin1');
        const was = this.snat.get(id);
        // the translation's identity and state: its client flow, real and open/closing (bytes 0..40 of the value), not
        // its timestamps. The state is sent too: a closing translation reopened by a SYN of the same 5-tuple (a client
        // reusing its port) must reopen the peers' copies, which would otherwise expire 10 s after the FIN there and
        // leave the flow without a translation on the node ECMP moves it to.
        const same = was && was.v.subarray(0, SNAT_IDENTITY_BYTES).equals(v.subarray(0, SNAT_IDENTITY_BYTES));
        if (was && !same) ended(k, was); // the port was given to another client flow: the old translation is gone
        const fromPeer = !!same && was.fromPeer;
        if (same && was.v[SNAT_STATE_AT] === v[SNAT_STATE_AT]) {
          // unchanged: sent again when in use since it was last sent and half its idle timeout has passed since
          const lastSeen = v.readBigUInt64LE(SNAT_LAST_SEEN_AT);
          const due = cfg && !was.fromPeer && lastSeen > was.sentNs &&
            nowNs - was.sentNs >= refreshAfterNs(k[36]!, v[SNAT_STATE_AT] === SNAT_STATE.closing, cfg);
          const e = due ? snatOf(k, v) : null;
          if (e) changed.snat.push(e);
          snat.set(id, { v, sentNs: e ? nowNs : was.sentNs, fromPeer });
          return;
        }
        snat.set(id, { v, sentNs: nowNs, fromPeer });
        const e = snatOf(k, v);
        if (e) changed.snat.push(e);
      }, pause);
    } finally {
      this.scanningSnat = null;
    }

    for (const [id, was] of this.snat) if (!snat.has(id)) ended(Buffer.from(id, 'latin1'), was);
    this.snat = snat;
    return revEntries;
  }

  /**
   * Entries the packet path published (lb_sync.h; read by flow-events.ts), decoded as a read decodes them; an entry
   * identical to what was last seen (a retransmitted SYN writing the same real) is left out, and so is another node's
   * translation (its owner sends it). A translation on a port that held another client flow ends that one (`gone`),
   * as in a read. What is returned is remembered as seen: the next read does not send it again.
   */
  published(obj: BpfObject, raw: { ct: Array<[Buffer, Buffer]>; snat: Array<[Buffer, Buffer]> }): FlowEntries {
    const out: FlowEntries = { ct: [], snat: [], gone: [] };
    const nowNs = monotonicNs();
    for (const [k, v] of raw.ct) {
      const id = k.toString('latin1');
      const what = ctIdentity(v);
      if (this.ct.get(id) === what) continue;
      this.ct.set(id, what);
      out.ct.push(ctOf(decodeFlowKey(k), v, 0, nowNs));
    }
    if (raw.snat.length === 0) return out;
    const snatOf = snatDecoder(obj, nowNs);
    for (const [k, v] of raw.snat) {
      if (v[SNAT_OWNER_BYTE]) continue;
      const id = k.toString('latin1');
      const was = this.snat.get(id);
      const same = was && was.v.subarray(0, SNAT_IDENTITY_BYTES).equals(v.subarray(0, SNAT_IDENTITY_BYTES));
      if (same && was.v[SNAT_STATE_AT] === v[SNAT_STATE_AT]) continue;
      if (was && !same && !was.fromPeer) {
        const old = snatOf(k, was.v);
        if (old) out.gone!.push(old);
      }
      this.snat.set(id, { v: Buffer.from(v), sentNs: nowNs, fromPeer: !!same && was.fromPeer });
      const e = snatOf(k, v);
      if (e) out.snat.push(e);
    }
    return out;
  }

  /** Entries inserted for a peer: seen, so the next read does not send them back. This node's own translations a
   * peer sent back (`own`) are this node's again: refreshed while in use and their end announced, like any it makes. */
  remember(keys: { ct: Array<[Buffer, Buffer]>; snat: Array<[Buffer, Buffer]>; own?: Array<[Buffer, Buffer]> }): void {
    for (const [k, v] of keys.ct) {
      const id = k.toString('latin1');
      this.ct.set(id, ctIdentity(v));
      this.scanningCt?.set(id, ctIdentity(v));
    }
    const nowNs = monotonicNs();
    for (const [k, v] of keys.snat) {
      if (v[SNAT_OWNER_BYTE]) continue;
      const seen = { v, sentNs: nowNs, fromPeer: true };
      this.snat.set(k.toString('latin1'), seen);
      this.scanningSnat?.set(k.toString('latin1'), seen);
    }
    for (const [k, v] of keys.own ?? []) {
      const seen = { v, sentNs: nowNs, fromPeer: false };
      this.snat.set(k.toString('latin1'), seen);
      this.scanningSnat?.set(k.toString('latin1'), seen);
    }
  }
}

/** Decodes lb_snat_rev entries of this node into translations (its SNAT address from lb_snat_config); null for an
 * entry of a family the node has no SNAT address of. */
function snatDecoder(obj: BpfObject, nowNs: bigint): (k: Buffer, v: Buffer) => SnatEntry | null {
  const cfgBuf = obj.map(SNAT_MAPS.config).lookup(Buffer.alloc(4));
  const cfg = cfgBuf ? decodeSnatConfig(Buffer.from(cfgBuf)) : null;
  return (k, v) => {
    const key = decodeSnatRevKey(k);
    const rev = decodeSnatRev(v, key.family);
    const snatAddress = key.family === 4 ? cfg?.addr4 : cfg?.addr6;
    if (!snatAddress) return null;
    return { client: rev.client, vip: rev.vip, clientPort: rev.clientPort, vipPort: rev.vipPort, proto: key.proto,
      realId: rev.realId, realPort: key.realPort, snatAddress, snatPort: key.snatPort, closing: rev.state === SNAT_STATE.closing,
      ageMs: ageOf(rev.createdNs, nowNs), idleMs: ageOf(rev.lastSeenNs, nowNs) };
  };
}

/**
 * Which reals a service lists (active, draining or unhealthy: every real an established flow may still use); from
 * the applied desired state. Without it any real of the node is accepted.
 */
export type ServiceReals = (serviceId: number, realId: number) => boolean;

/**
 * Whether the current ring of a service names a real slot: the membership bitmap stored after the ring's entries
 * (rings.ts ringMembership), read once per service and import. A ring without a bitmap word for the slot (none, or
 * one written before bitmaps) names nothing here: the entry is refused rather than trusted.
 */
function ringNames(rings: BpfMap): (serviceId: number, slot: number) => boolean {
  const words = new Map<number, Uint32Array | null>();
  return (serviceId, slot) => {
    let w = words.get(serviceId);
    if (w === undefined) {
      w = null;
      const inner = rings.openInner(encodeU32(serviceId));
      if (inner) {
        try {
          w = readRingMembership(inner);
        } finally {
          inner.close();
        }
      }
      words.set(serviceId, w);
    }
    return !!w && ((w[slot >>> 5] ?? 0) >>> (slot & 31) & 1) === 1;
  };
}

/**
 * Inserts entries a peer sent, each checked against this node's current maps: the VIP listener must exist with a
 * mode of the entry's kind (the service id is this node's, never the sender's), the real must be a real of this
 * node that the service still lists (`serviceReals`: active, drained or unhealthy; a real of another service or of
 * none is refused), and for replacing an entry this node holds, one the service's current ring names (xdp_lb trusts
 * any non-SYN hit, so a peer must never move a flow this node carries where the current table does not send new
 * ones; a flow this node holds nothing of keeps the real its carrier gives it: drain lets established flows finish
 * on every node), and a translation must
 * use the sending node's own SNAT address (`senderSnatAddress`, from the applied config; never a third node's),
 * with a port outside this node's own range that no other client flow holds here. A connection-table entry this node
 * holds for the flow with another real is replaced only by a strictly newer choice: the peer's recency mark (its age
 * turned into a mark on this clock) later than this node's by more than `marginMs`, for a real that is active and
 * healthy in the applied state (`realServes`) besides being in the ring; otherwise it stays ('exists'). An entry of
 * unknown age never replaces one; this node's entry of unknown age (mark 0) is the oldest. Idempotent: an entry with
 * the real already held changes nothing. Returns what happened and the keys inserted (for FlowDelta.remember).
 */
export interface ImportOptions {
  /** The reals each service lists in the applied state (drained and unhealthy ones too); without it any real of the node. */
  serviceReals?: ServiceReals;
  /** The reals active and healthy in the applied state: only such a real may take over a flow this node holds. */
  realServes?: ServiceReals;
  /** The sending node's own SNAT address (the applied config); translations of any other address are refused. */
  senderSnatAddress?: string;
  /** How much newer a peer's choice must be to replace this node's (RECENCY_MARGIN_MS). */
  marginMs?: number;
  /**
   * This node is rejoining with empty maps (its rejoin gate held): a translation of its OWN SNAT address with a port of
   * its own range is one it made before, sent back by a peer that kept a copy; it is inserted as its own (owner 0),
   * but only where this node holds no translation on that real endpoint and port nor one of that client flow (its
   * own are never overwritten). At any other time such a translation is refused as before ('snat-address', or
   * 'snat-own-port' when the address is shared): a peer cannot make translations of this node's address. The caller
   * sets it only for a batch of a resync marked `ownBack` that this node asked that peer for, while it is open and the
   * gate held (flow-sync.ts incomingBatch): never for a delta or any other message.
   */
  takeOwnBack?: boolean;
}

/**
 * A peer's connection-table entry replaces this node's only when its choice is newer by more than this. The age a
 * peer sends is taken when it sends; the time the message then takes to arrive makes the peer's choice look that much
 * newer here, so the margin covers a slow delivery. Two choices of one 5-tuple within a second of each other (a SYN
 * that reached both nodes) keep each node's own.
 */
export const RECENCY_MARGIN_MS = 1000;


/** Whether a peer's choice (mark on this clock) is strictly newer than the one held, by more than the margin. */
export function newerChoice(peerMark: bigint, heldMark: bigint, marginMs: number): boolean {
  if (peerMark === 0n) return false;
  return heldMark === 0n || peerMark > heldMark + BigInt(marginMs) * 1_000_000n;
}

export function importFlows(obj: BpfObject, entries: FlowEntries, opts: ImportOptions = {})
  : ImportResult & { keys: { ct: Array<[Buffer, Buffer]>; snat: Array<[Buffer, Buffer]>; own: Array<[Buffer, Buffer]> } } {
  const { serviceReals, realServes, senderSnatAddress, marginMs = RECENCY_MARGIN_MS, takeOwnBack = false } = opts;
  const result: ImportResult = { applied: 0, unchanged: 0, refused: {} };
  // own: this node's translations taken back (FlowDelta treats them as made here: refreshed and ended by this node)
  const keys = { ct: [] as Array<[Buffer, Buffer]>, snat: [] as Array<[Buffer, Buffer]>, own: [] as Array<[Buffer, Buffer]> };
  const refuse = (r: RefuseReason) => { result.refused[r] = (result.refused[r] ?? 0) + 1; };
  const vips = obj.map('lb_vips');
  const reals = obj.map('lb_reals');
  const listener = (addr: string, port: number, proto: number) => {
    const v = vips.lookup(encodeVipKey({ addr, family: familyOf(addr), port, proto }));
    return v ? decodeVipValue(Buffer.from(v)) : null;
  };
  const inRing = ringNames(obj.map('lb_rings'));
  // a real this node has that the service still lists (active, drained or unhealthy): what an entry for a flow this
  // node holds nothing of may name; without the applied state, only a real the current ring names
  const listedReal = (realId: number, family: number, serviceId: number) => {
    const r = reals.lookup(encodeU32(realId));
    if (!r || r[16] !== family) return null;
    const b = Buffer.from(r);
    return (serviceReals ? serviceReals(serviceId, realId) : inRing(serviceId, realSlotOf(b))) ? b : null;
  };

  const nowNs = monotonicNs();
  // ends first: a port the sender gave to another client flow is free here before its new translation
  if (entries.gone?.length) {
    const d = deleteGone(obj, entries.gone, { senderSnatAddress, marginMs, nowNs }, refuse);
    result.applied += d.deleted;
    result.unchanged += d.unchanged;
  }
  const ct: BpfMap = obj.map('lb_conntrack');
  for (const e of entries.ct) {
    if (!validAge(e.ageMs)) { refuse('bad-age'); continue; }
    const family = familyOf(e.dst);
    const l = listener(e.dst, e.dport, e.proto);
    if (!l || l.mode === MODE.snat) { refuse('no-listener'); continue; }
    const r = listedReal(e.realId, family, l.serviceId);
    if (!r) { refuse('no-real'); continue; }
    const key = encodeFlowKey({ src: e.src, dst: e.dst, sport: e.sport, dport: e.dport, proto: e.proto, family });
    const mark = markOf(e.ageMs, nowNs);
    const value = encodeCtValue(e.realId, l.serviceId, realSlotOf(r), mark);
    const old = ct.lookup(key);
    // the same real (a replay, or a SYN that chose it again): nothing to change
    if (old && Buffer.from(old).subarray(0, 12).equals(value.subarray(0, 12))) { result.unchanged++; continue; }
    // Replacing the entry held here (this node's choice, or an earlier peer's) needs more than a listed real: the
    // current ring must name it, and it must be the newer choice of a real that serves, so a peer cannot move a flow
    // this node chose later, nor to a real the table only lists. A flow this node holds nothing of is inserted with
    // any real the service still lists, drained and unhealthy ones included: the node that carried it keeps sending
    // it there (xdp_lb trusts a hit whatever the real's state), and re-hashing it here would reset it.
    if (old && !inRing(l.serviceId, realSlotOf(r))) { refuse('no-real'); continue; }
    if (old && (!newerChoice(mark, decodeFlowValue(Buffer.from(old)).chosenNs, marginMs) ||
      (realServes && !realServes(l.serviceId, e.realId)))) { refuse('exists'); continue; }
    // over a held entry: from the entry as it is right before the write (flow-merge.ts), a SYN's choice since wins
    let written: Buffer | null;
    try {
      written = old ? replaceHeldFlow(ct, key, Buffer.from(old), value) : (ct.update(key, value, 'noexist'), value);
    } catch (err) {
      refuse((err as { code?: string }).code === 'EEXIST' ? 'exists' : 'table-full');
      continue;
    }
    if (!written) { refuse('exists'); continue; }
    result.applied++;
    keys.ct.push([key, written]);
  }

  if (entries.snat.length === 0) return { ...result, keys };
  const cfgBuf = obj.map(SNAT_MAPS.config).lookup(Buffer.alloc(4));
  const cfg = cfgBuf ? decodeSnatConfig(Buffer.from(cfgBuf)) : null;
  const rev: BpfMap = obj.map(SNAT_MAPS.rev);
  const fwd: BpfMap = obj.map(SNAT_MAPS.fwd);
  const owners = new SnatOwners(obj.map(SNAT_MAPS.owners));
  for (const e of entries.snat) {
    if (!validAge(e.ageMs) || !validAge(e.idleMs)) { refuse('bad-age'); continue; }
    const family = familyOf(e.vip);
    const own = family === 4 ? cfg?.addr4 : cfg?.addr6;
    // this node's address (shared, the port from another node's range), or another lb node's (kept, with its owner)
    let owner = 0;
    // while rejoining only: a translation this node made itself (its address, its range), sent back
    const mine = takeOwnBack && !!cfg && own === e.snatAddress && e.snatPort >= cfg.portMin && e.snatPort <= cfg.portMax;
    if (!mine) {
      // only the sender's own address: a node never speaks for another node's translations
      if (!cfg || !senderSnatAddress || e.snatAddress !== senderSnatAddress) { refuse('snat-address'); continue; }
      if (own === e.snatAddress) {
        if (e.snatPort >= cfg.portMin && e.snatPort <= cfg.portMax) { refuse('snat-own-port'); continue; }
      } else {
        const slot = owners.slotOf(e.snatAddress);
        if (!slot) { refuse('snat-address'); continue; }
        owner = slot;
      }
    }
    const l = listener(e.vip, e.vipPort, e.proto);
    if (!l || l.mode !== MODE.snat) { refuse('no-listener'); continue; }
    // a translation never replaces another (another client flow on the port: snat-port-taken), so any real the
    // service still lists: a drained real's established connections keep their translation on every node
    const r = listedReal(e.realId, family, l.serviceId);
    if (!r) { refuse('no-real'); continue; }
    const rkey = { real: addrText(r.subarray(0, 16), family), realPort: e.realPort, snatPort: e.snatPort, proto: e.proto, family };
    const rk = encodeSnatRevKey(rkey);
    const now = monotonicNs();
    // the sender's times as ages, turned into marks on this node's clock: the copy's idle timeout runs from the
    // sender's last packet (refreshes keep it alive while the flow is in use there); unknown ages: now
    const lastSeenNs = markOf(e.idleMs, now) || now;
    const rv = { client: e.client, vip: e.vip, clientPort: e.clientPort, vipPort: e.vipPort, realId: e.realId,
      state: e.closing ? SNAT_STATE.closing : SNAT_STATE.open, createdNs: markOf(e.ageMs, now) || now, lastSeenNs, owner };
    const fk = snatFwdKey(rkey, rv);
    const fv = encodeSnatFwd({ realId: e.realId, snatPort: e.snatPort, realPort: e.realPort });
    const held = rev.lookup(rk);
    let heldFwd: Buffer | null = null;
    if (mine) {
      const back = takeBack(rev, fwd, rk, encodeSnatRev(rv), held, fk, fv);
      if (back === 'inserted') {
        result.applied++;
        result.returned = (result.returned ?? 0) + 1;
        // XDP may have deleted it meanwhile (its port reclaimed): nothing to remember then, the rest of the slice goes on
        const v = rev.lookup(rk);
        if (v) keys.own.push([rk, Buffer.from(v)]);
      } else if (back === 'unchanged') result.unchanged++;
      else refuse(back);
      continue;
    }
    if (held) {
      const h = decodeSnatRev(Buffer.from(held), family);
      const same = h.realId === e.realId && h.client === e.client && h.clientPort === e.clientPort && h.vip === e.vip &&
        h.vipPort === e.vipPort && (h.owner ?? 0) === owner;
      if (!same) { refuse('snat-port-taken'); continue; }
      heldFwd = fwd.lookup(fk);
      const f = heldFwd;
      const fresher = lastSeenNs > h.lastSeenNs; // a refresh: the sender saw a packet after the last one seen here
      if (f && Buffer.from(f).equals(fv) && (h.state === SNAT_STATE.closing) === e.closing && !fresher) { result.unchanged++; continue; }
      // the same translation: its forward entry restored, its state taken from the sender (FIN seen there), its
      // last packet the later of both nodes'; merged into the entry as re-read right before the write (flow-merge.ts):
      // a FIN or a refresh the data path wrote since the read above is never overwritten
      if (h.state !== rv.state || fresher) {
        const w = mergeHeldTranslation(rev, rk, Buffer.from(held), { state: rv.state, lastSeenNs });
        if (w === 'changed') { refuse('snat-port-taken'); continue; }
        if (w === 'gone') { result.unchanged++; continue; }
      }
    } else {
      try {
        rev.update(rk, encodeSnatRev(rv), 'noexist');
      } catch (err) {
        refuse((err as { code?: string }).code === 'EEXIST' ? 'snat-port-taken' : 'table-full');
        continue;
      }
    }
    try {
      // held: restored, and a forward entry xdp_lb wrote for the client flow since the read above stays (flow-merge.ts)
      if (held) restoreForward(fwd, fk, heldFwd ? Buffer.from(heldFwd) : null, fv);
      else fwd.update(fk, fv);
    } catch {
      if (!held) rev.delete(rk);
      refuse('table-full');
      continue;
    }
    result.applied++;
    const v = rev.lookup(rk); // absent when XDP deleted it since (see above)
    if (v) keys.snat.push([rk, Buffer.from(v)]);
  }
  return { ...result, keys };
}

function servedKey(address: string): Buffer {
  const k = Buffer.alloc(20);
  addr16(address).copy(k, 0);
  k[16] = familyOf(address);
  return k;
}

/** Writes the gate of lb_snat_served (lb_snat_owners[0].served): the number of addresses served. */
function writeServedGate(obj: BpfObject): void {
  const n = obj.map(SNAT_MAPS.served).keys().length;
  const b = Buffer.alloc(OWNER_BYTES);
  b.writeUInt32LE(n, 20);
  obj.map(SNAT_MAPS.owners).update(encodeU32(0), b);
}

/**
 * Serves a lost lb node's SNAT address (src/reconciler/flows/snat-takeover.ts): replies to it are translated here with the
 * translations that node synced (its owner slot; one is given when it has none yet). Idempotent. False when every
 * owner slot is taken.
 */
export function serveSnatAddress(obj: BpfObject, address: string): boolean {
  const a = canonicalAddress(address);
  if (!a) throw new Error(`serveSnatAddress: '${address}' is not an address in canonical form`);
  const slot = new SnatOwners(obj.map(SNAT_MAPS.owners)).slotOf(a);
  if (!slot) return false;
  obj.map(SNAT_MAPS.served).update(servedKey(a), encodeU32(slot));
  writeServedGate(obj);
  return true;
}

/** Stops serving an address (its owner is back): replies to it are no longer translated here. Idempotent. */
export function unserveSnatAddress(obj: BpfObject, address: string): void {
  obj.map(SNAT_MAPS.served).delete(servedKey(address));
  writeServedGate(obj);
}

/** The other nodes' SNAT addresses this node serves now. */
export function servedSnatAddresses(obj: BpfObject): string[] {
  return servedAddressesIn(obj.map(SNAT_MAPS.served));
}

/** The addresses an lb_snat_served map lists (also read from its pin by `gitlb down`). */
export function servedAddressesIn(m: BpfMap): string[] {
  return m.keys().map((k) => addrText(Buffer.from(k).subarray(0, 16), k[16] === 6 ? 6 : 4)).sort();
}

/** Both families' address text is accepted only in canonical form (what addrText writes), so keys compare. */
export function canonicalAddress(a: string): string | null {
  try {
    return addrText(addr16(a), familyOf(a)) === a ? a : null;
  } catch {
    return null;
  }
}
