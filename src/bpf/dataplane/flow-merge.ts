// A peer's entry written over one this node holds (connection-state sync, flow-state.ts importFlows; docs/datapath.md
// "Connection-state sync", "Writes over a held entry"). xdp_lb writes the same entries on the flow's packets (a
// translation's last packet and its closing state on FIN/RST, a connection-table entry's last-seen on a hit and a new
// choice of real on a SYN), and user space has no compare-and-swap on a hash map's value. So the import never writes
// the value it judged with a change applied: it re-reads the entry right before the write and merges into what is
// there then, and what the data path changed since the import's read wins over the peer's older word.
import type { BpfMap } from '../libbpf.js';
import { SNAT_REV_IDENTITY_BYTES, SNAT_REV_LAST_SEEN_AT, SNAT_REV_OWNER_AT, SNAT_REV_STATE_AT } from './snat.js';

/** lb_flow_value: real_id, service_id, real_slot (0..12), last_seen (12..16, u32), chosen_ns (16..24). */
const CT_LAST_SEEN_AT = 12;
const CT_CHOSEN_AT = 16;

/**
 * A peer's word on a translation this node holds, the same translation (client flow, real, owner) as `judged` (its
 * reverse value as the import read it): the sender's state (a FIN, or a SYN that reopened it, seen there) and its last
 * packet on this node's clock. Merged into the entry as re-read right before the write: the last packet is the later
 * of the entry's (now) and the peer's, never moved back; the state is the peer's unless the data path changed it
 * since `judged` (a FIN or a reopening SYN here after the import's read is later than what the peer's message says);
 * everything else stays as the entry holds it. 'gone': the entry was deleted meanwhile (its port reclaimed, or swept),
 * nothing is written (the sender's next refresh inserts it again); 'changed': another translation holds the key now;
 * 'unchanged': the merge is what the entry already holds.
 */
export function mergeHeldTranslation(rev: BpfMap, rk: Buffer, judged: Buffer, peer: { state: number; lastSeenNs: bigint })
  : 'written' | 'unchanged' | 'gone' | 'changed' {
  const now = rev.lookup(rk);
  if (!now) return 'gone';
  const cur = Buffer.from(now);
  if (!cur.subarray(0, SNAT_REV_IDENTITY_BYTES).equals(judged.subarray(0, SNAT_REV_IDENTITY_BYTES)) ||
    cur[SNAT_REV_OWNER_AT] !== judged[SNAT_REV_OWNER_AT]) return 'changed';
  const merged = Buffer.from(cur);
  if (cur[SNAT_REV_STATE_AT] === judged[SNAT_REV_STATE_AT]) merged[SNAT_REV_STATE_AT] = peer.state;
  if (peer.lastSeenNs > cur.readBigUInt64LE(SNAT_REV_LAST_SEEN_AT)) merged.writeBigUInt64LE(peer.lastSeenNs, SNAT_REV_LAST_SEEN_AT);
  if (merged.equals(cur)) return 'unchanged';
  try {
    rev.update(rk, merged, 'exist');
  } catch (err) {
    if ((err as { code?: string }).code === 'ENOENT') return 'gone';
    throw err;
  }
  return 'written';
}

/**
 * A peer's newer choice of real (`value`) written over this node's connection-table entry for the flow, judged from
 * `judged` (the entry as the import read it). Re-read right before the write: when the entry's choice (real, service,
 * slot, recency mark) changed since, the data path chose again (a SYN re-read the table here), which is newer than
 * the peer's, and nothing is written (null). Otherwise the peer's choice is written with the entry's coarse
 * last-seen as it is now (a hit since the read counts; last-seen never moves back). An entry gone meanwhile (LRU
 * eviction) is inserted only if still absent. Returns the value written; throws what the update throws but EEXIST (null) and ENOENT (evicted meanwhile: taken as absent).
 */
export function replaceHeldFlow(ct: BpfMap, key: Buffer, judged: Buffer, value: Buffer): Buffer | null {
  const now = ct.lookup(key);
  const out = Buffer.from(value);
  if (now) {
    const cur = Buffer.from(now);
    const choice = (b: Buffer) => Buffer.concat([b.subarray(0, CT_LAST_SEEN_AT), b.subarray(CT_CHOSEN_AT, CT_CHOSEN_AT + 8)]);
    if (!choice(cur).equals(choice(judged))) return null;
    out.writeUInt32LE(cur.readUInt32LE(CT_LAST_SEEN_AT), CT_LAST_SEEN_AT);
  }
  try {
    ct.update(key, out, now ? 'exist' : 'noexist');
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'EEXIST') return null;
    // evicted (LRU) between the re-read and the write: inserted only if still absent, like an entry gone before it
    if (code === 'ENOENT') return replaceHeldFlow(ct, key, judged, value);
    throw err;
  }
  return out;
}

/**
 * The forward entry of a translation this node holds, restored to `fv` (the client flow's way to it) from `judged`
 * (the entry as the import read it, null when absent). Already `fv`: nothing written. Absent when read: inserted
 * only if still absent, so a translation xdp_lb gave the client flow meanwhile (a forward packet that found none)
 * keeps its forward entry ('changed'). Present with another value: replaced only while it still holds what was read.
 */
export function restoreForward(fwd: BpfMap, fk: Buffer, judged: Buffer | null, fv: Buffer): 'written' | 'unchanged' | 'changed' {
  if (judged?.equals(fv)) return 'unchanged';
  if (judged) {
    const now = fwd.lookup(fk);
    if (!now || !Buffer.from(now).equals(judged)) return 'changed';
  }
  try {
    fwd.update(fk, fv, judged ? 'exist' : 'noexist');
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'EEXIST' || code === 'ENOENT') return 'changed';
    throw err;
  }
  return 'written';
}
