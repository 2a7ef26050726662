// The recency mark of a connection-table entry (lb_flow_value.chosen_ns, docs/datapath.md "Connection-state sync"):
// xdp_lb writes CLOCK_MONOTONIC (the coarse clock: up to a tick behind) when it chooses the flow's real (a new flow, and every SYN, which re-reads the
// table), and never on a hit, so the mark tells which of two entries for one 5-tuple is the newer choice; and the
// coarse last-seen (lb_flow_value.last_seen, CLOCK_MONOTONIC >> 30), written on a hit only when its unit changed,
// which a drained node counts its remaining connections by (conntrack-seen.ts). The real program through
// BPF_PROG_TEST_RUN; the packets stop at the next-hop lookup, after the connection table.
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { decodeFlowValue, encodeFlowKey, encodeFlowValue } from '../../src/bpf/dataplane/codec.js';
import { connectionsSeenWithin } from '../../src/bpf/dataplane/conntrack-seen.js';
import { monotonicNs } from '../../src/bpf/dataplane/snat.js';
import { makeState } from '../lib/lb-state.js';
import { runMoved } from '../lib/xdp-run-moved.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import { applyTo } from '../lib/converge.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-xrec`;
const VIP = '203.0.113.10';
const tcp = (sport: number, flags: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: '192.0.2.1', dst: VIP, l4: { tcp: { sport, dport: 80, flags, ack: flags & TCP_FLAGS.ACK ? 1 : 0 } } }));
/** The coarse clock trails CLOCK_MONOTONIC by at most one tick (4 ms at HZ=250; 10 ms covers HZ=100). */
const TICK_NS = 10_000_000n;
const key = (sport: number) => encodeFlowKey({ src: '192.0.2.1', dst: VIP, sport, dport: 80, proto: 6, family: 4 });

let dp: LbDataPlaneHandle | null = null;
test.before(async () => {
  rmSync(PIN, { recursive: true, force: true });
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, makeState({ reals: { 1: '198.51.100.11' }, hashSeed: 3, conntrackMaxEntries: 4096,
    services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: Array(7).fill(1) }] }));
});
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

const value = (sport: number) => {
  const v = dp!.object()!.map('lb_conntrack').lookup(key(sport));
  return v ? decodeFlowValue(Buffer.from(v)) : null;
};

test.serial('a SYN marks the entry with the time its real was chosen; a hit leaves the mark; a new SYN on the 5-tuple marks it again', async (t) => {
  const before = monotonicNs();
  t.like(await runMoved(dp!, tcp(46000, TCP_FLAGS.SYN)), { ct_miss: 1 });
  const after = monotonicNs();
  const first = value(46000)!;
  t.is(first.realId, 1);
  t.true(first.chosenNs >= before - TICK_NS && first.chosenNs <= after, 'CLOCK_MONOTONIC, the same clock as the daemon\'s (to a tick)');
  t.is(BigInt(first.lastSeen), first.chosenNs >> 30n, 'the coarse last-seen starts at the mark');
  t.like(await runMoved(dp!, tcp(46000, TCP_FLAGS.ACK)), { ct_hit: 1 });
  t.is(value(46000)!.chosenNs, first.chosenNs, 'a connection-table hit writes nothing');
  await new Promise((r) => setTimeout(r, Number(2n * TICK_NS / 1_000_000n))); // a later tick
  t.like(await runMoved(dp!, tcp(46000, TCP_FLAGS.SYN)), { ct_miss: 1 });
  t.true(value(46000)!.chosenNs > first.chosenNs, 'the SYN re-read the table: a newer mark');
});

test.serial('a non-SYN first packet (a flow this node never saw) is a new choice too: marked', async (t) => {
  const before = monotonicNs();
  t.like(await runMoved(dp!, tcp(46001, TCP_FLAGS.ACK)), { ct_miss: 1 });
  t.true(value(46001)!.chosenNs >= before - TICK_NS);
});

const UNIT_NS = 1n << 30n;

test.serial('a hit moves the coarse last-seen forward once its unit (1.07 s) has passed, never the mark', async (t) => {
  t.like(await runMoved(dp!, tcp(46002, TCP_FLAGS.SYN)), { ct_miss: 1 });
  const first = value(46002)!;
  // wait until CLOCK_MONOTONIC is in a later unit than the SYN's
  while (monotonicNs() >> 30n <= BigInt(first.lastSeen)) await new Promise((r) => setTimeout(r, 50));
  const before = monotonicNs() >> 30n;
  t.like(await runMoved(dp!, tcp(46002, TCP_FLAGS.ACK)), { ct_hit: 1 });
  const after = monotonicNs() >> 30n;
  const v = value(46002)!;
  t.true(BigInt(v.lastSeen) >= before - 1n && BigInt(v.lastSeen) <= after, 'the unit of the hit (coarse clock: up to a tick behind)');
  t.true(v.lastSeen > first.lastSeen);
  t.is(v.chosenNs, first.chosenNs, 'the recency mark stays');
});

test.serial('connections seen within N s: entries whose last-seen is recent; not an entry no packet of which was seen here (0), nor an old one', async (t) => {
  const ct = dp!.object()!.map('lb_conntrack');
  for (const k of ct.keys()) ct.delete(k);
  await runMoved(dp!, tcp(46100, TCP_FLAGS.SYN));
  await runMoved(dp!, tcp(46101, TCP_FLAGS.SYN));
  const now = monotonicNs();
  const base = { realId: 1, serviceId: 1, realSlot: value(46100)!.realSlot, chosenNs: now };
  ct.update(key(46102), encodeFlowValue({ ...base, lastSeen: 0 })); // a peer's entry, never hit here
  ct.update(key(46103), encodeFlowValue({ ...base, lastSeen: Number((now - 60n * 1_000_000_000n) / UNIT_NS) })); // a minute ago
  t.is(await connectionsSeenWithin(ct, 30, monotonicNs()), 2);
  t.is(await connectionsSeenWithin(ct, 120, monotonicNs()), 3, 'the old one within two minutes');
  t.like(await runMoved(dp!, tcp(46102, TCP_FLAGS.ACK)), { ct_hit: 1 });
  t.is(await connectionsSeenWithin(ct, 30, monotonicNs()), 3, 'the peer\'s entry once a packet of it arrived here');
});
