// Issue 24, DSR: a new connection never reuses a connection-table entry that names a real the table no longer
// gives it, and an established flow keeps its real across the table change. Through BPF_PROG_TEST_RUN of the real
// xdp_lb in a lab namespace (dsr-l2: the real is read from the output's destination MAC). The attacker's
// reproduction: connect from a fixed source port, take that real out of the ring (it stays a real of the node, as
// a drained or unhealthy real does), connect again from the same port; once with the new-flow rate guard off and
// once with the guard's window full, where the SYN is forwarded without a connection-table insert.
import test from 'ava';
import { LAB, runHarness, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';

const TAG = 'xreco';
const VIP = '203.0.113.10';
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12' };
const MAC1 = LAB.neighbours[REALS[1]]!;
const MAC2 = LAB.neighbours[REALS[2]]!;
const TX = 3;
const state = (real: 1 | 2, newFlowRate = 0) => stateToJson({
  ...makeState({ reals: REALS, hashSeed: 7, conntrackMaxEntries: 4096,
    services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: Array(7).fill(real) }] }),
  ...(newFlowRate && { conntrackNewFlowRate: newFlowRate }),
});
const pkt = (sport: number, flags: number) => frame({ dst: LAB.lbA.mac, src: LAB.clientMac },
  ipPacket({ src: '192.0.2.1', dst: VIP, l4: { tcp: { sport, dport: 80, flags } } })).toString('hex');
const SYN = TCP_FLAGS.SYN;
const ACK = TCP_FLAGS.ACK;
const many = (...p: Array<[number, number]>) => ({ op: 'runMany', data: p.map(([s, f]) => pkt(s, f)), ifname: 'lbA' });

interface Run { retvals: number[]; dstMacs: string[]; counters: Record<string, number>; ctEntries: number; error?: string }
let out: Promise<Run[]>;

test.before(() => {
  const { ns, pinRoot } = setupLab(TAG);
  out = runHarness(ns, { pinRoot, steps: [
    /* 0 */ { op: 'apply', state: state(1) }, { op: 'ctClear' },
    /* 2 */ many([21000, SYN], [21000, ACK], [21001, SYN], [21001, ACK]),
    /* 3 */ { op: 'apply', state: state(2) },
    /* 4 */ many([21001, ACK], [21000, SYN], [21000, ACK]),
    // the rate guard: real 1 in the table again, a flow on it, then real 1 out and a window of one insert per
    // second that a filler SYN fills, so the reconnecting SYN is forwarded without an insert
    /* 5 */ { op: 'apply', state: state(1) }, { op: 'ctClear' },
    /* 7 */ many([22000, SYN], [22000, ACK], [22001, SYN], [22001, ACK]),
    /* 8 */ { op: 'apply', state: state(2, 1) },
    /* 9 */ many([22999, SYN], [22001, ACK], [22000, SYN], [22000, ACK]),
  ] }) as Promise<Run[]>;
  out.catch(() => undefined);
});
test.after.always(() => teardownLab(TAG));

test('two connections on real 1 while the table names it', async (t) => {
  const r = (await out)[2]!;
  t.falsy(r.error);
  t.deepEqual(r.retvals, [TX, TX, TX, TX]);
  t.deepEqual(r.dstMacs, [MAC1, MAC1, MAC1, MAC1]);
});

test('real 1 out of the table: the established flow keeps real 1; a reconnect from the same source port goes to real 2, and so does its next segment', async (t) => {
  const r = (await out)[4]!;
  t.falsy(r.error);
  t.deepEqual(r.retvals, [TX, TX, TX]);
  t.deepEqual(r.dstMacs, [MAC1, MAC2, MAC2], 'established ACK, reconnecting SYN, its ACK');
  t.is(r.counters.ct_hit, 2, 'the established ACK and the new connection\'s ACK hit their entries');
});

test('guard window full: a reconnect from the same source port is forwarded to real 2 and its next segment does not find the old entry', async (t) => {
  const r = (await out)[9]!;
  t.falsy(r.error);
  t.deepEqual(r.retvals, [TX, TX, TX, TX]);
  t.deepEqual(r.dstMacs, [MAC2, MAC1, MAC2, MAC2], 'filler SYN, established ACK, reconnecting SYN, its ACK');
  t.is(r.counters.ct_rate_limited, 2, 'the reconnecting SYN and its re-hashed ACK are over the window');
  t.is(r.counters.ct_hit, 1, 'only the established flow hits');
  t.is(r.ctEntries, 2, 'the filler and the established flow; the reconnect\'s old entry is gone');
});
