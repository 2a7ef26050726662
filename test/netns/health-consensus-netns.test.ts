// Agreement with real checks: three lb namespaces each run a real HealthChecker against two backend namespaces on
// one bridge. lb1 is partitioned from backend B (a `prohibit` route inside lb1 only). Each node's published
// observations then feed consensusHealth on every node: the down sets, and so the Maglev digests, must be equal.
// Then B's server really dies: all three observe it and all three agree it is down.
import test from 'ava';
import { createNetns, createBridge, vethPair, cleanupRun, nsName, run, waitForTcp } from '../../src/lab/netns.js';
import { consensusHealth, decideHealth, type NodeObservations, type Observations } from '../../src/reconciler/health/index.js';
import { Backend, Runner, model, service } from '../health-lab.js';

const SW = nsName('hsw');
const LBS = ['lb1', 'lb2', 'lb3'];
const A = '198.51.100.21', B = '198.51.100.22';
const PORT = 8101;

test.before(async () => {
  await createNetns(SW);
  await createBridge(SW, 'br0');
  let i = 1;
  for (const [short, addr] of [...LBS.map((n, k) => [n, `198.51.100.${11 + k}`] as const), ['bea', A] as const, ['beb', B] as const]) {
    const ns = nsName(`h${short}`);
    await createNetns(ns);
    await vethPair({ ns, name: 'eth0', addrs: [`${addr}/24`] }, { ns: SW, name: `p${i++}`, master: 'br0' });
  }
});

test.after.always(async () => {
  await cleanupRun();
});

test.serial('consensus with real checks: partitioned lb1 disagrees locally, all nodes agree on the consensus set', async (t) => {
  const m = model([service('web', { type: 'tcp', port: PORT, intervalMs: 150, timeoutMs: 120, rise: 2, fall: 2 }, [A, B])], LBS,
    { mode: 'consensus', staleAfterMs: 30_000 });
  const backends = [await Backend.start(nsName('hbea'), 'tcp', PORT), await Backend.start(nsName('hbeb'), 'tcp', PORT)];
  const runners: Runner[] = [];
  try {
    for (const n of LBS) await waitForTcp(nsName(`h${n}`), B, PORT);
    // The partition: lb1 (and only lb1) can no longer reach B.
    await run(['ip', '-n', nsName('hlb1'), 'route', 'add', 'prohibit', `${B}/32`]);
    for (const n of LBS) runners.push(await Runner.start(nsName(`h${n}`), m));

    await runners[0]!.change('web', B, 'down', 5000);
    await Promise.all(runners.slice(1).map((r) => r.change('web', B, 'up', 5000)));
    await Promise.all(runners.map((r) => r.change('web', A, 'up', 5000)));

    const publish = async (): Promise<NodeObservations[]> => {
      const now = new Date().toISOString();
      return Promise.all(runners.map(async (r, i) => ({ node: LBS[i]!, publishedAt: now, observations: (await r.snapshot()).observations as Observations })));
    };
    let published = await publish();
    t.deepEqual(published[0]!.observations.web![B]!.up, false, 'lb1 itself sees B down');
    const downSets = (pub: NodeObservations[]) => pub.map((self) => consensusHealth(self, pub.filter((p) => p !== self), LBS, Date.now(), 30_000).down);
    t.deepEqual(downSets(published), [{}, {}, {}]);
    const healthyEverywhere = published.map((self) =>
      decideHealth({ model: m, node: self.node, local: self.observations, peers: published.filter((p) => p !== self), now: Date.now() }).view.isHealthy('web', B));
    t.deepEqual(healthyEverywhere, [true, true, true]);

    // B really dies: every node sees it, the quorum is reached everywhere.
    const killedAt = await backends[1]!.kill();
    const downs = await Promise.all(runners.slice(1).map((r) => r.change('web', B, 'down', 5000)));
    t.log(`B killed -> down on lb2/lb3 after ${downs.map((d) => Date.parse(d.at) - killedAt).join(' / ')} ms (fall 2 x 150 ms)`);
    published = await publish();
    t.deepEqual(downSets(published), [{ web: [B] }, { web: [B] }, { web: [B] }]);
  } finally {
    await Promise.all(runners.map((r) => r.stop()));
    await Promise.all(backends.map((b) => b.stop()));
  }
});
