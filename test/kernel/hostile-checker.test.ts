// The hostile-packet suites' output checker (test/lib/hostile.ts) must be able to fail: each test feeds it an
// output with a known defect and expects it named, beside the same output done right, which must pass. Pure (no
// root, no BPF): the checker is what is under test. docs/datapath.md and docs/backend.md, "Hostile packets".
import test from 'ava';
import { frame, ipPacket } from '../lib/packets.js';
import { ipView, outputProblems } from '../lib/hostile.js';

const ETH = { dst: '02:00:00:00:00:02', src: '02:00:00:00:00:01' };
const udpFrame = (src: string, dst: string, payload: Buffer, checksum?: number) =>
  frame(ETH, ipPacket({ src, dst, l4: { udp: { sport: 80, dport: 40000, payload, checksum } } }));
const ckOff = (f: Buffer) => 14 + (f[14]! >> 4 === 4 ? 20 : 40) + 6;
const withChecksum = (f: Buffer, v: number) => { const g = Buffer.from(f); g.writeUInt16BE(v, ckOff(g)); return g; };

/** Two payload bytes for which the UDP checksum of src -> dst computes to 0 (so it is sent as 0xffff). */
function payloadSummingToZero(src: string, dst: string): Buffer {
  for (let x = 0; x < 0x10000; x++) {
    const p = Buffer.alloc(2);
    p.writeUInt16BE(x);
    const f = udpFrame(src, dst, p);
    if (f.readUInt16BE(ckOff(f)) === 0xffff) return p;
  }
  throw new Error('no payload found');
}

test('IPv6 UDP: a checksum written 0x0000 where 0xffff belongs is wrong; 0xffff is right', (t) => {
  const p = payloadSummingToZero('2001:db8::1', '2001:db8::2');
  const good = udpFrame('2001:db8::1', '2001:db8::2', p);
  const bad = withChecksum(good, 0);
  t.true(ipView(good, 14)!.l4Ok);
  t.false(ipView(bad, 14)!.l4Ok, 'the one\'s-complement sum alone cannot tell 0x0000 from 0xffff');
  t.true(ipView(bad, 14)!.udpZero);
  t.deepEqual(outputProblems(good, good), []);
  t.true(outputProblems(good, bad).includes('IPv6 UDP checksum 0x0000 (invalid, RFC 8200 8.1)'));
});

test('IPv6 UDP: a rewritten reply whose new checksum computes to 0 must leave as 0xffff (the backend_egress bug class)', (t) => {
  // the reply as the real sends it (real -> client, valid), and as the client must see it (VIP -> client)
  const p = payloadSummingToZero('2001:db8:f::20', '2001:db8:2::7');
  const input = udpFrame('2001:db8:1::2', '2001:db8:2::7', p);
  const right = udpFrame('2001:db8:f::20', '2001:db8:2::7', p);
  t.is(right.readUInt16BE(ckOff(right)), 0xffff);
  t.deepEqual(outputProblems(input, right), []);
  const wrong = outputProblems(input, withChecksum(right, 0));
  t.true(wrong.includes('IPv6 UDP checksum 0x0000 (invalid, RFC 8200 8.1)'), wrong.join('; '));
  t.true(wrong.includes('L4 checksum broken (proto 17)'), wrong.join('; '));
});

test('IPv6 UDP: a 0x0000 that arrived is still a failure on an output (carried or rewritten)', (t) => {
  const input = withChecksum(udpFrame('2001:db8::1', '2001:db8::2', Buffer.from('ping')), 0);
  t.false(ipView(input, 14)!.l4Ok);
  const out = Buffer.from(input);
  out[0] = 0x02; // the frame sent on (new MAC), UDP header as it came
  t.true(outputProblems(input, out).includes('IPv6 UDP checksum 0x0000 (invalid, RFC 8200 8.1)'));
});

test('IPv4 UDP: 0 ("no checksum") stays allowed where it arrived 0, and only there', (t) => {
  const none = udpFrame('198.51.100.7', '203.0.113.2', Buffer.from('ping'), 0);
  const noneOut = udpFrame('192.0.2.20', '203.0.113.2', Buffer.from('ping'), 0);
  t.true(ipView(none, 14)!.l4Ok);
  t.deepEqual(outputProblems(none, noneOut), [], 'a rewrite keeps an IPv4 0');
  const summed = udpFrame('198.51.100.7', '203.0.113.2', Buffer.from('ping'));
  t.deepEqual(outputProblems(summed, udpFrame('192.0.2.20', '203.0.113.2', Buffer.from('ping'))), [], 'a rewrite with a right checksum');
  const dropped = outputProblems(summed, withChecksum(udpFrame('192.0.2.20', '203.0.113.2', Buffer.from('ping')), 0));
  t.true(dropped.includes('IPv4 UDP checksum 0 (none) on an output whose input carried one'), dropped.join('; '));
  // and an IPv4 checksum that computes to 0 written as 0 (not 0xffff) is that same failure
  const p = payloadSummingToZero('192.0.2.20', '203.0.113.2');
  const zeroOut = withChecksum(udpFrame('192.0.2.20', '203.0.113.2', p), 0);
  t.true(outputProblems(udpFrame('198.51.100.7', '203.0.113.2', p), zeroOut).includes('IPv4 UDP checksum 0 (none) on an output whose input carried one'));
});
