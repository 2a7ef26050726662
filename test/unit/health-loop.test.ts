// The health loop (src/reconciler/loops/health-loop.ts): HealthChange events reach the re-render as the set of
// services they name, bursts coalesce into one run, a full refresh renders everything, and a failed run makes the
// next one render everything (it may not build on what the failed one left).
import test from 'ava';
import { HealthLoop, describeHealthChange } from '../../src/reconciler/loops/health-loop.js';
import type { HealthChange } from '../../src/reconciler/health/checker.js';

const change = (service: string, address: string): HealthChange => ({ service, address, from: 'up', to: 'down',
  at: new Date(0).toISOString(), result: { ok: false, detail: 'ECONNREFUSED', at: 0, durationMs: 1 } });

function recordingLoop(fail: { next: boolean }) {
  const runs: Array<{ why: string; services: string[] | null }> = [];
  let release: () => void = () => {};
  let gate: Promise<void> = Promise.resolve();
  const loop = new HealthLoop({
    rerender: async (why, services) => {
      runs.push({ why, services: services && [...services].sort() });
      await gate;
      if (fail.next) {
        fail.next = false;
        throw new Error('apply failed');
      }
    },
    log: { warn: () => {} },
  });
  return { loop, runs, hold: () => { gate = new Promise((r) => (release = r)); }, release: () => release() };
}

test('events name their services; a burst during a run coalesces into one follow-up run with all of them', async (t) => {
  const { loop, runs, hold, release } = recordingLoop({ next: false });
  hold();
  loop.changed(change('web', '198.51.100.10'));
  await new Promise((r) => setImmediate(r)); // the first run holds
  loop.changed(change('api', '198.51.100.11'));
  loop.changed(change('dns', '198.51.100.12'));
  loop.changed(change('api', '198.51.100.13'));
  release();
  await loop.idle();
  t.deepEqual(runs.map((r) => r.services), [['web'], ['api', 'dns']]);
  t.is(runs[0]!.why, describeHealthChange(change('web', '198.51.100.10')));
  t.is(runs[0]!.why, 'web/198.51.100.10 up -> down');
});

test('a refresh renders everything; after a failed run the next one renders everything too', async (t) => {
  const fail = { next: false };
  const { loop, runs } = recordingLoop(fail);
  loop.refresh('peer observations changed');
  await loop.idle();
  t.deepEqual(runs.at(-1), { why: 'peer observations changed', services: null });

  fail.next = true;
  loop.changed(change('web', '198.51.100.10'));
  await loop.idle();
  t.deepEqual(runs.at(-1)!.services, ['web'], 'the failing run was asked for web only');
  loop.changed(change('api', '198.51.100.11'));
  await loop.idle();
  t.is(runs.at(-1)!.services, null, 'after a failure: everything');
  // benign: once a run succeeded, events are incremental again
  loop.changed(change('dns', '198.51.100.12'));
  await loop.idle();
  t.deepEqual(runs.at(-1)!.services, ['dns']);
  loop.stop();
});
