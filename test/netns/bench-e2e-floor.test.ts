// bench/e2e's floor program (bench/e2e/xdp_l2_floor.c), built the way the bench builds it and run through
// BPF_PROG_TEST_RUN: it must do the floor's job (a VIP:port TCP packet leaves with a backend's MAC, the same
// flow always the same backend, every backend used) and nothing more (anything else goes up untouched), or the
// floor row would measure something else than the lab's XDP_TX hop.
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BpfObject, XdpAction } from '../../src/bpf/libbpf.js';
import { compileFloor } from '../../bench/e2e/floor.js';

const MACS = ['02:00:00:00:00:21', '02:00:00:00:00:22', '02:00:00:00:00:23'];
const LB_MAC = [2, 0, 0, 0, 0, 0x11];
const scratch = mkdtempSync(join(tmpdir(), 'gitlb-floor-test-'));
test.after.always(() => rmSync(scratch, { recursive: true, force: true }));
/** A directory of its own for each build (the tests of this file run at once, and every build is xdp_l2_floor.o). */
const buildDir = () => mkdtempSync(join(scratch, 'build-'));

/** Ethernet + IPv4 (no options) + TCP, to `dst`:`dport` from `src` (default 192.0.2.`srcHost`):`sport`. */
function packet(o: { dst?: number[]; dport?: number; sport?: number; srcHost?: number; src?: number[]; proto?: number; ethType?: number } = {}): Buffer {
  const b = Buffer.alloc(14 + 20 + 20);
  Buffer.from([...LB_MAC, 2, 0, 0, 0, 0, 1]).copy(b, 0);
  b.writeUInt16BE(o.ethType ?? 0x0800, 12);
  b[14] = 0x45;
  b.writeUInt16BE(40, 16);
  b[22] = 64;
  b[23] = o.proto ?? 6;
  Buffer.from(o.src ?? [192, 0, 2, o.srcHost ?? 10]).copy(b, 26);
  Buffer.from(o.dst ?? [203, 0, 113, 10]).copy(b, 30);
  b.writeUInt16BE(o.sport ?? 40000, 34);
  b.writeUInt16BE(o.dport ?? 80, 36);
  b[46] = 0x50;
  b[47] = 0x02;
  return b;
}

const mac = (b: Buffer, off: number) => [...b.subarray(off, off + 6)].map((x) => x.toString(16).padStart(2, '0')).join(':');

test('xdp_l2_floor: a VIP:port TCP packet leaves by XDP_TX with a backend MAC, per flow, over every backend', async (t) => {
  const obj = await BpfObject.load(await compileFloor('203.0.113.10', 80, MACS, buildDir()));
  try {
    const prog = obj.program('xdp_l2_floor');
    const seen = new Set<string>();
    for (let sport = 40000; sport < 40060; sport++) {
      const out = prog.testRun({ data: packet({ sport }) });
      t.is(out.retval, XdpAction.tx);
      t.true(MACS.includes(mac(out.data, 0)), mac(out.data, 0));
      t.is(mac(out.data, 6), '02:00:00:00:00:11', 'the source MAC is the lb node (the frame\'s old destination)');
      t.deepEqual(out.data.subarray(12), packet({ sport }).subarray(12), 'nothing but the MACs changes');
      seen.add(mac(out.data, 0));
      t.is(mac(prog.testRun({ data: packet({ sport }) }).data, 0), mac(out.data, 0), 'same flow, same backend');
    }
    t.deepEqual([...seen].sort(), MACS, '60 flows reach all three backends');
    // what it must leave to the kernel, untouched
    for (const [what, p] of [
      ['another address', packet({ dst: [198, 51, 100, 21] })],
      ['another port', packet({ dport: 8080 })],
      ['UDP to the VIP:port', packet({ proto: 17 })],
      ['not IPv4', packet({ ethType: 0x86dd })],
      ['truncated', packet().subarray(0, 40)],
    ] as const) {
      const out = prog.testRun({ data: Buffer.from(p) });
      t.is(out.retval, XdpAction.pass, what);
      t.deepEqual(out.data, p, what);
    }
  } finally {
    obj.close();
  }
});

const ROUTER_MAC = '02:00:00:00:00:fe';
/** A backend's answer from the VIP:80 to a client (what reaches the lb node when the backends route the clients via it). */
const answer = (o: { sport?: number } = {}) => packet({ src: [203, 0, 113, 10], dst: [192, 0, 2, 10], sport: o.sport ?? 80, dport: 40000 });

test('xdp_l2_floor with the reply leg: a backend\'s answer from the VIP:port leaves by XDP_TX to the router, the rest as before', async (t) => {
  const obj = await BpfObject.load(await compileFloor('203.0.113.10', 80, MACS, buildDir(), ROUTER_MAC));
  try {
    const prog = obj.program('xdp_l2_floor');
    const out = prog.testRun({ data: answer() });
    t.is(out.retval, XdpAction.tx);
    t.is(mac(out.data, 0), ROUTER_MAC);
    t.is(mac(out.data, 6), '02:00:00:00:00:11', 'the source MAC is the lb node (the frame\'s old destination)');
    t.deepEqual(out.data.subarray(12), answer().subarray(12), 'nothing but the MACs changes');
    const req = prog.testRun({ data: packet() });
    t.is(req.retval, XdpAction.tx);
    t.true(MACS.includes(mac(req.data, 0)), 'requests still go to a backend');
    const other = answer({ sport: 8080 });
    const passed = prog.testRun({ data: Buffer.from(other) });
    t.is(passed.retval, XdpAction.pass, 'an answer from another port of the VIP is the kernel\'s');
    t.deepEqual(passed.data, other);
  } finally {
    obj.close();
  }
});

test('xdp_l2_floor without the reply leg leaves answers to the kernel', async (t) => {
  const obj = await BpfObject.load(await compileFloor('203.0.113.10', 80, MACS, buildDir()));
  try {
    const out = obj.program('xdp_l2_floor').testRun({ data: answer() });
    t.is(out.retval, XdpAction.pass);
    t.deepEqual(out.data, answer());
  } finally {
    obj.close();
  }
});

test('compileFloor refuses what it cannot compile in', async (t) => {
  await t.throwsAsync(compileFloor('203.0.113.10', 80, MACS, scratch, '02:00:00:00:fe'), { message: /bad router MAC/ });
  await t.throwsAsync(compileFloor('2001:db8::1', 80, MACS, scratch), { message: /bad IPv4 VIP/ });
  await t.throwsAsync(compileFloor('203.0.113.10', 0, MACS, scratch), { message: /bad port/ });
  await t.throwsAsync(compileFloor('203.0.113.10', 80, ['02:00:00:00:00'], scratch), { message: /bad MAC/ });
});
