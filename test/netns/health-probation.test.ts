// Make-before-break for health: reals a revision adds or changes are probed before the revision is applied.
// In a network namespace made here (reals are addresses on its loopback device), test/health-probation-runner.ts
// drives the real reconciler with a real Git server (git http-backend), the real LB data plane (pinned maps under
// a per-run bpffs directory, attached to no interface), real TCP servers and probes. A targetPort pointing at a
// closed port fails the revision at `health` before the kernel ever holds it (sampled all along: no connection
// could have been sent there), the last good state keeps serving, and exactly one revert is pushed; a new real
// that does not answer gets no table entries while a new one that does is admitted.
// What a client sees meanwhile (real traffic through the lab's router and XDP lb nodes): test/netns/e2e.test.ts.
import test from 'ava';
import { once } from 'node:events';
import { rmSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { addAddrs, createNetns, deleteNetns, nsName, nsSpawn, stopChild } from '../../src/lab/netns.js';
import { LineTap } from '../health-lab.js';

const RUNNER = fileURLToPath(new URL('../health-probation-runner.ts', import.meta.url));
const NS = nsName('probation');
const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-probation`;

test.after.always(async () => {
  await deleteNetns(NS);
  rmSync(PIN_BASE, { recursive: true, force: true });
});

test('targetPort at a closed port fails at health with nothing applied and one revert; a silent new real gets no entries', async (t) => {
  await createNetns(NS);
  await addAddrs(NS, 'lo', ['198.51.100.1/32', '198.51.100.2/32', '198.51.100.3/32', '198.51.100.4/32', '198.51.100.5/32']);
  const child = nsSpawn(NS, [process.execPath, '--import', 'tsx', RUNNER, PIN_BASE], { stdio: ['ignore', 'pipe', 'inherit'] });
  const out = new LineTap(child);
  try {
    const closed = JSON.parse(await out.next((l) => l.startsWith('{'), 120_000, 'closed-port scenario'));
    if (closed.scenario === 'error') throw new Error(closed.message);
    t.log(`closed port scenario: ${closed.samples} samples of the live maps while the revision was tried`);
    t.is(closed.outcome.kind, 'failed', JSON.stringify(closed.outcome));
    t.is(closed.outcome.stage, 'health');
    t.regex(closed.outcome.reason, new RegExp(`new or changed reals not healthy before traffic: web/198\\.51\\.100\\.1:${closed.closed} \\(ECONNREFUSED`));
    t.is(closed.outcome.rollback, 'pushed');
    t.deepEqual(closed.targetPortsBefore, [closed.open]);
    t.true(closed.samples > 0);
    t.deepEqual(closed.seen, [closed.open], 'the kernel never pointed the VIP at the closed port');
    t.true(closed.appliedIsFirst, 'the last good revision still serves');
    t.deepEqual(closed.digestsAfter, closed.digestsBefore);
    t.true(closed.again === 'applied' || closed.again === 'unchanged', closed.again);
    t.is(closed.rollbacksPushed, 1, 'exactly one revert');
    t.true(closed.headParentIsBad, 'the revert sits on the bad commit');
    t.true(closed.headServiceIsOriginal);

    const partial = JSON.parse(await out.next((l) => l.startsWith('{'), 120_000, 'partial scenario'));
    if (partial.scenario === 'error') throw new Error(partial.message);
    t.is(partial.outcome.kind, 'applied', JSON.stringify(partial.outcome));
    t.true(partial.appliedIsRev);
    t.is(partial.atApply.silent, 0, 'the silent new real never got an entry');
    t.true(partial.atApply.answering > 0, 'the answering new real was admitted');
    t.is(partial.checkerState, 'down', 'the checker starts it from its probation result');
    t.is(partial.later.silent, 0, 'still out after several check intervals');
  } finally {
    // After its last line the runner removes its Git cache, served repository and pins in its own `finally`; killed
    // 3 s after that line on a loaded machine, it left /tmp/gitlb-probation-* and /tmp/gitlb-srv-* behind.
    if (child.exitCode === null && child.signalCode === null) await Promise.race([once(child, 'exit'), sleep(30_000)]);
    await stopChild(child, 3000);
  }
});
