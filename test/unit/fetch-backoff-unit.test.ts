// The fetch-failure schedule (src/reconciler/source/fetch-backoff.ts): backoff steps 1 s doubling up to the maximum,
// attempts between steps (polls) neither advance it nor log, a new reason logs, recovery sums the outage up.
import test from 'ava';
import { FetchBackoff, humanMs } from '../../src/reconciler/source/fetch-backoff.js';

test('backoff steps double up to the maximum; attempts between steps do not move them and are not logged', (t) => {
  const b = new FetchBackoff({ baseMs: 1000, maxMs: 300_000 });
  const logged: number[] = [];
  // A poll every 2 s for 20 minutes.
  for (let now = 0; now <= 20 * 60_000; now += 2000) {
    const n = b.failed('connection refused', now);
    if (n.log) logged.push(now / 1000);
    t.true(n.retryInMs > 0 && n.retryInMs <= 300_000);
  }
  // Due after 1, 2, 4 ... 256 s, then every 300 s (times rounded up to the 2 s poll that found the step due).
  t.deepEqual(logged, [0, 2, 4, 8, 16, 32, 64, 128, 256, 512, 812, 1112]);
  t.is(b.state!.attempts, 601);
  t.is(b.state!.step, 12);
});

test('the retry timer alone walks the steps 1, 2, 4 ... s; a new reason is logged without moving them; recovery says how long', (t) => {
  const b = new FetchBackoff({ baseMs: 1000, maxMs: 8000 });
  let now = 5000;
  const delays: number[] = [];
  for (let i = 0; i < 6; i++) {
    const n = b.failed('timed out', now);
    t.true(n.log);
    delays.push(n.retryInMs);
    now = n.state.retryAt;
  }
  t.deepEqual(delays, [1000, 2000, 4000, 8000, 8000, 8000]);
  const between = b.failed('connection refused', now - 100);
  t.true(between.log, 'a new reason is worth a line');
  t.is(between.state.step, 6);
  t.false(b.failed('connection refused', now - 50).log);
  t.deepEqual(b.recovered(now), { attempts: 8, durationMs: now - 5000, reason: 'connection refused', since: 5000, until: now });
  t.is(b.recovered(now), null);
  t.is(b.state, null);
});

test('humanMs', (t) => {
  t.is(humanMs(250), '250 ms');
  t.is(humanMs(2000), '2 s');
  t.is(humanMs(95_000), '1 min 35 s');
  t.is(humanMs(300_000), '5 min');
});
