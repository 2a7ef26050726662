// lb_snat_owners (lb_snat.h): which slot names each other lb node's SNAT address. Read by the import of a peer's
// translations and the takeover of an address (flow-state.ts, which give slots out) and by deletions (flow-gone.ts,
// which only look them up).
import type { BpfMap } from '../libbpf.js';
import { addr16, addrText, encodeU32, familyOf } from './codec.js';

/**
 * lb_snat_owners: the slot of each other lb node's SNAT address whose translations this node carries. An address keeps
 * its slot for as long as the map lives (a translation names its owner by slot), so slots are given out, never moved.
 * Slot 0 names no address (owner 0 is this node): its `served` field counts the lb_snat_served entries.
 */
export class SnatOwners {
  private readonly slots = new Map<string, number>();
  private free = 0;

  constructor(private readonly map: BpfMap) {
    for (let i = 1; i < map.maxEntries; i++) {
      const v = map.lookup(encodeU32(i));
      const b = v ? Buffer.from(v) : null;
      const a6 = b && !b.subarray(0, 16).equals(Buffer.alloc(16)) ? addrText(b.subarray(0, 16), 6) : null;
      const a4 = b && b.readUInt32BE(16) ? addrText(b.subarray(16, 20), 4) : null;
      if (a6 ?? a4) this.slots.set((a6 ?? a4)!, i);
      else if (!this.free) this.free = i;
    }
  }

  /** The slot of `address`, or 0 when it has none (a lookup only: a deletion never takes a slot). */
  knownSlot(address: string): number {
    return this.slots.get(address) ?? 0;
  }

  /** The slot of `address`, given one if it has none; null when every slot is taken. */
  slotOf(address: string): number | null {
    const known = this.slots.get(address);
    if (known) return known;
    if (!this.free) return null;
    const slot = this.free;
    const b = Buffer.alloc(OWNER_BYTES);
    if (familyOf(address) === 6) addr16(address).copy(b, 0);
    else addr16(address).copy(b, 16, 0, 4);
    this.map.update(encodeU32(slot), b);
    this.slots.set(address, slot);
    this.free = 0;
    for (let i = slot + 1; i < this.map.maxEntries && !this.free; i++) {
      const v = this.map.lookup(encodeU32(i));
      if (!v || Buffer.from(v).equals(Buffer.alloc(OWNER_BYTES))) this.free = i;
    }
    return slot;
  }
}

/** The bytes of an lb_snat_owners value (struct lb_snat_owner: addr6, addr4, served). */
export const OWNER_BYTES = 24;
