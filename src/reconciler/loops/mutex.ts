// A FIFO async mutex. The reconciler holds it only around sections that write or compare the data plane
// (apply, read-back, restore, health re-render, drift repair), never around Git I/O, so the health path waits
// at most for one such section, never for a fetch or a push.
export class Mutex {
  private tail: Promise<void> = Promise.resolve();

  async run<T>(section: () => Promise<T>): Promise<T> {
    const before = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((r) => (release = r));
    await before;
    try {
      return await section();
    } finally {
      release();
    }
  }
}
