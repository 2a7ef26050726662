// Passive signals (src/reconciler/health/passive.ts): a real whose SYNs get nothing else through the lb node is
// suspect; one whose SYNs are followed by the handshake's ACK, or that gets no new connections, is not. And a
// failed check of a suspect real takes it down at once, while a healthy one still needs `fall` failures.
import test from 'ava';
import { PASSIVE, PassiveSignals, passiveAddresses } from '../../src/reconciler/health/passive.js';
import { initialHealth, stepHealth } from '../../src/reconciler/health/hysteresis.js';

const A = '198.51.100.21';
const B = '198.51.100.22';

/** Feeds `steps` samples every pollMs; per step each real gets `syns` SYNs and `others` other packets. */
function run(steps: number, traffic: Record<string, { syns: number; others: number }>, signals = new PassiveSignals()) {
  const totals = new Map(Object.keys(traffic).map((a) => [a, { packets: 0, newFlows: 0 }]));
  const verdicts: string[][] = [];
  for (let i = 0; i < steps; i++) {
    for (const [a, t] of Object.entries(traffic)) {
      const c = totals.get(a)!;
      c.newFlows += t.syns;
      c.packets += t.syns + t.others;
    }
    verdicts.push(signals.observe(i * PASSIVE.pollMs, new Map([...totals].map(([a, c]) => [a, { ...c }]))));
  }
  return verdicts;
}

test('SYNs with nothing else behind them make a real suspect after one window; answered SYNs never', (t) => {
  const v = run(10, { [A]: { syns: 1, others: 0 }, [B]: { syns: 1, others: 2 } });
  const firstSuspect = v.findIndex((s) => s.includes(A));
  t.is(firstSuspect, PASSIVE.windowMs / PASSIVE.pollMs, 'a whole window of history first');
  t.true(v.slice(firstSuspect).every((s) => s.includes(A)));
  t.false(v.some((s) => s.includes(B)), 'a live real answers: the handshake ACK and data follow its SYNs');
});

test('benign: an idle real, a real with only established traffic, and too few SYNs are not suspect', (t) => {
  t.deepEqual(run(10, { [A]: { syns: 0, others: 0 } }).flat(), [], 'idle: left to the active checks');
  t.deepEqual(run(10, { [A]: { syns: 0, others: 5 } }).flat(), [], 'no new connections');
  // one SYN in the whole window (older than settleMs): under minSyns
  const signals = new PassiveSignals();
  signals.observe(0, new Map([[A, { packets: 0, newFlows: 0 }]]));
  signals.observe(100, new Map([[A, { packets: 1, newFlows: 1 }]]));
  for (let at = 200; at <= 600; at += 100) t.deepEqual(signals.observe(at, new Map([[A, { packets: 1, newFlows: 1 }]])), []);
});

test('a SYN too young to have its answer does not count; a counter reset starts the history again', (t) => {
  const signals = new PassiveSignals({ windowMs: 500, settleMs: 100, minSyns: 2 });
  for (let at = 0; at <= 500; at += 100) signals.observe(at, new Map([[A, { packets: 5, newFlows: 5 }]]));
  // two SYNs in the last 100 ms only: not settled yet
  t.deepEqual(signals.observe(600, new Map([[A, { packets: 7, newFlows: 7 }]])), []);
  // a new data plane: counters back at 0, no verdict until a window of the new counters
  t.deepEqual(signals.observe(700, new Map([[A, { packets: 0, newFlows: 0 }]])), []);
  t.deepEqual(signals.observe(800, new Map([[A, { packets: 3, newFlows: 3 }]])), []);
});

test('only reals every service of which is TCP and checked are judged', (t) => {
  const svc = (protocol: string, type: string, address: string) => ({ spec: { ports: [{ protocol }], healthCheck: { type }, reals: [{ address }] } });
  t.deepEqual([...passiveAddresses({ services: [svc('TCP', 'http', A), svc('UDP', 'tcp', B), svc('TCP', 'tcp', B), svc('TCP', 'none', '198.51.100.23')] })], [A]);
});

test('hysteresis: a failed check of a suspect real takes it down at once; coming back still takes rise', (t) => {
  const fail = { ok: false, detail: 'ECONNREFUSED', at: 1000, durationMs: 1 };
  const up = stepHealth(initialHealth(0), { ok: true, detail: 'HTTP 200', at: 500, durationMs: 1 }, 2, 3).next;
  t.is(stepHealth(up, fail, 2, 3).next.state, 'up', 'without passive evidence one failure is not enough');
  const down = stepHealth(up, fail, 2, 3, true);
  t.true(down.changed);
  t.is(down.next.state, 'down');
  const once = stepHealth(down.next, { ok: true, detail: 'HTTP 200', at: 1200, durationMs: 1 }, 2, 3, true);
  t.is(once.next.state, 'down', 'rise still applies');
});
