// Session affinity end to end through the XDP path in a lab namespace (BPF_PROG_TEST_RUN of the real xdp_lb with
// real route and neighbour lookups, dsr-l2: the real is read from the output frame's destination MAC). A weight
// change moves part of the table: the client's next connection, from another source port the new table sends to
// the other real, still reaches the real of its first connection on the service with affinity, and goes where the
// new table says on the same VIP's port without it.
import test from 'ava';
import { LAB, runHarness, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { ringSlot } from '../../src/bpf/dataplane/flow-hash.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';

const TAG = 'xaffl';
const VIP = '203.0.113.10';
const CLIENT = '192.0.2.1';
const SEED = 7;
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12' };
const MAC1 = LAB.neighbours[REALS[1]]!;
const MAC2 = LAB.neighbours[REALS[2]]!;
const TX = 3;
/** Before: real 1 has every entry (weight 1:0 in effect); after a weight change real 2 has 6 of 7. */
const BEFORE = Array(7).fill(1);
const AFTER = [2, 2, 2, 1, 2, 2, 2];
const state = (ring: number[]) => stateToJson(makeState({ reals: REALS, hashSeed: SEED, conntrackMaxEntries: 4096,
  services: [
    { id: 1, vip: VIP, forwarding: 'dsr-l2', ring, ports: [{ port: 80, protocol: 'TCP' }], affinityTimeoutS: 600 },
    { id: 2, vip: VIP, forwarding: 'dsr-l2', ring, ports: [{ port: 81, protocol: 'TCP' }] },
  ] }));
const pkt = (sport: number, dport: number, flags: number) => frame({ dst: LAB.lbA.mac, src: LAB.clientMac },
  ipPacket({ src: CLIENT, dst: VIP, l4: { tcp: { sport, dport, flags } } })).toString('hex');
/** A source port whose new flow to `dport` the AFTER table sends to real 2. */
const toReal2 = (dport: number, from: number) => {
  for (let p = from; p < from + 500; p++) if (AFTER[ringSlot({ src: CLIENT, dst: VIP, sport: p, dport, proto: 6 }, true, SEED, 7)] === 2) return p;
  throw new Error('no port');
};
const SYN = TCP_FLAGS.SYN;
const ACK = TCP_FLAGS.ACK;
const many = (...p: Array<[number, number, number]>) => ({ op: 'runMany', data: p.map(([s, d, f]) => pkt(s, d, f)), ifname: 'lbA' });
const A2 = toReal2(80, 30000);
const P2 = toReal2(81, 31000);

interface Run { retvals: number[]; dstMacs: string[]; error?: string }
let out: Promise<Run[]>;

test.before(() => {
  const { ns, pinRoot } = setupLab(TAG);
  out = runHarness(ns, { pinRoot, steps: [
    /* 0 */ { op: 'apply', state: state(BEFORE) },
    /* 1 */ many([29000, 80, SYN], [29000, 80, ACK], [29001, 81, SYN], [29001, 81, ACK]),
    /* 2 */ { op: 'apply', state: state(AFTER) },
    /* 3 */ many([A2, 80, SYN], [A2, 80, ACK], [P2, 81, SYN], [P2, 81, ACK], [29000, 80, ACK]),
  ] }) as Promise<Run[]>;
  out.catch(() => undefined);
});
test.after.always(() => teardownLab(TAG));

test('first connections on both ports reach real 1, the only real in the table', async (t) => {
  const r = (await out)[1]!;
  t.falsy(r.error);
  t.deepEqual(r.retvals, [TX, TX, TX, TX]);
  t.deepEqual(r.dstMacs, [MAC1, MAC1, MAC1, MAC1]);
});

test('after a weight change: with affinity the next connection keeps real 1; without, it follows the new table to real 2', async (t) => {
  const r = (await out)[3]!;
  t.falsy(r.error);
  t.deepEqual(r.retvals, [TX, TX, TX, TX, TX]);
  t.deepEqual(r.dstMacs, [MAC1, MAC1, MAC2, MAC2, MAC1], `ports ${A2} (affinity) and ${P2} (none); the established flow stays`);
});
