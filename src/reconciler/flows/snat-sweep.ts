// The SNAT sweep of an lb node: SNAT translations are plain hash entries (never silently evicted), so expired ones
// are deleted here on a schedule (docs/datapath.md, SNAT).
import type { DataPlane, LbDataPlaneHandle } from '../../bpf/dataplane/index.js';
import type { Logger } from '../state/node-state.js';
import { startSchedule } from '../triggers/schedule.js';

const SNAT_SWEEP_NOTABLE = 10_000;

/** Every 10 s, delete expired SNAT translations of the current lb data plane (docs/datapath.md, SNAT). */
export async function startSnatSweep(current: () => DataPlane, log: Logger): Promise<{ stop(): void }> {
  const { sweepSnat } = await import('../../bpf/dataplane/snat.js');
  // the sweep reads the table in pages and yields between them (a big table takes a while): one at a time
  let running = false;
  return startSchedule({
    spec: '10',
    onTick: () => {
      const obj = (current() as Partial<LbDataPlaneHandle>).object?.();
      if (!obj || running) return;
      running = true;
      sweepSnat(obj).then((n) => {
        // routine upkeep (debug); a sweep this large means a burst of clients went away at once
        if (n >= SNAT_SWEEP_NOTABLE) log.info(`snat: swept ${n} expired translations`, { stage: 'snat', count: n });
        else if (n > 0) (log.debug ?? log.info).call(log, `snat: swept ${n} expired translations`, { stage: 'snat', count: n });
      }, (err: unknown) => log.warn(`snat: sweep failed: ${(err as Error).message}`)).finally(() => { running = false; });
    },
  });
}
