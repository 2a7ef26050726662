// Failure detection with the default check timings (interval 2 s, timeout 1 s, fall 3): an lb node running the real
// `gitlb run` (real XDP data plane) in front of three backends, new connections every 5 ms, be-2 dies: its server
// killed, its port closed (resets), or its port silent (every packet dropped). With passive signals (the default) the
// node sees be-2's SYNs go unanswered in its per-real counters, checks it at once and takes it out; with
// --no-passive-health it waits for its regular checks. Order and outcome are asserted here (which path took the
// real out, fewer failed connections than active checks alone, none after the regular checks' bound); the times
// are bench/health's (`bench/health/run passive`), quoted in docs/health.md.
import test from 'ava';
import { partitionScenario, type PartitionResult } from '../partition-scenario.js';

const SUSPECT_DETAIL = 'no answer to connect within 250 ms (suspect)';
let passiveKill: PartitionResult | undefined;

test.serial('default checks with passive signals: a killed backend is suspect and out on its first refused probe', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', log: (m) => t.log(m) });
  t.log(`passive + active (defaults), kill: death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}`);
  t.true(r.failedFlows > 0, 'new connections hit the dead backend until health took it out (else the test proves nothing)');
  t.true(r.suspected, 'the daemon called it suspect from its unanswered SYNs');
  t.is(r.downDetail, 'ECONNREFUSED');
  t.is(r.lateFlowsToDead, 0);
  passiveKill = r;
});

test.serial('the same with --no-passive-health: active checks alone take it out later (more failed connections)', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', passive: false, log: (m) => t.log(m) });
  t.log(`active only (defaults), kill: death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}`);
  t.false(r.suspected, 'no passive signals');
  t.is(r.downDetail, 'ECONNREFUSED');
  t.is(r.lateFlowsToDead, 0, 'no new connection reaches the dead backend after fall x interval + 1 s');
  if (passiveKill) t.true(r.failedFlows > passiveKill.failedFlows, `active only ${r.failedFlows} failed connections, passive ${passiveKill.failedFlows}`);
});

test.serial('default checks with passive signals: a closed port (resets) is suspect and out on its first refused probe', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', death: 'close', log: (m) => t.log(m) });
  t.log(`passive + active (defaults), port closed: death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}`);
  t.true(r.failedFlows > 0);
  t.true(r.suspected);
  t.is(r.downDetail, 'ECONNREFUSED');
  t.is(r.lateFlowsToDead, 0);
  t.true(Number.isFinite(r.reviveToFlowMs), 'it gets new connections again once the port is open');
});

test.serial('default checks with passive signals: a silent backend is out after one probe that gives up on its handshake', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', death: 'blackhole', log: (m) => t.log(m) });
  t.log(`passive + active (defaults), blackhole: death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}; back -> first flow ${r.reviveToFlowMs} ms`);
  t.true(r.failedFlows > 0);
  t.true(r.suspected);
  t.is(r.downDetail, SUSPECT_DETAIL, 'not the 1 s check timeout, nor three of them');
  t.is(r.lateFlowsToDead, 0);
  t.true(Number.isFinite(r.reviveToFlowMs), 'it gets new connections again once it answers');
});
