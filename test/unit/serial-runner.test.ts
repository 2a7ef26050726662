// The serial runner's idle(): it waits for the work triggered before the call, not for triggers that keep arriving.
// A node polling every second whose passes take a second or more (a loaded machine, a slow Git server) is never
// idle in the sense "nothing running or queued", and a caller waiting for that (gitlb run --once, tests) hung: the
// decommission test of reconcile-control.test.ts stalled 9 minutes on a loaded machine that way.
import test from 'ava';
import { SerialRunner } from '../../src/reconciler/triggers/serial-runner.js';

const tick = () => new Promise((r) => setImmediate(r));

test('idle() resolves although every pass is overtaken by a new trigger (a poll faster than the passes)', async (t) => {
  let runs = 0;
  let endless!: () => void;
  const overtaken = new Promise<string>((r) => (endless = () => r('still running after 50 passes')));
  const runner = new SerialRunner({
    reconcile: async () => {
      runs++;
      if (runs === 50) endless();
      runner.trigger('reconcile', 'poll'); // the next poll tick lands while this pass runs
      await tick();
    },
  });
  t.teardown(() => runner.stop());
  runner.trigger('reconcile', 'start');
  const settled = await Promise.race([runner.idle().then(() => 'idle'), overtaken]);
  t.is(settled, 'idle', 'idle() resolved once the start pass and the poll it saw queued were served');
  runner.stop();
  await runner.idle();
});

test('idle() waits for the runs queued before it, of every kind, and for the follow-up a job asks for', async (t) => {
  const runs: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const runner = new SerialRunner({
    reconcile: async (why) => {
      runs.push(`reconcile: ${why}`);
      if (why === 'start') {
        await gate;
        runner.followUp('reconcile', 'automatic revert'); // part of this pass's work
      }
    },
    drift: async (why) => void runs.push(`drift: ${why}`),
  });
  runner.trigger('reconcile', 'start');
  runner.trigger('drift', 'drift check');
  let idle = false;
  const waiting = runner.idle().then(() => (idle = true));
  runner.trigger('reconcile', 'poll'); // after the call: coalesces with the follow-up, not waited for by itself
  await tick();
  t.false(idle, 'the start pass is still running');
  release();
  await waiting;
  t.deepEqual(runs, ['reconcile: start', 'reconcile: poll, automatic revert', 'drift: drift check']);
});

test('followUp() outside a job is an ordinary trigger; stop() drops the queue and idle() resolves after the running job', async (t) => {
  const runs: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const runner = new SerialRunner({ reconcile: async (why) => void runs.push(why), drift: async () => void (await gate) });
  runner.followUp('reconcile', 'by hand');
  await runner.idle();
  t.deepEqual(runs, ['by hand']);
  runner.trigger('drift', 'drift check');
  runner.trigger('reconcile', 'poll'); // queued behind the running drift check
  await tick();
  let idle = false;
  const waiting = runner.idle().then(() => (idle = true));
  runner.stop();
  await tick();
  t.false(idle, 'the drift check still runs');
  release();
  await waiting;
  t.deepEqual(runs, ['by hand'], 'the queued poll was dropped');
});
