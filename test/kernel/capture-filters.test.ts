// gitlb capture's filters, sampling and rate bound inside xdp_lb_capture.o (src/bpf/include/lb_capture.h), with the
// real program through BPF_PROG_TEST_RUN over a real data plane's maps (no interface: a packet stops at the next-hop
// lookup, after the ring chose its real). Each filter is judged by a frame it must select beside frames it must not:
// the VIP (address, prefix, port, protocol), the client prefix, the real chosen, a counter (drop reason), the XDP
// verdict; 1-in-N sampling; the token bucket bounds captures in time and counts what it turned away. Every record
// is checked against what the program returned for that frame. docs/datapath.md, "Seeing what XDP does".
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { CaptureProgram, NO_FILTER, type CaptureFilter, type CaptureRecord } from '../../src/bpf/capture/index.js';
import { parseAddressMatch } from '../../src/bpf/capture/filter.js';
import { actionName } from '../../src/bpf/capture/record.js';
import { ringSlot } from '../../src/bpf/dataplane/flow-hash.js';
import { makeState } from '../lib/lb-state.js';
import { applyTo } from '../lib/converge.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-kcap`;
const SEED = 3;
const VIP_A = '203.0.113.20';
const VIP_B = '203.0.113.21';
const VIP_EMPTY = '203.0.113.22';
const REALS: Record<number, string> = { 1: '198.51.100.41', 2: '198.51.100.42' };
const RING = Array.from({ length: 31 }, (_, i) => (i % 2) + 1);
const ETH = { dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' };

const tcp = (src: string, dst: string, sport: number, dport = 80) =>
  frame(ETH, ipPacket({ src, dst, l4: { tcp: { sport, dport, flags: TCP_FLAGS.SYN } } }));
const udp = (src: string, dst: string, sport: number, dport = 53) =>
  frame(ETH, ipPacket({ src, dst, l4: { udp: { sport, dport, payload: Buffer.from('query') } } }));
/** The real the ring gives a TCP SYN from `src`:`sport` to `dst`:80. */
const realOf = (src: string, dst: string, sport: number) => RING[ringSlot({ src, dst, sport, dport: 80, proto: 6 }, true, SEED, RING.length)]!;
const portTo = (src: string, dst: string, real: number, from = 40000) => {
  for (let p = from; p < from + 1000; p++) if (realOf(src, dst, p) === real) return p;
  throw new Error('no port');
};

let dp: LbDataPlaneHandle | null = null;
test.before(async () => {
  rmSync(PIN, { recursive: true, force: true });
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, makeState({
    reals: REALS, hashSeed: SEED, services: [
      { id: 1, vip: VIP_A, forwarding: 'dsr-l2', ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }], ring: RING },
      { id: 2, vip: VIP_B, forwarding: 'dsr-l2', ports: [{ port: 80, protocol: 'TCP' }], ring: RING },
      { id: 3, vip: VIP_EMPTY, forwarding: 'dsr-l2', ports: [{ port: 80, protocol: 'TCP' }], ring: Array(31).fill(0) },
    ],
  }));
});
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

/** Runs `frames` through the capture build with `filter`; each frame's verdict and the records it produced. */
async function captureOf(filter: Partial<CaptureFilter>, frames: Buffer[]) {
  const cap = await CaptureProgram.loadOver(dp!.object()!.program('xdp_lb').fd, { ...NO_FILTER, ...filter });
  try {
    const verdicts: string[] = [];
    const records: CaptureRecord[] = [];
    for (const f of frames) {
      verdicts.push(actionName(cap.program.testRun({ data: f }).retval));
      records.push(...cap.read(0).records);
    }
    for (let i = 0; i < 5; i++) records.push(...cap.read(10).records);
    return { verdicts, records, stats: cap.stats() };
  } finally {
    cap.close();
  }
}

const dstOf = (r: CaptureRecord) => [...r.exit.subarray(30, 34)].join('.');
const srcOf = (r: CaptureRecord) => [...r.exit.subarray(26, 30)].join('.');

test('no filter: every frame, as received and as it leaves, with the verdict the program returned', async (t) => {
  const frames = [tcp('192.0.2.5', VIP_A, 40001), udp('192.0.2.5', VIP_A, 40002), tcp('192.0.2.5', '203.0.113.99', 40003)];
  const { verdicts, records, stats } = await captureOf({}, frames);
  t.is(records.length, 3);
  records.forEach((r, i) => {
    t.is(r.action, verdicts[i]);
    t.deepEqual(r.entry, frames[i], 'the frame as received, whole (shorter than the snap length)');
    t.is(r.entryLength, frames[i]!.length);
  });
  t.deepEqual(records[2]!.counters, ['pass_not_vip']);
  t.is(records[2]!.action, 'PASS');
  t.is(records[2]!.realId, 0);
  t.true(records[0]!.counters.includes('ct_miss'));
  t.is(records[0]!.realId, realOf('192.0.2.5', VIP_A, 40001), 'the real the ring chose');
  t.like(stats, { seen: 3, matched: 3, captured: 3, sampled_out: 0, rate_limited: 0, output_failed: 0 });
});

test('--vip: only frames to the selected VIP (address, prefix, port, protocol); nothing else is even copied', async (t) => {
  const frames = [tcp('192.0.2.5', VIP_A, 40010), tcp('192.0.2.5', VIP_B, 40011), udp('192.0.2.5', VIP_A, 40012), tcp('192.0.2.5', VIP_B, 40013)];
  const only = (text: string) => captureOf({ vips: [parseAddressMatch(text, '--vip', true)] }, frames);
  let r = await only(VIP_B);
  t.deepEqual(r.records.map(dstOf), [VIP_B, VIP_B]);
  t.like(r.stats, { seen: 4, matched: 2, captured: 2 });
  r = await only(`${VIP_A}:53/udp`);
  t.deepEqual(r.records.map((x) => [dstOf(x), x.entry![23]]), [[VIP_A, 17]]);
  r = await only(`${VIP_A}:80/tcp`);
  t.deepEqual(r.records.map((x) => [dstOf(x), x.entry![23]]), [[VIP_A, 6]]);
  r = await only('203.0.113.20/31');
  t.is(r.records.length, 4, 'a prefix holding both VIPs');
  r = await only('203.0.113.30');
  t.is(r.records.length, 0);
  t.like(r.stats, { seen: 4, matched: 0, captured: 0 });
  r = await captureOf({ vips: [parseAddressMatch(VIP_A, '--vip', true), parseAddressMatch(VIP_B, '--vip', true)] }, frames);
  t.is(r.records.length, 4, 'any of several');
});

test('--client: only frames from the selected prefix', async (t) => {
  const frames = [tcp('192.0.2.5', VIP_A, 40020), tcp('192.0.2.133', VIP_A, 40021), tcp('198.51.100.7', VIP_A, 40022), tcp('192.0.2.200', VIP_B, 40023)];
  const r = await captureOf({ clients: [parseAddressMatch('192.0.2.128/25', '--client', false)] }, frames);
  t.deepEqual(r.records.map(srcOf), ['192.0.2.133', '192.0.2.200']);
  const v6 = await captureOf({ clients: [parseAddressMatch('2001:db8::/32', '--client', false)] }, frames);
  t.is(v6.records.length, 0, 'an IPv6 prefix matches no IPv4 client');
});

test('--real: only frames the ring sent to the selected real', async (t) => {
  const to1 = portTo('192.0.2.6', VIP_A, 1);
  const to2 = portTo('192.0.2.6', VIP_A, 2);
  const frames = [tcp('192.0.2.6', VIP_A, to1), tcp('192.0.2.6', VIP_A, to2), tcp('192.0.2.6', VIP_A, portTo('192.0.2.6', VIP_A, 2, to2 + 1)),
    tcp('192.0.2.6', '203.0.113.99', 40030)];
  const r = await captureOf({ reals: [2] }, frames);
  t.is(r.records.length, 2);
  for (const x of r.records) t.is(x.realId, 2);
  t.like(r.stats, { seen: 4, matched: 2 });
});

test('--reason: only frames that moved the counter (a drop reason), --action: only the verdict', async (t) => {
  const frames = [tcp('192.0.2.7', VIP_A, 40040), tcp('192.0.2.7', VIP_EMPTY, 40041), tcp('127.0.0.1', VIP_A, 40042), tcp('192.0.2.7', '203.0.113.99', 40043)];
  let r = await captureOf({ counters: ['drop_no_real'] }, frames);
  t.deepEqual(r.records.map((x) => [dstOf(x), x.action, x.counters]), [[VIP_EMPTY, 'DROP', ['drop_no_real', 'ct_miss']]]);
  r = await captureOf({ counters: ['drop_martian', 'drop_no_real'] }, frames);
  t.deepEqual(r.records.map((x) => x.counters.filter((c) => c.startsWith('drop_'))), [['drop_no_real'], ['drop_martian']]);
  r = await captureOf({ actions: ['PASS'] }, frames);
  t.deepEqual(r.records.map((x) => [dstOf(x), x.action]), [['203.0.113.99', 'PASS']]);
  r = await captureOf({ actions: ['DROP'] }, frames);
  t.deepEqual(r.records.map((x) => x.action), r.verdicts.filter((v) => v === 'DROP'));
  t.true(r.records.length >= 2);
});

test('--point exit: the frame as received is not copied', async (t) => {
  const r = await captureOf({ entry: false }, [tcp('192.0.2.8', VIP_A, 40050)]);
  t.is(r.records.length, 1);
  t.is(r.records[0]!.entry, null);
  t.is(r.records[0]!.exit.length, r.records[0]!.exitLength);
});

test('--sample: 1 in N of the matching frames, the rest counted as sampled out', async (t) => {
  const frames = Array.from({ length: 2000 }, (_, i) => udp('192.0.2.9', VIP_A, 20000 + i));
  const r = await captureOf({ sampleN: 10 }, frames);
  t.is(r.stats.matched, 2000);
  t.is(r.stats.captured + r.stats.sampled_out, 2000);
  t.is(r.records.length, r.stats.captured);
  // binomial(2000, 0.1): mean 200, sd ~13.4; 120..280 is six standard deviations either side
  t.true(r.stats.captured >= 120 && r.stats.captured <= 280, `captured ${r.stats.captured} of 2000 at 1 in 10`);
});

test('--rate: the token bucket bounds captures in time and counts the frames it turned away', async (t) => {
  const frames = Array.from({ length: 3000 }, (_, i) => udp('192.0.2.10', VIP_A, 20000 + (i % 40000)));
  // from before the load: the bucket starts full then and fills from there
  const start = process.hrtime.bigint();
  const cap = await CaptureProgram.loadOver(dp!.object()!.program('xdp_lb').fd, { ...NO_FILTER, rate: 100, burst: 10 });
  try {
    let records = 0;
    for (const f of frames) {
      cap.program.testRun({ data: f });
      records += cap.read(0).records.length;
    }
    const elapsedS = Number(process.hrtime.bigint() - start) / 1e9;
    for (let i = 0; i < 5; i++) records += cap.read(10).records.length;
    const s = cap.stats();
    t.is(s.matched, 3000);
    t.is(s.captured + s.rate_limited, 3000, 'every matching frame is captured or counted as turned away');
    t.is(records, s.captured);
    const bound = 10 + Math.ceil(100 * elapsedS) + 1;
    t.true(s.captured <= bound, `captured ${s.captured} in ${elapsedS.toFixed(2)} s, bound ${bound}`);
    t.true(s.captured >= 10, 'the burst is let through');
    t.true(s.rate_limited > 0);
    t.log(`rate 100/s burst 10: ${s.captured} captured, ${s.rate_limited} turned away in ${elapsedS.toFixed(2)} s`);
  } finally {
    cap.close();
  }
});
