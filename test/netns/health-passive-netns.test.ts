// Failure detection with the default check timings (interval 2 s, timeout 1 s, fall 3): an lb node running the real
// `gitlb run` (real XDP data plane) in front of three backends, new connections every 5 ms, be-2's server killed.
// With passive signals (the default) the node sees be-2's SYNs go unanswered in its per-real counters, checks it
// at once and takes it out; with --no-passive-health it waits for its regular checks. Both figures are printed
// (docs/health.md quotes them); the only timed assertion is a generous bound on the passive case.
import test from 'ava';
import { partitionScenario, DEFAULT_HEALTH } from '../partition-scenario.js';

test.serial('default checks with passive signals: a killed backend gets no new connections within about a second', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', log: (m) => t.log(m) });
  t.log(`passive + active (defaults): death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}`);
  t.true(r.failedFlows > 0, 'new connections hit the dead backend until health took it out (else the test proves nothing)');
  t.is(r.lateFlowsToDead, 0);
  t.true(r.deathToZeroMs <= 2500, `dead backend got new connections for ${r.deathToZeroMs} ms (target 1 s; regular checks alone take up to ${DEFAULT_HEALTH.fall * DEFAULT_HEALTH.intervalMs} ms)`);
});

test.serial('the same with --no-passive-health: active checks alone (the figure beside it)', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', passive: false, log: (m) => t.log(m) });
  t.log(`active only (defaults): death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}`);
  t.true(r.failedFlows > 0);
  t.is(r.lateFlowsToDead, 0, `no new connection reaches the dead backend after fall x interval + 1 s`);
});

test.serial('default checks with passive signals: a silent backend (every packet to its port dropped) is out after one probe that gives up on its handshake', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', death: 'blackhole', log: (m) => t.log(m) });
  t.log(`passive + active (defaults), blackhole: death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}; back -> first flow ${r.reviveToFlowMs} ms`);
  t.true(r.failedFlows > 0);
  t.is(r.lateFlowsToDead, 0);
  t.true(r.deathToZeroMs <= 3500, `silent backend got new connections for ${r.deathToZeroMs} ms (passive evidence, then one probe with a 250 ms handshake deadline expected; bench/health/run passive measures it)`);
  t.true(Number.isFinite(r.reviveToFlowMs), 'it gets new connections again once it answers');
});
