// gitlb monitor's pure parts: the sample record xdp_lb_monitor.o writes, the one-line frame summary (every
// encapsulation gitlb writes, and frames cut or malformed on purpose), and the pcap records tcpdump reads.
import test from 'ava';
import { decodeSample, MONITOR_MAGIC, MONITOR_META_SIZE } from '../../src/bpf/monitor/sample.js';
import { summarizeFrame } from '../../src/bpf/monitor/frame-summary.js';
import { pcapHeader, pcapRecord } from '../../src/bpf/monitor/pcap.js';
import { TCP_FLAGS, dsrOption, encapsulate, frame, ipPacket } from '../lib/packets.js';

const eth = { src: '02:00:00:00:00:01', dst: '02:00:00:00:00:02' };
const syn = ipPacket({ src: '203.0.113.9', dst: '192.0.2.80', l4: { tcp: { sport: 40001, dport: 80, flags: TCP_FLAGS.SYN } } });

function record(point: number, verdict: number, f: Buffer, cap = f.length): Buffer {
  const m = Buffer.alloc(MONITOR_META_SIZE);
  m.writeUInt32LE(MONITOR_MAGIC, 0);
  m[4] = point;
  m.writeInt32LE(verdict, 8);
  m.writeUInt32LE(f.length, 12);
  m.writeUInt32LE(cap, 16);
  m.writeBigUInt64LE(123_456_789n, 24);
  return Buffer.concat([m, f.subarray(0, cap), Buffer.alloc(4)]); // perf pads records: trailing bytes are ignored
}

test('a sample record decodes to point, verdict, lengths and bytes; anything else is refused', (t) => {
  const f = frame(eth, syn);
  const exit = decodeSample(record(1, 3, f, 40), 1)!;
  t.like(exit, { point: 'exit', action: 'TX', length: f.length, cpu: 1, monotonicNs: 123_456_789n });
  t.deepEqual(exit.frame, f.subarray(0, 40));
  t.like(decodeSample(record(0, -1, f), 0)!, { point: 'entry', action: null });
  t.is(decodeSample(record(1, 9, f), 0)!.action, '9');
  const bad = record(1, 3, f);
  bad.writeUInt32LE(0, 0);
  t.is(decodeSample(bad, 0), null, 'wrong magic');
  t.is(decodeSample(record(2, 3, f), 0), null, 'unknown point');
  const long = record(1, 3, f);
  long.writeUInt32LE(10_000, 16);
  t.is(decodeSample(long, 0), null, 'claims more bytes than it has');
  t.is(decodeSample(Buffer.alloc(8), 0), null);
});

test('summaries name what gitlb wrote: plain, IP-in-IP, the DSR IPv4 option, IPv6', (t) => {
  t.is(summarizeFrame(frame(eth, syn)), '02:00:00:00:00:01 > 02:00:00:00:00:02 IPv4 203.0.113.9:40001 > 192.0.2.80:80 TCP [S] seq 1');
  t.regex(summarizeFrame(frame(eth, encapsulate({ src: '198.51.100.1', dst: '198.51.100.11' }, syn))),
    /IPv4 198\.51\.100\.1 > 198\.51\.100\.11 encap \| IPv4 203\.0\.113\.9:40001 > 192\.0\.2\.80:80 TCP \[S\]/);
  const opt = ipPacket({ src: '203.0.113.9', dst: '198.51.100.11', v4: { options: dsrOption('192.0.2.80', 80) }, l4: { tcp: { sport: 40001, dport: 8080, flags: TCP_FLAGS.SYN } } });
  t.regex(summarizeFrame(frame(eth, opt)), /IPv4 \[dsr-opt 192\.0\.2\.80:80\] 203\.0\.113\.9:40001 > 198\.51\.100\.11:8080 TCP \[S\]/);
  const v6 = ipPacket({ src: '2001:db8::9', dst: '2001:db8:1::80', l4: { udp: { sport: 5000, dport: 53, payload: Buffer.alloc(4) } } });
  t.regex(summarizeFrame(frame(eth, v6)), /IPv6 \[2001:db8::9\]:5000 > \[2001:db8:1::80\]:53 UDP len 12/);
});

test('frames cut by the snap length or malformed end in a marker, never an exception', (t) => {
  const f = frame(eth, encapsulate({ src: '198.51.100.1', dst: '198.51.100.11' }, syn));
  for (let n = 0; n <= f.length; n++) t.notThrows(() => summarizeFrame(f.subarray(0, n)));
  t.regex(summarizeFrame(f.subarray(0, 40)), /truncated/);
  t.is(summarizeFrame(Buffer.alloc(5)), '[truncated ethernet]');
  const garbage = Buffer.from(f);
  garbage[14] = 0x41; // version 4, ihl 1
  t.regex(summarizeFrame(garbage), /bad header/);
  // nesting bounded: IP-in-IP in IP-in-IP ... is cut off
  let deep = syn;
  for (let i = 0; i < 6; i++) deep = encapsulate({ src: '198.51.100.1', dst: '198.51.100.11' }, deep);
  t.regex(summarizeFrame(frame(eth, deep)), /nested too deep/);
});

test('pcap: a libpcap 2.4 Ethernet header and records with captured and original lengths', (t) => {
  const h = pcapHeader(192);
  t.is(h.length, 24);
  t.is(h.readUInt32LE(0), 0xa1b2c3d4);
  t.is(h.readUInt32LE(16), 192);
  t.is(h.readUInt32LE(20), 1);
  const r = pcapRecord(Buffer.alloc(60, 1), 1500, 1_700_000_000_123.456);
  t.is(r.readUInt32LE(0), 1_700_000_000);
  t.is(r.readUInt32LE(4), 123_456);
  t.is(r.readUInt32LE(8), 60);
  t.is(r.readUInt32LE(12), 1500);
  t.is(r.length, 16 + 60);
});
