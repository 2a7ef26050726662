// A map from u32 keys to u32 values in typed arrays (open addressing, linear probing). Rings are 10,007 entries or
// more of real ids that are 32-bit hashes (src/render/ids.ts), half of them above 2^31 and so not small integers
// to V8: a Map lookup per entry was most of converting and checking 1,000 rings. Keys and values are u32 (0 too).
export class U32Table {
  private keys: Uint32Array;
  private values: Uint32Array;
  private used: Uint8Array;
  private shift: number;
  private count = 0;

  constructor(expected = 8) {
    let bits = 4;
    while (1 << bits < expected * 2) bits++;
    this.keys = new Uint32Array(1 << bits);
    this.values = new Uint32Array(1 << bits);
    this.used = new Uint8Array(1 << bits);
    this.shift = 32 - bits;
  }

  get size(): number {
    return this.count;
  }

  /** The value of `key`, or -1 when absent. */
  get(key: number): number {
    const mask = this.keys.length - 1;
    for (let i = Math.imul(key, 0x9e3779b1) >>> this.shift; ; i = (i + 1) & mask) {
      if (this.used[i] === 0) return -1;
      if (this.keys[i] === key) return this.values[i]!;
    }
  }

  set(key: number, value: number): void {
    if ((this.count + 1) * 2 > this.keys.length) this.grow();
    const mask = this.keys.length - 1;
    for (let i = Math.imul(key, 0x9e3779b1) >>> this.shift; ; i = (i + 1) & mask) {
      if (this.used[i] === 0) {
        this.used[i] = 1;
        this.keys[i] = key;
        this.values[i] = value;
        this.count++;
        return;
      }
      if (this.keys[i] === key) {
        this.values[i] = value;
        return;
      }
    }
  }

  private grow(): void {
    const { keys, values, used } = this;
    const bits = 33 - this.shift;
    this.keys = new Uint32Array(1 << bits);
    this.values = new Uint32Array(1 << bits);
    this.used = new Uint8Array(1 << bits);
    this.shift = 32 - bits;
    this.count = 0;
    for (let i = 0; i < keys.length; i++) if (used[i] === 1) this.set(keys[i]!, values[i]!);
  }
}
