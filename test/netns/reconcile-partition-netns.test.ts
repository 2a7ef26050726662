// Health never waits for Git: an lb node running `gitlb run`, cut off from the Git server by a drop rule in its
// namespace (every fetch hangs until its deadline), still takes a killed backend out of new connections within
// fall x interval + 1 s, and puts it back after rise x interval once it answers again.
import test from 'ava';
import { partitionScenario, HEALTH } from '../partition-scenario.js';

test('partitioned lb node drains a dead backend and restores it as fast as a connected one would', async (t) => {
  const r = await partitionScenario({ partitioned: true, log: (m) => t.log(m) });
  t.log(JSON.stringify(r));
  t.true(r.fetchFailures > 0, 'the partition made fetches fail');
  t.true(r.failedFlows > 0, 'new connections hit the dead backend until health took it out (else the test proves nothing)');
  t.is(r.lateFlowsToDead, 0, 'no new connection reaches the dead backend after fall x interval + 1 s');
  // How fast is bench/health's business; here: the dead backend was taken out and the revived one came back.
  t.true(Number.isFinite(r.reviveToFlowMs), 'the revived backend gets new connections again');
  t.log(`dead backend got new connections for ${r.deathToZeroMs} ms; revived one its first after ${r.reviveToFlowMs} ms`);
});
