// Failure detection with the default check timings (interval 2 s, timeout 1 s, fall 3): an lb node running the real
// `gitlb run` (real XDP data plane) in front of three backends, new connections every 5 ms, be-2 dies: its server
// killed, its port closed (resets), or its port silent (every packet dropped). With passive signals (the default) the
// node sees be-2's SYNs go unanswered in its per-real counters, checks it at once and takes it out; with
// --no-passive-health it waits for its regular checks. Order and outcome are asserted here (which path took the
// real out, fewer failed connections than active checks alone, none after the regular checks' bound); the times
// are bench/health's (`bench/health/run passive`), quoted in docs/health.md. A real that serves UDP too is judged by
// its TCP traffic alone; and an attacker's SYNs that are never answered make reals suspect, never down.
import test from 'ava';
import { BE, partitionScenario, type PartitionResult } from '../partition-scenario.js';

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
  t.true(r.suspectBeforeDown, 'the suspicion came first');
  // The decisive failure is the probe the suspicion moved forward (its 250 ms handshake deadline), or, when a
  // regular probe was already running more than 750 ms when the suspicion came (a late passive poll on a loaded
  // machine), that probe's own 1 s timeout: either way one probe while suspect, not the three the defaults need
  // (after the first of those the suspicion's 250 ms probe would have failed first).
  t.true([SUSPECT_DETAIL, 'timeout after 1000 ms'].includes(r.downDetail ?? ''), `one probe while suspect: ${r.downDetail}`);
  t.is(r.lateFlowsToDead, 0);
  t.true(Number.isFinite(r.reviveToFlowMs), 'it gets new connections again once it answers');
});

test.serial('a real serving TCP and UDP (a mixed service, UDP one-packet flows beside the connections): a kill is seen by the passive path', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', udp: true, log: (m) => t.log(m) });
  t.log(`passive + active (defaults), TCP+UDP real, kill: death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}; suspects ${r.suspects.join(', ')}`);
  t.true(r.failedFlows > 0);
  t.true(r.suspected, 'its TCP counters showed the unanswered SYNs (the UDP flows are not in them)');
  t.true(r.suspectBeforeDown, 'the suspicion came first: the probe it moved forward took the real down');
  t.is(r.downDetail, 'ECONNREFUSED');
  t.true(r.downs.every((d) => d.endsWith(` ${BE['be-2']}`)), `only be-2 was taken down: ${r.downs.join(', ')}`);
  t.is(r.lateFlowsToDead, 0);
});

test.serial('attacker: SYNs and their retransmissions that are never answered make healthy reals suspect, never down', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', synFlood: 150, gapMs: 20, log: (m) => t.log(m) });
  t.log(`SYN flood: suspects ${[...new Set(r.suspects)].join(', ')}; downs ${r.downs.join(', ') || 'none'}`);
  t.true(r.suspects.length > 0, 'the flood did make reals suspect (else the test proves nothing)');
  t.deepEqual(r.downs, [], 'their probes answered: nothing was taken down');
  t.is(r.failedFlows, 0, 'and new connections afterwards all succeed');
  t.is(r.reviveToFlowMs, 0, 'on every backend');
});

test.serial('the same under SNAT (the sample config\'s dns): a killed TCP+UDP real is suspect, then down by the probe', async (t) => {
  const r = await partitionScenario({ partitioned: false, checks: 'defaults', udp: true, mode: 'snat', log: (m) => t.log(m) });
  t.log(`passive + active (defaults), snat, TCP+UDP real, kill: death -> zero new flows ${r.deathToZeroMs} ms, failed flows ${r.failedFlows}; suspects ${r.suspects.join(', ')}`);
  t.true(r.failedFlows > 0);
  t.true(r.suspected, 'its SYNs, retransmissions included, with nothing behind them');
  t.true(r.suspectBeforeDown);
  t.is(r.downDetail, 'ECONNREFUSED');
  t.true(r.downs.every((d) => d.endsWith(` ${BE['be-2']}`)), `only be-2 was taken down: ${r.downs.join(', ')}`);
  t.is(r.lateFlowsToDead, 0);
});
