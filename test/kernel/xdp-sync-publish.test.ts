// Connection-state sync, the packet path's part (src/bpf/include/lb_sync.h, docs/datapath.md "Connection-state sync"):
// the real xdp_lb through BPF_PROG_TEST_RUN (no interface: packets stop at the next-hop lookup, after the connection
// table and the NAT table this reads), its ring lb_sync_events read with the daemon's reader (flow-events.ts).
//   - publishing off (a node without sync peers): a new flow publishes nothing
//   - a new flow, and a SYN on a known flow (it re-reads the table), publish exactly one record each: the
//     lb_conntrack key and value, byte for byte as the map holds them; a connection-table hit publishes none
//   - a new SNAT translation publishes exactly one record (the lb_snat_rev key and value as the map holds them); a
//     translation hit none; a FIN (closing) and a SYN reopening it one each, with the state the map holds
//   - a full ring: the records it has no room for are counted (sync_lost), and forwarding is the same as without
//     publishing (verdict, output, counters, the connection-table entry)
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { encodeFlowKey } from '../../src/bpf/dataplane/codec.js';
import { SNAT_MAPS } from '../../src/bpf/dataplane/snat.js';
import { SYNC_MAPS, SyncEventReader, setSyncPublish, syncLost, syncPublishing } from '../../src/bpf/dataplane/flow-events.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import type { DesiredState } from '../../src/render/state.js';
import { applyTo } from '../lib/converge.js';
import { encodeU32 } from '../../src/bpf/dataplane/codec.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-xsyncpub`;
const VIP = '203.0.113.41';
const CLIENT = '192.0.2.19';
const SNAT_ADDR = '198.51.100.251';
const DSR_PORT = 80;
const SNAT_PORT = 82;
const ring = (ids: number[]) => Array.from({ length: 31 }, (_, i) => ids[i % ids.length]!);

function state(): DesiredState {
  const services: SvcSpec[] = [
    { id: 1, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: DSR_PORT, protocol: 'TCP' }], ring: ring([7, 42]) },
    { id: 3, vip: VIP, forwarding: 'snat', ports: [{ port: SNAT_PORT, protocol: 'TCP' }], ring: ring([7, 42]) },
  ];
  return { ...makeState({ reals: { 7: '198.51.100.41', 42: '198.51.100.42' }, hashSeed: 5, services, conntrackMaxEntries: 4096 }),
    snatAddress: SNAT_ADDR };
}

const packet = (sport: number, dport: number, flags: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: CLIENT, dst: VIP, l4: { tcp: { sport, dport, flags } } }));
const flowKey = (sport: number, dport: number) => encodeFlowKey({ src: CLIENT, dst: VIP, sport, dport, proto: 6, family: 4 });

const opened: LbDataPlaneHandle[] = [];
const readers: SyncEventReader[] = [];
test.before(() => rmSync(PIN, { recursive: true, force: true }));
test.after.always(() => {
  for (const r of readers) r.close();
  for (const dp of opened) dp.close();
  rmSync(PIN, { recursive: true, force: true });
});

async function open(dir: string, syncRingBytes?: number) {
  const dp = await openLbDataPlane({ pinRoot: `${PIN}/${dir}`, ...(syncRingBytes && { syncRingBytes }) });
  opened.push(dp);
  await applyTo(dp, state());
  const obj = dp.object()!;
  const reader = new SyncEventReader(obj);
  readers.push(reader);
  const run = (data: Buffer) => obj.program('xdp_lb').testRun({ data, ctxIn: Buffer.concat([Buffer.alloc(4), encodeU32(data.length), Buffer.alloc(16)]) });
  return { dp, obj, reader, run };
}

test.serial('publishing off (no sync peers): a new flow publishes nothing; the flag survives a settings write', async (t) => {
  const { dp, obj, reader, run } = await open('off');
  t.false(syncPublishing(obj));
  run(packet(41000, DSR_PORT, TCP_FLAGS.SYN));
  t.truthy(obj.map('lb_conntrack').lookup(flowKey(41000, DSR_PORT)), 'the flow is in the table');
  t.is(reader.read(100).records, 0);
  t.is(syncLost(obj), 0);
  // the plan's settings write keeps the flow sync's flag (execute.ts), and turning it off works
  setSyncPublish(obj, true);
  await applyTo(dp, { ...state(), mtu: 1400 });
  t.true(syncPublishing(obj), 'a settings write kept the flag');
  setSyncPublish(obj, false);
  t.false(syncPublishing(obj));
});

test.serial('a new flow and a SYN on a known flow publish one record each, key and value as the table holds them; a hit none', async (t) => {
  const { obj, reader, run } = await open('ct');
  setSyncPublish(obj, true);
  const ct = obj.map('lb_conntrack');

  run(packet(42000, DSR_PORT, TCP_FLAGS.SYN));
  let got = reader.read(100);
  t.is(got.records, 1, 'exactly one record for the new flow');
  t.is(got.ct.length, 1);
  t.is(got.snat.length, 0);
  t.deepEqual(got.ct[0]![0], flowKey(42000, DSR_PORT), 'the lb_conntrack key');
  t.deepEqual(got.ct[0]![1], Buffer.from(ct.lookup(flowKey(42000, DSR_PORT))!), 'the value the table holds, byte for byte');

  run(packet(42000, DSR_PORT, TCP_FLAGS.ACK));
  t.is(reader.read(100).records, 0, 'a connection-table hit publishes nothing');
  run(packet(42000, DSR_PORT, TCP_FLAGS.ACK | TCP_FLAGS.PSH));
  t.is(reader.read(100).records, 0);

  // a SYN on the known 5-tuple re-reads the table and writes the entry again: one record
  run(packet(42000, DSR_PORT, TCP_FLAGS.SYN));
  got = reader.read(100);
  t.is(got.records, 1, 'a SYN re-reading the table publishes one record');
  t.deepEqual(got.ct[0]![0], flowKey(42000, DSR_PORT));
  t.deepEqual(got.ct[0]![1], Buffer.from(ct.lookup(flowKey(42000, DSR_PORT))!));

  // another flow (another source port): its own record, nothing for the first
  run(packet(42001, DSR_PORT, TCP_FLAGS.SYN));
  got = reader.read(100);
  t.is(got.records, 1);
  t.deepEqual(got.ct[0]![0], flowKey(42001, DSR_PORT));
  t.is(syncLost(obj), 0);
});

test.serial('a new SNAT translation publishes one record (lb_snat_rev key and value); a hit none; FIN and reopening SYN one each', async (t) => {
  const { obj, reader, run } = await open('snat');
  setSyncPublish(obj, true);
  const rev = obj.map(SNAT_MAPS.rev);
  const only = () => {
    const got = reader.read(100);
    return { n: got.records, ct: got.ct.length, snat: got.snat };
  };

  run(packet(43000, SNAT_PORT, TCP_FLAGS.SYN));
  let got = only();
  t.is(got.n, 1, 'exactly one record for the new translation');
  t.is(got.ct, 0, 'a SNAT listener writes no connection-table entry');
  const [key, value] = got.snat[0]!;
  const held = rev.lookup(key);
  t.truthy(held, 'the key is the lb_snat_rev key the program inserted');
  t.deepEqual(value, Buffer.from(held!), 'the value the table holds, byte for byte');
  t.is(value[40], 0, 'open');

  run(packet(43000, SNAT_PORT, TCP_FLAGS.ACK));
  t.is(only().n, 0, 'a translation hit publishes nothing');

  run(packet(43000, SNAT_PORT, TCP_FLAGS.FIN | TCP_FLAGS.ACK));
  got = only();
  t.is(got.n, 1, 'closing: one record');
  t.deepEqual(got.snat[0]![0], key);
  t.is(got.snat[0]![1][40], 1, 'closing state');
  t.deepEqual(got.snat[0]![1].subarray(0, 48), Buffer.from(rev.lookup(key)!).subarray(0, 48));
  run(packet(43000, SNAT_PORT, TCP_FLAGS.FIN | TCP_FLAGS.ACK));
  t.is(only().n, 0, 'a second FIN changes nothing: no record');

  run(packet(43000, SNAT_PORT, TCP_FLAGS.SYN));
  got = only();
  t.is(got.n, 1, 'reopened by a SYN of the same 5-tuple: one record');
  t.deepEqual(got.snat[0]![0], key, 'the same translation (the table still gives its real)');
  t.is(got.snat[0]![1][40], 0, 'open again');
  run(packet(43000, SNAT_PORT, TCP_FLAGS.SYN));
  t.is(only().n, 0, 'a retransmitted SYN on an open translation: no record');
});

test.serial('a full ring counts what it had no room for, and forwarding is the same as without publishing', async (t) => {
  const page = 4096;
  const full = await open('full', page);
  const off = await open('full-off', page);
  setSyncPublish(full.obj, true);
  const n = 3 * Math.ceil(page / 120); // well past what one page of 120-byte records holds
  const countersOf = async (dp: LbDataPlaneHandle) => dp.counters();
  const before = { full: await countersOf(full.dp), off: await countersOf(off.dp) };
  for (let i = 0; i < n; i++) {
    const data = packet(44000 + i, DSR_PORT, TCP_FLAGS.SYN);
    const a = full.run(data);
    const b = off.run(data);
    t.is(a.retval, b.retval, `verdict of SYN ${i}`);
    t.deepEqual(a.data, b.data, `output of SYN ${i}`);
    // the same entry: real, service and slot (the recency mark after them is each run's own time)
    const entry = (o: typeof full.obj) => { const v = o.map('lb_conntrack').lookup(flowKey(44000 + i, DSR_PORT)); return v ? Buffer.from(v).subarray(0, 12) : null; };
    t.truthy(entry(full.obj), `table entry of SYN ${i}`);
    t.deepEqual(entry(full.obj), entry(off.obj), `table entry of SYN ${i}`);
  }
  const lost = syncLost(full.obj);
  const kept = full.reader.read(10 * n);
  t.true(kept.records > 0 && kept.records < n, `the ring held some (${kept.records} of ${n})`);
  t.is(kept.records + lost, n, 'every record is either in the ring or counted lost');
  t.is(syncLost(off.obj), 0, 'publishing off: nothing lost');
  t.is(off.reader.read(10 * n).records, 0);
  // the same counters moved on both (the sync's own map aside)
  const after = { full: await countersOf(full.dp), off: await countersOf(off.dp) };
  const moved = (b: Record<string, unknown>, a: Record<string, unknown>) =>
    Object.fromEntries(Object.entries(a).filter(([k, v]) => typeof v === 'number' && v !== b[k] && k !== 'sync_lost')
      .map(([k, v]) => [k, (v as number) - ((b[k] as number | undefined) ?? 0)]));
  t.deepEqual(moved(before.full, after.full), moved(before.off, after.off));
  // the ring has room again once read: the next new flow is published
  full.run(packet(45000, DSR_PORT, TCP_FLAGS.SYN));
  t.is(full.reader.read(10).records, 1);
  t.is(syncLost(full.obj), lost);
  t.truthy(full.obj.map(SYNC_MAPS.stats));
});
