// The end of a SNAT translation, told by the lb node that made it (connection-state sync, docs/datapath.md
// "Connection-state sync", Deletions): the receiver deletes its copy when it is the same translation of the sender
// and it saw no packet of the flow after the sender's last one. Connection-table entries are not deleted this way:
// a DSR entry leaves a node's table by LRU eviction, which says that node's table was full, not that the connection
// ended (flow-state.ts FlowDelta).
import type { BpfObject } from '../libbpf.js';
import { addrText, encodeU32, familyOf } from './codec.js';
import { SNAT_MAPS, decodeSnatConfig, decodeSnatFwd, decodeSnatRev, encodeSnatRevKey, snatFwdKey } from './snat.js';
import type { SnatEntry } from './flow-state.js';

export type GoneRefusal = 'bad-age' | 'snat-address' | 'not-owner' | 'newer';

export interface GoneOptions {
  /** The sending node's own SNAT address (the applied config): only its translations are its to end. */
  senderSnatAddress?: string;
  /** How much later than the sender's last packet this copy's must be to count as newer (RECENCY_MARGIN_MS). */
  marginMs: number;
  /** An age the sync accepts (flow-state.ts validAge). */
  validAge: (a: number | null) => boolean;
  /** An age turned into a mark on this node's clock (flow-state.ts markOf). */
  markOf: (ageMs: number | null, nowNs: bigint) => bigint;
  nowNs: bigint;
}

/** The owner slot lb_snat_owners gives `address`, or 0 when it has none (a lookup only: a deletion never takes a slot). */
function ownerSlots(obj: BpfObject): (address: string) => number {
  let slots: Map<string, number> | null = null;
  return (address) => {
    if (!slots) {
      slots = new Map();
      const m = obj.map(SNAT_MAPS.owners);
      for (let i = 1; i < m.maxEntries; i++) {
        const v = m.lookup(encodeU32(i));
        if (!v) continue;
        const b = Buffer.from(v);
        if (!b.subarray(0, 16).equals(Buffer.alloc(16))) slots.set(addrText(b.subarray(0, 16), 6), i);
        else if (b.readUInt32BE(16)) slots.set(addrText(b.subarray(16, 20), 4), i);
      }
    }
    return slots.get(address) ?? 0;
  };
}

/**
 * Deletes this node's copies of translations a peer says ended there. Each is checked: a known idle age
 * ('bad-age'), the sender's own SNAT address ('snat-address'), a copy that is the sender's (its owner slot, or with a
 * shared address a port outside this node's own range) of the same client flow and real ('not-owner': a peer never
 * ends this node's own translations, nor another client's), and no packet here later than the sender's last one by
 * more than the margin ('newer': the flow moved here and is alive; the copy then ends by its own idle timeout).
 * Nothing held: unchanged (a replay changes nothing).
 */
export function deleteGone(obj: BpfObject, gone: SnatEntry[], o: GoneOptions, refuse: (r: GoneRefusal) => void)
  : { deleted: number; unchanged: number } {
  const out = { deleted: 0, unchanged: 0 };
  const cfgBuf = obj.map(SNAT_MAPS.config).lookup(Buffer.alloc(4));
  const cfg = cfgBuf ? decodeSnatConfig(Buffer.from(cfgBuf)) : null;
  const rev = obj.map(SNAT_MAPS.rev);
  const fwd = obj.map(SNAT_MAPS.fwd);
  const reals = obj.map('lb_reals');
  const slotOf = ownerSlots(obj);
  for (const e of gone) {
    if (e.idleMs === null || !o.validAge(e.idleMs) || !o.validAge(e.ageMs)) { refuse('bad-age'); continue; }
    if (!cfg || !o.senderSnatAddress || e.snatAddress !== o.senderSnatAddress) { refuse('snat-address'); continue; }
    const family = familyOf(e.vip);
    let owner = 0;
    if ((family === 4 ? cfg.addr4 : cfg.addr6) === e.snatAddress) {
      // a shared address: a port of this node's own range is this node's translation, whatever a peer says
      if (e.snatPort >= cfg.portMin && e.snatPort <= cfg.portMax) { refuse('not-owner'); continue; }
    } else {
      owner = slotOf(e.snatAddress);
      if (!owner) { out.unchanged++; continue; }
    }
    const r = reals.lookup(encodeU32(e.realId));
    if (!r || r[16] !== family) { out.unchanged++; continue; }
    const rkey = { real: addrText(Buffer.from(r).subarray(0, 16), family), realPort: e.realPort, snatPort: e.snatPort, proto: e.proto, family };
    const rk = encodeSnatRevKey(rkey);
    const held = rev.lookup(rk);
    if (!held) { out.unchanged++; continue; }
    const h = decodeSnatRev(Buffer.from(held), family);
    const same = h.realId === e.realId && h.client === e.client && h.clientPort === e.clientPort && h.vip === e.vip &&
      h.vipPort === e.vipPort && (h.owner ?? 0) === owner;
    if (!same) { refuse('not-owner'); continue; }
    if (h.lastSeenNs > o.markOf(e.idleMs, o.nowNs) + BigInt(o.marginMs) * 1_000_000n) { refuse('newer'); continue; }
    rev.delete(rk);
    // the forward entry only while it still points at this translation (as sweepSnat)
    const fk = snatFwdKey(rkey, h);
    const f = fwd.lookup(fk);
    if (f) {
      const fv = decodeSnatFwd(Buffer.from(f));
      if (fv.realId === h.realId && fv.snatPort === e.snatPort && fv.realPort === e.realPort) fwd.delete(fk);
    }
    out.deleted++;
  }
  return out;
}

