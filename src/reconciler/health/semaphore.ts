// A counting semaphore bounding sockets in flight. FIFO, so no check starves; an abort while waiting leaves the queue.

export class Semaphore {
  private inFlight = 0;
  private peak = 0;
  private readonly waiters: { grant: () => void; reject: (e: unknown) => void; signal?: AbortSignal; onAbort?: () => void }[] = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`Semaphore limit must be an integer >= 1, got ${limit}`);
  }

  get active(): number {
    return this.inFlight;
  }

  /** Highest number of holders seen at once since creation. */
  get highWater(): number {
    return this.peak;
  }

  get waiting(): number {
    return this.waiters.length;
  }

  /** Resolves to a release function once a slot is free; rejects with the signal's reason if aborted first. */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.inFlight < this.limit) return Promise.resolve(this.take());
    return new Promise((resolve, reject) => {
      const waiter = { grant: () => resolve(this.take()), reject, signal, onAbort: undefined as undefined | (() => void) };
      if (signal) {
        waiter.onAbort = () => {
          const i = this.waiters.indexOf(waiter);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.waiters.push(waiter);
    });
  }

  private take(): () => void {
    this.inFlight++;
    if (this.inFlight > this.peak) this.peak = this.inFlight;
    let released = false;
    return () => {
      if (released) return; // releasing twice must not free someone else's slot
      released = true;
      this.inFlight--;
      const next = this.waiters.shift();
      if (next) {
        if (next.signal && next.onAbort) next.signal.removeEventListener('abort', next.onAbort);
        next.grant();
      }
    };
  }
}
