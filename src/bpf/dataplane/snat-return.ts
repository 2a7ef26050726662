// A rejoining lb node's own SNAT translations, sent back to it (docs/datapath.md "Connection-state sync", "Own
// translations sent back"; docs/bgp.md "Rejoining with empty maps"). Every lb node keeps copies of the other nodes'
// translations (lb_snat_rev entries whose owner slot names the other node's SNAT address, snat-owners.ts). A node that
// comes back with empty maps asks its peers for them; this reads the copies a peer holds of one owner, in the wire's
// form, naming the owner's SNAT address (the address the translation was made from, not this node's); and, on the
// rejoining node, the insert of one that never overwrites a translation it holds (importFlows checks the rest).
import type { BpfMap, BpfObject } from '../libbpf.js';
import { familyOf } from './codec.js';
import { ageOf } from './flow-age.js';
import { SNAT_MAPS, SNAT_REV_IDENTITY_BYTES as IDENTITY_BYTES, SNAT_REV_OWNER_AT as OWNER_BYTE, SNAT_STATE, decodeSnatRev, decodeSnatRevKey,
  monotonicNs } from './snat.js';
import { SnatOwners } from './snat-owners.js';
import { forEachPaged } from './paging.js';
import type { SnatEntry } from './flow-state.js';


/**
 * The copies this node holds of the translations made by the lb node whose SNAT address is `address` (their owner
 * slot); none when no slot names it. Ages as of `nowNs`: `ageMs` since the translation was made, `idleMs` since its
 * last packet (at its owner or here, whichever came later: a copy this node served during a takeover was used here).
 * Read in pages with the event loop's turn between them (paging.ts), like the sync's scans.
 */
export async function copiesOwnedBy(obj: BpfObject, address: string, nowNs: bigint = monotonicNs()): Promise<SnatEntry[]> {
  const slot = new SnatOwners(obj.map(SNAT_MAPS.owners)).knownSlot(address);
  if (!slot) return [];
  const family = familyOf(address);
  const rev = obj.map(SNAT_MAPS.rev);
  const out: SnatEntry[] = [];
  await forEachPaged(rev, (k, v) => {
    if (v[OWNER_BYTE] !== slot) return;
    const key = decodeSnatRevKey(k);
    if (key.family !== family) return;
    const r = decodeSnatRev(v, key.family);
    out.push({ client: r.client, vip: r.vip, clientPort: r.clientPort, vipPort: r.vipPort, proto: key.proto, realId: r.realId,
      realPort: key.realPort, snatAddress: address, snatPort: key.snatPort, closing: r.state === SNAT_STATE.closing,
      ageMs: ageOf(r.createdNs, nowNs), idleMs: ageOf(r.lastSeenNs, nowNs) });
  });
  return out;
}

/**
 * Inserts one of this node's own translations sent back by a peer, never over anything held here: the same
 * translation already held is 'unchanged' (a replay), another client flow on that real endpoint and port
 * 'snat-port-taken', a translation of that client flow on another port 'exists'. Both entries are inserted only if
 * absent (a translation xdp_lb makes meanwhile wins: the insert fails and nothing is changed).
 */
export function takeBack(rev: BpfMap, fwd: BpfMap, rk: Buffer, rv: Buffer, held: Buffer | null, fk: Buffer, fv: Buffer)
  : 'inserted' | 'unchanged' | 'snat-port-taken' | 'exists' | 'table-full' {
  const f = fwd.lookup(fk);
  if (held) {
    const h = Buffer.from(held);
    return h.subarray(0, IDENTITY_BYTES).equals(rv.subarray(0, IDENTITY_BYTES)) && !h[OWNER_BYTE] && f && Buffer.from(f).equals(fv)
      ? 'unchanged' : 'snat-port-taken';
  }
  if (f) return 'exists';
  try {
    rev.update(rk, rv, 'noexist');
  } catch (err) {
    return (err as { code?: string }).code === 'EEXIST' ? 'snat-port-taken' : 'table-full';
  }
  try {
    fwd.update(fk, fv, 'noexist');
  } catch (err) {
    rev.delete(rk);
    return (err as { code?: string }).code === 'EEXIST' ? 'exists' : 'table-full';
  }
  return 'inserted';
}
