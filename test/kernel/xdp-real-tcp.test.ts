// The TCP part of a real's traffic counters (struct lb_real_traffic, docs/health.md "Passive signals"): xdp_lb
// counts the TCP packets it sends to a real and the SYNs among them apart from the real's other traffic, in DSR and
// SNAT alike, so passive health judges a real's TCP services whatever UDP it also serves. The real program runs
// through BPF_PROG_TEST_RUN (no interface: packets stop at the next-hop lookup, after the counters), and the
// counters are read by the daemon's own reader (readRealSamples) and judged by PassiveSignals. Pins of the older,
// 24-byte layout are replaced at load.
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { decodeReal, encodeU32, realSlotOf } from '../../src/bpf/dataplane/codec.js';
import { realTcpAt, trafficAt } from '../../src/bpf/counters.js';
import { readRealSamples } from '../../src/reconciler/health/passive-poll.js';
import { PASSIVE, PassiveSignals, type RealSample } from '../../src/reconciler/health/passive.js';
import { makeState } from '../lib/lb-state.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import { applyTo, planOf } from '../lib/converge.js';
import { BpfMap, MapType } from '../../src/bpf/libbpf.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-rtcp`;
const REAL = '198.51.100.11';
const OTHER = '198.51.100.12';
const DSR_VIP = '203.0.113.10';
const SNAT_VIP = '203.0.113.20';
const ring = (id: number) => Array.from({ length: 7 }, () => id);
const mixed = [{ port: 80, protocol: 'TCP' as const }, { port: 53, protocol: 'UDP' as const }];
const STATE = {
  ...makeState({ reals: { 1: REAL, 2: OTHER }, hashSeed: 3, conntrackMaxEntries: 4096, addresses: ['198.51.100.1'],
    services: [
      { id: 1, vip: DSR_VIP, forwarding: 'dsr-l2', ring: ring(1), ports: mixed },
      { id: 2, vip: SNAT_VIP, forwarding: 'snat', ring: ring(2), ports: mixed },
    ] }),
  snatAddress: '198.51.100.1', snatPorts: { min: 40000, max: 40999 },
};
const ETH = { dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' };
const tcp = (vip: string, sport: number, flags: number) =>
  frame(ETH, ipPacket({ src: '192.0.2.1', dst: vip, l4: { tcp: { sport, dport: 80, flags } } }));
const udp = (vip: string, sport: number) =>
  frame(ETH, ipPacket({ src: '192.0.2.1', dst: vip, l4: { udp: { sport, dport: 53, payload: Buffer.from('one query') } } }));

let dp: LbDataPlaneHandle | null = null;
test.before(async () => {
  rmSync(PIN, { recursive: true, force: true });
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, STATE);
});
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

function send(data: Buffer): void {
  dp!.object()!.program('xdp_lb').testRun({ data, ctxIn: Buffer.concat([Buffer.alloc(4), encodeU32(data.length), Buffer.alloc(16)]) });
}

/** The real's whole traffic and its TCP part, summed over CPUs. */
function countersOf(address: string) {
  const o = dp!.object()!;
  const [, v] = o.map('lb_reals').entries().find(([, value]) => decodeReal(Buffer.from(value)).address === address)!;
  const slot = realSlotOf(Buffer.from(v));
  return { ...trafficAt(o.map('lb_real_stats'), slot)!, ...realTcpAt(o.map('lb_real_stats'), slot)! };
}
const delta = (a: ReturnType<typeof countersOf>, b: ReturnType<typeof countersOf>) =>
  ({ packets: b.packets - a.packets, newFlows: b.newFlows - a.newFlows, tcpPackets: b.tcpPackets - a.tcpPackets, tcpSyns: b.tcpSyns - a.tcpSyns });

test.serial('dsr: one-packet UDP flows count as traffic and new flows, never as TCP packets or SYNs', (t) => {
  const before = countersOf(REAL);
  for (let i = 0; i < 20; i++) send(udp(DSR_VIP, 30000 + i));
  t.deepEqual(delta(before, countersOf(REAL)), { packets: 20, newFlows: 20, tcpPackets: 0, tcpSyns: 0 });
});

test.serial('dsr: SYNs and their retransmissions are SYNs; the handshake ACK and a reset are TCP packets only', (t) => {
  const before = countersOf(REAL);
  send(tcp(DSR_VIP, 31000, TCP_FLAGS.SYN));
  send(tcp(DSR_VIP, 31000, TCP_FLAGS.SYN)); // the client retransmits: the same 5-tuple
  send(tcp(DSR_VIP, 31000, TCP_FLAGS.ACK));
  send(tcp(DSR_VIP, 31000, TCP_FLAGS.RST | TCP_FLAGS.ACK));
  t.like(delta(before, countersOf(REAL)), { packets: 4, tcpPackets: 4, tcpSyns: 2 });
});

test.serial('snat: a SYN retransmission meets its translation and still counts as a SYN; UDP stays out of the TCP part', (t) => {
  const before = countersOf(OTHER);
  send(tcp(SNAT_VIP, 32000, TCP_FLAGS.SYN));
  send(tcp(SNAT_VIP, 32000, TCP_FLAGS.SYN));
  send(tcp(SNAT_VIP, 32000, TCP_FLAGS.ACK));
  for (let i = 0; i < 5; i++) send(udp(SNAT_VIP, 33000 + i));
  t.deepEqual(delta(before, countersOf(OTHER)), { packets: 8, newFlows: 6, tcpPackets: 3, tcpSyns: 2 },
    'new flows: the first SYN and five UDP flows (a retransmitted SYN reuses its translation)');
});

/** Samples of `addresses` every pollMs while `each` sends one sample's packets: suspects per sample, as the daemon
 * reads (readRealSamples) and, beside it, what the real's whole traffic would have said. */
function judge(addresses: string[], samples: number, each: (i: number) => void) {
  const only = new Set(addresses);
  const tcpSignals = new PassiveSignals();
  const allSignals = new PassiveSignals();
  const tcpSuspects: string[][] = [];
  const allSuspects: string[][] = [];
  for (let i = 0; i < samples; i++) {
    each(i);
    const at = i * PASSIVE.pollMs;
    tcpSuspects.push(tcpSignals.observe(at, readRealSamples(dp!.object()!, only)));
    const whole = new Map<string, RealSample>(addresses.map((a) => {
      const c = countersOf(a);
      return [a, { packets: c.packets, newFlows: c.newFlows }];
    }));
    allSuspects.push(allSignals.observe(at, whole));
  }
  return { tcp: tcpSuspects.flat(), all: allSuspects.flat() };
}

test.serial('passive health reads the TCP part: a live real serving a stream of one-packet UDP flows is never suspect', (t) => {
  // every sample: three DNS-like queries (nothing behind them: the answers go straight to the client in DSR), and a
  // TCP connection whose SYN is followed by its ACK
  let port = 34000;
  const v = judge([REAL], 15, () => {
    for (let q = 0; q < 3; q++) send(udp(DSR_VIP, port++));
    const p = port++;
    send(tcp(DSR_VIP, p, TCP_FLAGS.SYN));
    send(tcp(DSR_VIP, p, TCP_FLAGS.ACK));
  });
  t.deepEqual(v.tcp, [], 'the TCP part: every SYN has its ACK');
  t.true(v.all.includes(REAL), 'the whole traffic would have called it suspect: the UDP flows look like unanswered SYNs');
});

test.serial('and the same real whose TCP service dies is suspect from its TCP part, its UDP flows notwithstanding', (t) => {
  let port = 36000;
  const v = judge([REAL], 10, () => {
    for (let q = 0; q < 3; q++) send(udp(DSR_VIP, port++));
    send(tcp(DSR_VIP, port++, TCP_FLAGS.SYN)); // no ACK: the client got a reset, or nothing
    send(tcp(DSR_VIP, port++, TCP_FLAGS.SYN));
  });
  t.true(v.tcp.includes(REAL));
});

test.serial('upgrade: lb_real_stats pinned in the 24-byte layout of earlier versions is replaced at load; counting goes on', async (t) => {
  dp!.close();
  dp = null;
  rmSync(`${PIN}/lb_real_stats`);
  const old = BpfMap.create({ name: 'lb_real_stats', type: MapType.percpuArray, keySize: 4, valueSize: 24, maxEntries: 65536 });
  old.pin(`${PIN}/lb_real_stats`);
  old.close();
  dp = await openLbDataPlane({ pinRoot: PIN });
  t.is(dp.object()!.map('lb_real_stats').valueSize, 40);
  t.deepEqual(await planOf(dp, STATE), [], 'listeners, reals and rings came across: nothing to re-apply');
  const before = countersOf(REAL);
  send(tcp(DSR_VIP, 38000, TCP_FLAGS.SYN));
  send(udp(DSR_VIP, 38001));
  t.like(delta(before, countersOf(REAL)), { packets: 2, tcpPackets: 1, tcpSyns: 1 });
});
