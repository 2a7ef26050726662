// Passive signals (src/reconciler/health/passive.ts): a real whose SYNs get nothing else through the lb node is
// suspect; one whose SYNs are followed by the handshake's ACK, or that gets no new connections, is not. And a
// failed check of a suspect real takes it down at once, while a healthy one still needs `fall` failures.
import test from 'ava';
import { PASSIVE, PassiveSignals, deficit, passiveAddresses } from '../../src/reconciler/health/passive.js';
import { initialHealth, stepHealth } from '../../src/reconciler/health/hysteresis.js';

const A = '198.51.100.21';
const B = '198.51.100.22';

type Step = { syns: number; others: number };

/** Feeds one sample per step, pollMs apart; per step each real gets `syns` SYNs and `others` other packets. */
function run(steps: ReadonlyArray<Record<string, Step>>, signals = new PassiveSignals()) {
  const totals = new Map<string, { packets: number; newFlows: number }>();
  return steps.map((traffic, i) => {
    for (const [a, t] of Object.entries(traffic)) {
      const c = totals.get(a) ?? { packets: 0, newFlows: 0 };
      c.newFlows += t.syns;
      c.packets += t.syns + t.others;
      totals.set(a, c);
    }
    return signals.observe(i * PASSIVE.pollMs, new Map([...totals].map(([a, c]) => [a, { ...c }])));
  });
}
const repeat = (n: number, traffic: Record<string, Step>) => Array.from({ length: n }, () => traffic);

test('a real dies under traffic: suspect once two SYNs with nothing behind them are older than the settle time', (t) => {
  // A and B both live (each SYN followed by its ACK and data) for a second, then A dies; B stays live.
  const v = run([...repeat(10, { [A]: { syns: 1, others: 3 }, [B]: { syns: 1, others: 3 } }), ...repeat(10, { [A]: { syns: 1, others: 0 }, [B]: { syns: 1, others: 3 } })]);
  const first = v.findIndex((s) => s.includes(A));
  // dead from sample 10 on; its SYNs of samples 10 and 11 are settled at sample 12 (settleMs later)
  t.is(first, 12);
  t.true(v.slice(first).every((s) => s.includes(A)), 'and stays suspect while its SYNs go unanswered');
  t.false(v.some((s) => s.includes(B)), 'a live real answers: the handshake ACK and data follow its SYNs');
});

test('packets of connections made before the death (retransmitted requests) delay suspicion, never cause it', (t) => {
  const live = repeat(5, { [A]: { syns: 2, others: 4 } });
  const dead = (retransmits: number[]) => Array.from({ length: 10 }, (_, i) => ({ [A]: { syns: 2, others: retransmits.includes(i) ? 3 : 0 } }));
  const at = (v: string[][]) => v.findIndex((s) => s.includes(A));
  const clean = at(run([...live, ...dead([])]));
  t.is(clean, 6, 'dead at sample 5: its two SYNs settled a sample later');
  // three old connections retransmit their requests 100-200 ms and 500-600 ms after the death (RTO back-off)
  const late = at(run([...live, ...dead([1, 5])]));
  t.true(late > clean, `suspect at sample ${late}, not ${clean}`);
  t.true(late < 15, 'but suspect in the end: the deficit grows by two SYNs per sample');
  // a live real with heavy established traffic and a few new connections never is
  t.deepEqual(run(repeat(20, { [A]: { syns: 1, others: 50 } })).flat(), []);
});

test('benign: a live real whose clients are far away (their ACKs come 300 ms after the SYNs) is not suspect', (t) => {
  // 2 SYNs per sample; each connection's ACK, request and FIN (4 packets) arrive 3 samples later
  const steps = Array.from({ length: 30 }, (_, i) => ({ [A]: { syns: 2, others: i >= 3 ? 8 : 0 } }));
  const v = run(steps);
  t.deepEqual(v.slice(5).flat(), [], 'its SYNs look unanswered for 300 ms, but its clients\' packets keep coming');
  // the same real dies at sample 20: suspect once its clients' packets have stopped
  const dies = steps.map((s, i) => (i >= 20 ? { [A]: { syns: 2, others: 0 } } : s));
  const first = run(dies).findIndex((s, i) => i >= 5 && s.includes(A));
  t.true(first >= 20 && first <= 23, `suspect at sample ${first}`);
});

test('benign: an idle real, a real with only established traffic, one lone SYN, and answers one sample late are not suspect', (t) => {
  t.deepEqual(run(repeat(10, { [A]: { syns: 0, others: 0 } })).flat(), [], 'idle: left to the active checks');
  t.deepEqual(run(repeat(10, { [A]: { syns: 0, others: 5 } })).flat(), [], 'no new connections');
  t.deepEqual(run([{ [A]: { syns: 0, others: 0 } }, { [A]: { syns: 1, others: 0 } }, ...repeat(8, { [A]: { syns: 0, others: 0 } })]).flat(), [],
    'one unanswered SYN is under minSyns');
  // a round trip of up to settleMs: each sample's SYNs are answered in the next sample
  const late = [{ [A]: { syns: 3, others: 0 } }, ...repeat(10, { [A]: { syns: 3, others: 3 } })];
  t.deepEqual(run(late).flat(), [], 'ACKs that come within settleMs of their SYNs');
});

test('SYNs too young to have their answer do not count; a counter reset starts the history again', (t) => {
  const signals = new PassiveSignals();
  for (let at = 0; at <= 500; at += 100) signals.observe(at, new Map([[A, { packets: 5, newFlows: 5 }]]));
  // two SYNs in the last 100 ms only: not settled yet
  t.deepEqual(signals.observe(600, new Map([[A, { packets: 7, newFlows: 7 }]])), []);
  // a new data plane: counters back at 0; the SYNs before the reset are not compared with the new counters
  t.deepEqual(signals.observe(700, new Map([[A, { packets: 0, newFlows: 0 }]])), []);
  t.deepEqual(signals.observe(800, new Map([[A, { packets: 3, newFlows: 3 }]])), []);
  t.deepEqual(signals.observe(900, new Map([[A, { packets: 3, newFlows: 3 }]])), [A], 'then judged again on the new counters');
});

test('deficit: the worst start sample counts, SYNs younger than the settle time do not', (t) => {
  const h = [
    { at: 0, packets: 10, newFlows: 5 },   // others 5
    { at: 100, packets: 14, newFlows: 6 }, // others 8: the last answer
    { at: 200, packets: 17, newFlows: 9 }, // 3 SYNs, no answer
    { at: 300, packets: 27, newFlows: 19 }, // 10 SYNs, too young at 300
  ];
  t.is(deficit(h, 300, 100), 3);
  t.is(deficit(h, 300, 250), 0, 'only the SYNs up to the first sample are settled: all answered');
  t.is(deficit(h.slice(0, 1), 0, 100), 0, 'one sample: nothing to compare');
});

test('reals of a checked service with a TCP port are judged, whatever UDP they also serve', (t) => {
  const C = '198.51.100.23';
  const D = '198.51.100.24';
  const svc = (protocols: string[], type: string, address: string) => ({ spec: { ports: protocols.map((protocol) => ({ protocol })), healthCheck: { type }, reals: [{ address }] } });
  const judged = passiveAddresses({ services: [
    svc(['TCP'], 'http', A),
    svc(['UDP'], 'tcp', B), svc(['TCP'], 'tcp', B), // a UDP service beside a TCP one: its TCP counters judge it
    svc(['UDP', 'TCP'], 'tcp', C), // a mixed service (the sample config's dns and game)
    svc(['TCP'], 'none', D), svc(['UDP'], 'tcp', D), // unchecked TCP, and a checked UDP-only service: no TCP check to confirm
  ] });
  t.deepEqual([...judged].sort(), [A, B, C]);
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
