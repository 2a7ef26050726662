// Source ranges (Service spec.sourceRanges) in xdp_lb through BPF_PROG_TEST_RUN: an allowed IPv4 and IPv6 client
// reaches the real (output frame byte for byte), a client outside the ranges is dropped and counted
// (drop_source_range), a service without ranges is unaffected, prefixes of one service never match for another
// (the trie's longest match is per service), a client removed from the ranges loses its established flow while the
// clients that stay keep theirs, and a service whose ranges are removed takes everyone again. The program runs in a
// namespace of its own (test/lib/xdp-lab.ts) so bpf_fib_lookup has known neighbours.
import test from 'ava';
import { TCP_FLAGS, frame, hex, ipPacket, mac, type EthSpec } from '../lib/packets.js';
import { LAB, runStateCases, teardownLab, type CaseResult } from '../lib/xdp-lab.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import type { DesiredState } from '../../src/render/state.js';

const TAG = 'xdsr';
const REALS: Record<number, string> = { 1: '198.51.100.11', 2: '198.51.100.12', 3: '2001:db8:2::11' };
const ring7 = (id: number) => Array.from({ length: 7 }, () => id);
const V4 = '203.0.113.10'; // service 1: 192.0.2.0/24
const V4B = '203.0.113.13'; // service 5: 192.0.2.128/25 and 192.0.2.7/32 (inside service 1's /24, longer)
const OPEN = '203.0.113.11'; // service 3: no ranges
const V6 = '2001:db8:f::10'; // service 2: 2001:db8:c::/48

const services = (one: string[] | undefined): SvcSpec[] => [
  { id: 1, vip: V4, forwarding: 'dsr-l2', ring: ring7(1), ...(one && { sourceRanges: one }) },
  { id: 2, vip: V6, forwarding: 'dsr-l2', ring: ring7(3), sourceRanges: ['2001:db8:c::/48'] },
  { id: 3, vip: OPEN, forwarding: 'dsr-l2', ring: ring7(2) },
  { id: 5, vip: V4B, forwarding: 'dsr-l2', ring: ring7(2), sourceRanges: ['192.0.2.128/25', '192.0.2.7/32'] },
];
const state = (one: string[] | undefined): DesiredState =>
  makeState({ reals: REALS, services: services(one), addresses: ['198.51.100.1', '2001:db8:2::1'] });
const STATES = {
  base: state(['192.0.2.0/24']),
  // service 1 narrows to the upper half: 192.0.2.1 leaves, 192.0.2.200 stays
  narrowed: state(['192.0.2.128/25']),
  // service 1 without ranges: everyone again
  open: state(undefined),
};

type Action = 'drop' | 'tx';
const ACTION: Record<Action, number> = { drop: 1, tx: 3 };
interface Case { name: string; state: keyof typeof STATES; keepCt?: boolean; input: Buffer; action: Action; real?: number; counter: string }

const ETH_IN: EthSpec = { dst: LAB.lbA.mac, src: LAB.clientMac };
const syn = (src: string, dst: string, sport: number, flags: number = TCP_FLAGS.SYN) =>
  frame(ETH_IN, ipPacket({ src, dst, l4: { tcp: { sport, dport: 80, flags, seq: 1000, ack: flags & TCP_FLAGS.ACK ? 2000 : 0 } } }));
/** dsr-l2 output: MACs rewritten, the rest byte-identical */
const l2Out = (input: Buffer, real: number) => Buffer.concat([mac(LAB.neighbours[REALS[real]!]!), mac(LAB.lbA.mac), input.subarray(12)]);

const cases: Case[] = [
  { name: 'v4 client inside the ranges reaches the real', state: 'base', input: syn('192.0.2.1', V4, 41001), action: 'tx', real: 1, counter: 'tx' },
  { name: 'v4 client outside the ranges is dropped and counted', state: 'base', input: syn('198.51.100.77', V4, 41002), action: 'drop', counter: 'drop_source_range' },
  { name: 'v4 non-SYN from outside the ranges is dropped too', state: 'base', input: syn('198.51.100.77', V4, 41003, TCP_FLAGS.ACK), action: 'drop', counter: 'drop_source_range' },
  { name: 'v6 client inside the ranges reaches the real', state: 'base', input: syn('2001:db8:c::1', V6, 41004), action: 'tx', real: 3, counter: 'tx' },
  { name: 'v6 client outside the ranges is dropped and counted', state: 'base', input: syn('2001:db8:d::1', V6, 41005), action: 'drop', counter: 'drop_source_range' },
  { name: 'v6 client in the last address of its /48 reaches the real', state: 'base', input: syn('2001:db8:c:ffff:ffff:ffff:ffff:ffff', V6, 41006), action: 'tx', real: 3, counter: 'tx' },
  { name: 'a service without ranges takes any client', state: 'base', input: syn('198.51.100.77', OPEN, 41007), action: 'tx', real: 2, counter: 'tx' },
  // longest match per service: another service's longer prefix neither shadows nor lends a match
  { name: "a client in another service's longer /25 still matches this service's /24", state: 'base', input: syn('192.0.2.200', V4, 41008), action: 'tx', real: 1, counter: 'tx' },
  { name: "a client only in another service's /24 is dropped here", state: 'base', input: syn('192.0.2.1', V4B, 41009), action: 'drop', counter: 'drop_source_range' },
  { name: 'a /32 admits exactly its client', state: 'base', input: syn('192.0.2.7', V4B, 41010), action: 'tx', real: 2, counter: 'tx' },
  { name: 'the address next to a /32 is dropped', state: 'base', input: syn('192.0.2.8', V4B, 41011), action: 'drop', counter: 'drop_source_range' },
  { name: 'the first address of a /25 reaches the real', state: 'base', input: syn('192.0.2.128', V4B, 41012), action: 'tx', real: 2, counter: 'tx' },
  { name: 'the address below a /25 is dropped', state: 'base', input: syn('192.0.2.127', V4B, 41013), action: 'drop', counter: 'drop_source_range' },
  // established flows: two SYNs under the base ranges, then the ranges narrow
  { name: 'flow of 192.0.2.1 set up', state: 'base', input: syn('192.0.2.1', V4, 42001), action: 'tx', real: 1, counter: 'tx' },
  { name: 'flow of 192.0.2.200 set up', state: 'base', keepCt: true, input: syn('192.0.2.200', V4, 42002), action: 'tx', real: 1, counter: 'tx' },
  { name: 'a client removed from the ranges loses its established flow', state: 'narrowed', keepCt: true, input: syn('192.0.2.1', V4, 42001, TCP_FLAGS.ACK), action: 'drop', counter: 'drop_source_range' },
  { name: 'a client still in the ranges keeps its established flow', state: 'narrowed', keepCt: true, input: syn('192.0.2.200', V4, 42002, TCP_FLAGS.ACK), action: 'tx', real: 1, counter: 'ct_hit' },
  { name: 'ranges removed: the client outside them reaches the real again', state: 'open', input: syn('198.51.100.77', V4, 41014), action: 'tx', real: 1, counter: 'tx' },
];

let results: Promise<{ byCase: Map<Case, CaseResult>; applies: any[]; lives: Record<string, any> }>;

test.before(() => {
  results = runStateCases(TAG, cases, (state) => stateToJson(STATES[state]));
  results.catch(() => undefined);
});

test.after.always(() => teardownLab(TAG));

test('every apply converged', async (t) => {
  const { applies } = await results;
  t.is(applies.length, 3);
  for (const a of applies) t.falsy(a.error, a.error);
});

test('readLive returns the ranges and listener flags of each applied state', async (t) => {
  const { lives } = await results;
  for (const [name, want] of Object.entries(STATES)) {
    const l = lives[name];
    t.falsy(l.error, l.error);
    t.deepEqual(l.live.sourceRanges, want.services.flatMap((s) => (s.sourceRanges ?? []).map((prefix) => ({ serviceId: s.id, prefix }))), name);
    t.deepEqual(l.live.vips, want.vips, name);
  }
  t.false(lives.open.live.vips.some((v: any) => v.serviceId === 1 && v.sourceRanges), 'service 1 checks no more');
});

for (const c of cases) {
  test(`source ranges: ${c.name}`, async (t) => {
    const r = (await results).byCase.get(c)!;
    t.falsy(r.error, r.error);
    t.is(r.retval, ACTION[c.action], `action ${r.retval}, expected ${c.action}`);
    if (c.real) t.is(hex(Buffer.from(r.data, 'hex')), hex(l2Out(c.input, c.real)));
    t.is(r.counters[c.counter] ?? 0, 1, `counter ${c.counter}: ${JSON.stringify(r.counters)}`);
    if (c.action === 'tx') t.is(r.counters.drop_source_range ?? 0, 0);
  });
}
