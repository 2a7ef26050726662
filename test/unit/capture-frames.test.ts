// gitlb capture's pure parts: the record xdp_lb_capture.o writes, the verdict text, the filters' parsing and
// encoding (struct lb_cap_config), the one-line frame summary (every encapsulation gitlb writes, and frames cut or
// malformed on purpose), and the pcap and pcapng files tcpdump and Wireshark read.
import test from 'ava';
import {
  BACKEND_COUNTER_BITS, CAPTURE_HEADER_SIZE, CAPTURE_MAGIC, CAPTURE_RECORD_SIZE, CAPTURE_VERSION, TC_VERDICTS, counterNames, decodeRecord, verdictText,
} from '../../src/bpf/capture/record.js';
import { CAPTURE_CONFIG_LAYOUTS, encodeCaptureConfig, parseAddressMatch, parseActions, parseCounters } from '../../src/bpf/capture/filter.js';
import { NO_FILTER } from '../../src/bpf/capture/filter.js';
import { summarizeFrame } from '../../src/bpf/capture/frame-summary.js';
import { pcapHeader, pcapRecord } from '../../src/bpf/capture/pcap.js';
import { pcapngHeader, pcapngPacket, readPcapng } from '../../src/bpf/capture/pcapng.js';
import { TCP_FLAGS, dsrOption, encapsulate, frame, ipPacket } from '../lib/packets.js';

const eth = { src: '02:00:00:00:00:01', dst: '02:00:00:00:00:02' };
const syn = ipPacket({ src: '203.0.113.9', dst: '192.0.2.80', l4: { tcp: { sport: 40001, dport: 80, flags: TCP_FLAGS.SYN } } });

function record(verdict: number, entry: Buffer | null, exit: Buffer, opts: { realId?: number; counters?: bigint; exitCap?: number } = {}): Buffer {
  const h = Buffer.alloc(CAPTURE_RECORD_SIZE);
  h.writeUInt32LE(CAPTURE_MAGIC, 0);
  h.writeUInt16LE(CAPTURE_VERSION, 4);
  h.writeInt32LE(verdict, 8);
  h.writeUInt32LE(opts.realId ?? 0, 12);
  h.writeBigUInt64LE(opts.counters ?? 0n, 16);
  h.writeUInt32LE(entry?.length ?? 77, 24);
  h.writeUInt32LE(entry?.length ?? 0, 28);
  h.writeUInt32LE(exit.length, 32);
  const exitCap = opts.exitCap ?? exit.length;
  h.writeUInt32LE(exitCap, 36);
  h.writeBigUInt64LE(123_456_789n, 40);
  entry?.copy(h, CAPTURE_HEADER_SIZE);
  return Buffer.concat([h, exit.subarray(0, exitCap), Buffer.alloc(4)]); // perf pads records: trailing bytes are ignored
}

test('a record decodes to verdict, real, counters, both frames and their lengths; anything else is refused', (t) => {
  const f = frame(eth, syn);
  const out = frame({ src: eth.dst, dst: '02:00:00:00:01:11' }, syn);
  const r = decodeRecord(record(3, f, out, { realId: 7, counters: (1n << 18n) | (1n << 20n) }), 1)!;
  t.like(r, { action: 'TX', realId: 7, entryLength: f.length, exitLength: out.length, cpu: 1, monotonicNs: 123_456_789n });
  t.deepEqual(r.counters, ['ct_miss', 'tx']);
  t.deepEqual(r.entry, f);
  t.deepEqual(r.exit, out);
  t.is(decodeRecord(record(1, null, f), 0)!.entry, null, 'no entry bytes asked for');
  t.is(decodeRecord(record(9, f, f), 0)!.action, '9');
  const bad = record(3, f, f);
  bad.writeUInt32LE(0, 0);
  t.is(decodeRecord(bad, 0), null, 'wrong magic');
  const old = record(3, f, f);
  old.writeUInt16LE(1, 4);
  t.is(decodeRecord(old, 0), null, 'another version');
  const long = record(3, f, f);
  long.writeUInt32LE(10_000, 36);
  t.is(decodeRecord(long, 0), null, 'claims more bytes than it has');
  const longEntry = record(3, f, f);
  longEntry.writeUInt32LE(193, 28);
  t.is(decodeRecord(longEntry, 0), null, 'entry longer than the snap length');
  t.is(decodeRecord(Buffer.alloc(8), 0), null);
});

test('a backend\'s record (TC hooks): TC verdicts and be_stats counter names', (t) => {
  const f = frame(eth, syn);
  const rec = record(2, f, f, { counters: (1n << 0n) | (1n << 1n) });
  rec.writeUInt16LE(1, 6); // LB_CAP_HOOK_TC_INGRESS
  const r = decodeRecord(rec, 0)!;
  t.like(r, { hook: 'tc-ingress', action: 'SHOT' });
  t.deepEqual(r.counters, ['rx_packets', 'decap_ipip4']);
  t.is(verdictText(r, () => undefined), 'tc-ingress SHOT [rx_packets decap_ipip4]');
  rec.writeUInt16LE(2, 6);
  rec.writeInt32LE(0, 8);
  t.like(decodeRecord(rec, 0)!, { hook: 'tc-egress', action: 'OK' });
  rec.writeUInt16LE(3, 6);
  t.is(decodeRecord(rec, 0), null, 'an unknown hook');
  const L = CAPTURE_CONFIG_LAYOUTS.lb_cap_config.members;
  const b = encodeCaptureConfig({ ...NO_FILTER, counters: ['decap_not_allowed'], actions: ['SHOT'] }, BACKEND_COUNTER_BITS, TC_VERDICTS);
  t.is(b.readBigUInt64LE(L.counters), 1n << 20n);
  t.is(b.readUInt32LE(L.verdicts), 1 << 2, 'TC_ACT_SHOT is 2');
  t.throws(() => encodeCaptureConfig({ ...NO_FILTER, counters: ['drop_martian'] }, BACKEND_COUNTER_BITS, TC_VERDICTS), { message: /not a counter here/ });
  t.throws(() => parseCounters('drop_martian', BACKEND_COUNTER_BITS), { message: /--reason 'drop_martian': not a counter \(one of rx_packets,/ });
});

test('counter bits name the lb counters from bit 0 and the SNAT counters from bit 32', (t) => {
  t.deepEqual(counterNames(1n | (1n << 10n) | (1n << 32n) | (1n << 39n)), ['pass_not_ip', 'drop_no_real', 'snat_new', 'snat_drop_ports_exhausted']);
  t.deepEqual(counterNames(0n), []);
});

test('the verdict as words: the real a frame went to, the reason it was dropped or passed', (t) => {
  const name = (id: number) => ({ 7: '198.51.100.11' } as Record<number, string>)[id];
  t.is(verdictText({ action: 'TX', realId: 7, counters: ['ct_hit', 'tx'] }, name), 'TX to real 198.51.100.11 (id 7) [ct_hit tx]');
  t.is(verdictText({ action: 'REDIRECT', realId: 8, counters: ['redirect'] }, name), 'REDIRECT to real ? (id 8) [redirect]');
  t.is(verdictText({ action: 'DROP', realId: 0, counters: ['drop_martian'] }, name), 'DROP drop_martian [drop_martian]');
  t.is(verdictText({ action: 'DROP', realId: 0, counters: ['ct_miss', 'drop_no_real'] }, name), 'DROP drop_no_real [ct_miss drop_no_real]');
  t.is(verdictText({ action: 'PASS', realId: 0, counters: ['snat_pass_local'] }, name), 'PASS snat_pass_local [snat_pass_local]');
  t.is(verdictText({ action: 'TX', realId: 0, counters: ['icmp_sent'] }, name), 'TX [icmp_sent]');
  t.is(verdictText({ action: 'REDIRECT', realId: 7, counters: ['redirect', 'snat_reply'] }, name), 'REDIRECT to the client, from real 198.51.100.11 (id 7) [redirect snat_reply]');
  t.is(verdictText({ action: 'PASS', realId: 7, counters: ['snat_pass_expired'] }, name), 'PASS snat_pass_expired [snat_pass_expired]');
});

test('filters: addresses, prefixes, ports and protocols parse or are refused naming the option', (t) => {
  t.like(parseAddressMatch('203.0.113.10', '--vip', true), { family: 4, prefix: 32, port: 0, proto: 0 });
  t.like(parseAddressMatch('203.0.113.10:53/udp', '--vip', true), { port: 53, proto: 17 });
  t.like(parseAddressMatch('203.0.113.10:443', '--vip', true), { port: 443, proto: 0 });
  t.like(parseAddressMatch('[2001:db8::10]:80/TCP', '--vip', true), { family: 6, prefix: 128, port: 80, proto: 6 });
  t.like(parseAddressMatch('2001:db8::/32', '--client', false), { family: 6, prefix: 32 });
  const host = parseAddressMatch('192.0.2.77/25', '--client', false);
  t.deepEqual([...host.bytes], [192, 0, 2, 0], 'host bits cleared');
  t.throws(() => parseAddressMatch('192.0.2.1:80', '--client', false), { message: /--client '192.0.2.1:80': a client is an address or prefix, without a port/ });
  t.throws(() => parseAddressMatch('192.0.2.1/33', '--client', false), { message: /prefix length must be 0\.\.32/ });
  t.throws(() => parseAddressMatch('example.com', '--vip', true), { message: /--vip 'example.com': 'example.com' is not an IPv4 or IPv6 address/ });
  t.throws(() => parseAddressMatch('192.0.2.1:0', '--vip', true), { message: /port must be 1\.\.65535/ });
  t.throws(() => parseAddressMatch('192.0.2.1:80/sctp', '--vip', true), { message: /port must be/ });
  t.deepEqual(parseCounters('drop_no_real, snat_drop_table_full'), ['drop_no_real', 'snat_drop_table_full']);
  t.throws(() => parseCounters('drop_everything'), { message: /--reason 'drop_everything': not a counter/ });
  t.deepEqual(parseActions('tx,drop'), ['TX', 'DROP']);
  t.throws(() => parseActions('tx,reject'), { message: /--action 'REJECT'/ });
});

test('filters: encoded as struct lb_cap_config (masks, ports in network order, bit sets, token bucket)', (t) => {
  const L = CAPTURE_CONFIG_LAYOUTS.lb_cap_config.members;
  const b = encodeCaptureConfig({
    ...NO_FILTER, vips: [parseAddressMatch('203.0.113.10:53/udp', '--vip', true)], clients: [parseAddressMatch('192.0.2.0/23', '--client', false)],
    reals: [4, 9], counters: ['drop_no_real', 'snat_new'], actions: ['DROP', 'TX'], sampleN: 10, rate: 1000, burst: 50, entry: false,
  });
  t.is(b.length, CAPTURE_CONFIG_LAYOUTS.lb_cap_config.size);
  t.is(b.readUInt32LE(L.flags), 1, 'enabled, no entry copies');
  t.is(b.readUInt32LE(L.sample_n), 10);
  t.is(b.readBigUInt64LE(L.counters), (1n << 10n) | (1n << 32n));
  t.is(b.readUInt32LE(L.verdicts), (1 << 1) | (1 << 3));
  t.deepEqual([b[L.n_vips], b[L.n_clients], b[L.n_reals]], [1, 1, 2]);
  t.deepEqual([...b.subarray(L.vips, L.vips + 4)], [203, 0, 113, 10]);
  t.deepEqual([...b.subarray(L.vips + 16, L.vips + 21)], [255, 255, 255, 255, 0]);
  t.deepEqual([...b.subarray(L.vips + 32, L.vips + 36)], [0, 53, 17, 4], 'port as on the wire, protocol, family');
  t.deepEqual([...b.subarray(L.clients + 16, L.clients + 20)], [255, 255, 254, 0]);
  t.deepEqual([b.readUInt32LE(L.reals), b.readUInt32LE(L.reals + 4)], [4, 9]);
  t.is(b.readBigUInt64LE(L.token_ns), 1_000_000n);
  t.is(b.readBigUInt64LE(L.bucket_ns), 50_000_000n);
  t.is(encodeCaptureConfig(NO_FILTER).readBigUInt64LE(L.token_ns), 0n, 'no rate: no bound');
  const five = Array(5).fill(parseAddressMatch('192.0.2.1', '--vip', true));
  t.throws(() => encodeCaptureConfig({ ...NO_FILTER, vips: five }), { message: /--vip: at most 4/ });
  t.throws(() => encodeCaptureConfig({ ...NO_FILTER, sampleN: 0 }), { message: /--sample/ });
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

test('pcapng: section, one Ethernet interface with ns timestamps, packets with the verdict as comment and a direction', (t) => {
  const f = frame(eth, syn);
  const file = Buffer.concat([
    pcapngHeader(192, 'xdp:lb-1'),
    pcapngPacket(f, f.length, 1_700_000_000_123_456_789n, 'inbound', 'entry: TX to real 198.51.100.11 (id 1) [ct_miss tx]'),
    pcapngPacket(f.subarray(0, 41), 1500, 1_700_000_000_123_456_790n, 'outbound', 'exit: TX to real 198.51.100.11 (id 1) [ct_miss tx]'),
  ]);
  t.is(file.readUInt32LE(0), 0x0a0d0d0a);
  t.is(file.readUInt32LE(8), 0x1a2b3c4d);
  t.is(file.length % 4, 0, 'every block padded to 32 bits');
  const r = readPcapng(file);
  t.deepEqual(r.interfaces, [{ linkType: 1, snaplen: 192, name: 'xdp:lb-1' }]);
  t.is(r.frames.length, 2);
  t.like(r.frames[0]!, { interfaceId: 0, timeNs: 1_700_000_000_123_456_789n, length: f.length, direction: 'inbound',
    comment: 'entry: TX to real 198.51.100.11 (id 1) [ct_miss tx]' });
  t.deepEqual(r.frames[0]!.frame, f);
  t.like(r.frames[1]!, { length: 1500, direction: 'outbound' });
  t.is(r.frames[1]!.frame.length, 41, 'a cut frame keeps its original length beside it');
  t.throws(() => readPcapng(file.subarray(0, file.length - 2)), { message: /bad block/ });
  const long = readPcapng(pcapngPacket(f, f.length, 0n, 'outbound', 'x'.repeat(5000))).frames[0]!;
  t.is(long.comment!.length, 1024, 'a comment is capped');
});
