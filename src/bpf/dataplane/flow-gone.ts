// The end of a SNAT translation, told by the lb node that made it (connection-state sync, docs/datapath.md
// "Connection-state sync", Deletions): the receiver deletes its copy when it is the same translation of the sender
// and it saw no packet of the flow after the sender's last one. Connection-table entries are not deleted this way:
// a DSR entry leaves a node's table by LRU eviction, which says that node's table was full, not that the connection
// ended (flow-state.ts FlowDelta).
import type { BpfObject } from '../libbpf.js';
import { addrText, encodeU32, familyOf } from './codec.js';
import { SNAT_MAPS, decodeSnatConfig, decodeSnatRev, deleteUnchangedTranslation, encodeSnatRevKey } from './snat.js';
import { markOf, validAge } from './flow-age.js';
import { SnatOwners } from './snat-owners.js';
import type { SnatEntry } from './flow-state.js';

export type GoneRefusal = 'bad-age' | 'snat-address' | 'not-owner' | 'newer';

export interface GoneOptions {
  /** The sending node's own SNAT address (the applied config): only its translations are its to end. */
  senderSnatAddress?: string;
  /** How much later than the sender's last packet this copy's must be to count as newer (RECENCY_MARGIN_MS). */
  marginMs: number;
  nowNs: bigint;
}

/**
 * Deletes this node's copies of translations a peer says ended there. Each is checked: a known idle age
 * ('bad-age'), the sender's own SNAT address ('snat-address'), a copy that is the sender's (its owner slot, or with a
 * shared address a port outside this node's own range) of the same client flow and real ('not-owner': a peer never
 * ends this node's own translations, nor another client's), and no packet here later than the sender's last one by
 * more than the margin ('newer': the flow moved here and is alive; the copy then ends by its own idle timeout).
 * Nothing held, or a copy a packet refreshed while it was being deleted: unchanged (a replay changes nothing).
 */
export function deleteGone(obj: BpfObject, gone: SnatEntry[], o: GoneOptions, refuse: (r: GoneRefusal) => void)
  : { deleted: number; unchanged: number } {
  const out = { deleted: 0, unchanged: 0 };
  const cfgBuf = obj.map(SNAT_MAPS.config).lookup(Buffer.alloc(4));
  const cfg = cfgBuf ? decodeSnatConfig(Buffer.from(cfgBuf)) : null;
  const rev = obj.map(SNAT_MAPS.rev);
  const fwd = obj.map(SNAT_MAPS.fwd);
  const reals = obj.map('lb_reals');
  const owners = new SnatOwners(obj.map(SNAT_MAPS.owners));
  for (const e of gone) {
    if (e.idleMs === null || !validAge(e.idleMs) || !validAge(e.ageMs)) { refuse('bad-age'); continue; }
    if (!cfg || !o.senderSnatAddress || e.snatAddress !== o.senderSnatAddress) { refuse('snat-address'); continue; }
    const family = familyOf(e.vip);
    let owner = 0;
    if ((family === 4 ? cfg.addr4 : cfg.addr6) === e.snatAddress) {
      // a shared address: a port of this node's own range is this node's translation, whatever a peer says
      if (e.snatPort >= cfg.portMin && e.snatPort <= cfg.portMax) { refuse('not-owner'); continue; }
    } else {
      owner = owners.knownSlot(e.snatAddress);
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
    if (h.lastSeenNs > markOf(e.idleMs, o.nowNs) + BigInt(o.marginMs) * 1_000_000n) { refuse('newer'); continue; }
    // only the copy judged here: a packet that refreshed it since (the flow is alive here) keeps it
    if (deleteUnchangedTranslation(rev, fwd, rk, rkey, held) > 0) out.deleted++;
    else out.unchanged++;
  }
  return out;
}

