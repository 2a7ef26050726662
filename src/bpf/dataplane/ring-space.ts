// Allocation of ring regions inside the flat lb_ring array: first fit over a sorted free list.
// Each service owns two regions of its table size (active + standby). Pure bookkeeping, no I/O.
export class RingSpace {
  /** free extents [start, end) sorted by start, non-adjacent */
  private free: Array<[number, number]>;

  constructor(readonly capacity: number, used: Array<[number, number]> = []) {
    this.free = [[0, capacity]];
    for (const [s, len] of used) this.take(s, len);
  }

  /** Marks [start, start+len) as used (adopting existing regions). */
  take(start: number, len: number): void {
    const end = start + len;
    const i = this.free.findIndex(([s, e]) => s <= start && end <= e);
    if (i < 0) throw Object.assign(new Error(`ring region [${start}, ${end}) overlaps another or exceeds capacity ${this.capacity}`), { code: 'EINVAL' });
    const [s, e] = this.free[i]!;
    const parts: Array<[number, number]> = [];
    if (s < start) parts.push([s, start]);
    if (end < e) parts.push([end, e]);
    this.free.splice(i, 1, ...parts);
  }

  alloc(len: number): number {
    const i = this.free.findIndex(([s, e]) => e - s >= len);
    if (i < 0)
      throw Object.assign(new Error(`lb_ring: no room for a ring of ${len} entries (capacity ${this.capacity}, ` +
        `free ${this.freeEntries()}); restart the data plane with a larger ring capacity`), { code: 'E2BIG' });
    const start = this.free[i]![0];
    this.take(start, len);
    return start;
  }

  release(start: number, len: number): void {
    let end = start + len;
    let s = start;
    const i = this.free.findIndex(([fs]) => fs > start);
    const at = i < 0 ? this.free.length : i;
    let from = at;
    let count = 0;
    if (at > 0 && this.free[at - 1]![1] === s) { s = this.free[at - 1]![0]; from = at - 1; count++; }
    if (at < this.free.length && this.free[at]![0] === end) { end = this.free[at]![1]; count++; }
    this.free.splice(from, count, [s, end]);
  }

  freeEntries(): number {
    return this.free.reduce((n, [s, e]) => n + e - s, 0);
  }
}
