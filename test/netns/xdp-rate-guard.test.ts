// The new-flow rate guard (Cluster.spec.conntrack.newFlowRate, docs/datapath.md) through BPF_PROG_TEST_RUN of
// the real xdp_lb program in a test namespace: over the limit, new flows are still forwarded to the real the
// ring picks but are not inserted, so a SYN flood cannot flush the connection table; with the guard off (the
// default) every new flow is inserted. The packets of one burst run back to back (no counter reads between
// them), well inside one one-second window.
import test from 'ava';
import { LAB, runHarness, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';

const TAG = 'xrate';
const VIP = '203.0.113.10';
const LIMIT = 5;
const FLOWS = 40;
const ring = Array.from({ length: 7 }, (_, i) => 1 + (i % 2));
const state = (newFlowRate: number) => ({
  ...makeState({ reals: { 1: '198.51.100.11', 2: '198.51.100.12' }, hashSeed: 7, conntrackMaxEntries: 4096,
    services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring }] }),
  ...(newFlowRate && { conntrackNewFlowRate: newFlowRate }),
});
const syn = (sport: number, flags: number = TCP_FLAGS.SYN) => frame({ dst: LAB.lbA.mac, src: LAB.clientMac },
  ipPacket({ src: '192.0.2.1', dst: VIP, l4: { tcp: { sport, dport: 80, flags } } })).toString('hex');
const burst = (base: number) => ({ op: 'runMany', data: Array.from({ length: FLOWS }, (_, i) => syn(base + i)), ifname: 'lbA' });

interface Burst { retvals: number[]; counters: Record<string, number>; ctEntries: number; error?: string }
let out: Promise<unknown[]>;

test.before(() => {
  const { ns, pinRoot } = setupLab(TAG);
  out = runHarness(ns, { pinRoot, steps: [
    { op: 'apply', state: stateToJson(state(LIMIT)) }, { op: 'ctClear' }, burst(20000),
    // an established flow (inserted before the flood) still hits; a flow that was over the limit misses
    { op: 'run', data: syn(20000, TCP_FLAGS.ACK), ifname: 'lbA' },
    { op: 'apply', state: stateToJson(state(0)) }, { op: 'ctClear' }, burst(30000),
  ] });
  out.catch(() => undefined);
});
test.after.always(() => teardownLab(TAG));

test('over the limit, new flows are forwarded without a connection-table entry', async (t) => {
  const r = (await out)[2] as Burst;
  t.falsy(r.error);
  t.deepEqual(r.retvals, Array(FLOWS).fill(3), 'every SYN is forwarded (XDP_TX)');
  t.is(r.counters.ct_miss, FLOWS);
  t.is(r.counters.tx, FLOWS);
  t.is(r.counters.ct_rate_limited, FLOWS - LIMIT);
  t.is(r.ctEntries, LIMIT, 'only the flows within the limit are remembered');
});

test('a flow inserted before the limit keeps its entry', async (t) => {
  const r = (await out)[3] as { retval: number; counters: Record<string, number> };
  t.is(r.retval, 3);
  t.is(r.counters.ct_hit, 1);
});

test('with the guard off (default) every new flow is inserted', async (t) => {
  const r = (await out)[6] as Burst;
  t.falsy(r.error);
  t.deepEqual(r.retvals, Array(FLOWS).fill(3));
  t.is(r.counters.ct_rate_limited, undefined);
  t.is(r.ctEntries, FLOWS);
});
