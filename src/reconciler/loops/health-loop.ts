// The health loop: local, never blocked by the revision loop or any Git call. It receives the health checker's
// HealthChange events (and full refreshes: peers' observations changed, a flip before the daemon started), coalesces
// bursts on a runner of its own, and hands the re-render the services the events named, so only those are rendered
// again (rerenderServices, src/render/desired.ts) before converge (src/reconciler/converge.ts) applies the difference.
// The re-render itself is Reconciler.refreshHealth: it shares the data-plane lock with the revision loop's apply
// sections and nothing else. docs/reconciler.md, "Health path".
import type { HealthChange } from '../health/checker.js';
import { SerialRunner } from '../triggers/serial-runner.js';

export interface HealthLoopOptions {
  /** Re-renders the served revision under the current health view and converges: the services named, or all (null). */
  rerender(why: string, services: ReadonlySet<string> | null): Promise<unknown>;
  log: { warn(msg: string, fields?: Record<string, unknown>): void };
}

/** How a HealthChange reads in logs and as the re-render's reason. */
export function describeHealthChange(e: HealthChange): string {
  return `${e.service}/${e.address} ${e.from} -> ${e.to}`;
}

export class HealthLoop {
  /** Services named by events since the last run took them. */
  private pending = new Set<string>();
  /** A refresh of everything was asked for (or a run failed: what it took is re-rendered whole next time). */
  private everything = false;
  private readonly runner: SerialRunner;

  constructor(private readonly o: HealthLoopOptions) {
    this.runner = new SerialRunner({ refresh: (why) => this.run(why) },
      (kind, err) => o.log.warn(`health ${kind} failed: ${(err as Error).message}`));
  }

  /** A real changed state: its service is rendered again. */
  changed(e: HealthChange): void {
    this.pending.add(e.service);
    this.runner.trigger('refresh', describeHealthChange(e));
  }

  /** Everything is rendered again (the view changed in a way no event names: peers' observations, a start). */
  refresh(why: string): void {
    this.everything = true;
    this.runner.trigger('refresh', why);
  }

  private async run(why: string): Promise<void> {
    const services = this.everything ? null : this.pending;
    this.pending = new Set();
    this.everything = false;
    try {
      await this.o.rerender(why, services);
    } catch (err) {
      this.everything = true; // the next run may not build on what this one left
      throw err;
    }
  }

  /** Resolves when no re-render is running or queued. */
  idle(): Promise<void> {
    return this.runner.idle();
  }

  stop(): void {
    this.runner.stop();
  }
}
