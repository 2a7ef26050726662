// The backend TC programs (build/bpf/tc_backend.o) under BPF_PROG_TEST_RUN: every translation in both
// directions, IPv4 and IPv6. Expected packets are built independently (test/lib/packets-backend.ts) and compared
// byte for byte where the program's output is fully determined; checksums are recomputed from scratch.
// Serial: the tests share one loaded object and read its counters.
import test from 'ava';
import { rmSync } from 'node:fs';
import { BpfMap, BpfObject, MapType, TcAction, possibleCpus, type BpfProgram } from '../../src/bpf/libbpf.js';
import { openBackendDataPlane } from '../../src/bpf/backend/index.js';
import { ensurePinDir } from '../../src/bpf/bpffs.js';
import { runPrefix } from '../../src/lab/netns.js';
import type { DesiredState } from '../../src/render/state.js';
import {
  VIP_FLAG_IPIP,
  VIP_FLAG_IPOPT,
  decodeConnEntry,
  decodeVipEntry,
  desiredVipEntries,
  formatAddr,
  encodeConnKey,
  encodeVipKey,
  encodeVipValue,
  OLD_VIP_VALUE_SIZE,
  PREV_TARGET_GRACE_NS,
  STAT_NAMES,
  type StatName,
} from '../../src/bpf/backend/codec.js';
import {
  PROTO,
  addrBytes,
  addrText,
  encapFrame,
  eth,
  frame,
  icmpErrorFrame,
  ipPacket,
  ipoptFrame,
  parse,
  type L4Spec,
} from '../lib/packets-backend.js';
import { addTunnelVips, backendStats, loadBackendProgs } from '../lib/backend-prog.js';
import { planOf } from '../lib/converge.js';

// Addresses: LB 203.0.113.1, this backend (real) 203.0.113.2, client 198.51.100.7; VIPs in 192.0.2.0/24.
const V4 = { lb: '203.0.113.1', real: '203.0.113.2', client: '198.51.100.7', ipipVip: '192.0.2.10', optVip: '192.0.2.20', otherVip: '192.0.2.99' };
const V6 = { lb: '2001:db8:1::1', real: '2001:db8:1::2', client: '2001:db8:2::7', ipipVip: '2001:db8:f::10', optVip: '2001:db8:f::20', otherVip: '2001:db8:f::99' };
const VIP_PORT = 80;
const TARGET_PORT = 8080;
const CLIENT_PORT = 40000;

let obj: BpfObject;
let ingress: BpfProgram;
let egress: BpfProgram;

test.before(async () => {
  ({ obj, ingress, egress } = await loadBackendProgs(V4, V6));
  addTunnelVips(obj, { v4: V4, v6: V6 }, VIP_PORT, TARGET_PORT);
});

test.after.always(() => obj?.close());

const stat = (name: StatName): number => backendStats(obj)[name];

/** Runs `prog` on `data`; returns action, output and how each named counter moved. */
function run(prog: BpfProgram, data: Buffer, watch: StatName[] = []) {
  const before = watch.map(stat);
  const r = prog.testRun({ data, dataOutSize: data.length + 256 });
  const delta = Object.fromEntries(watch.map((n, i) => [n, stat(n) - before[i]!]));
  return { action: r.retval, out: r.data, delta };
}

function connFor(family: 4 | 6, protocol: 'TCP' | 'UDP', client: string, local: string, clientPort = CLIENT_PORT, localPort = TARGET_PORT) {
  const key = encodeConnKey({ family, protocol, client, clientPort, local, localPort });
  const v = obj.map('be_conns').lookup(key);
  return v ? decodeConnEntry(key, v) : null;
}

const tcp = (sport: number, dport: number, payload = 'hello'): L4Spec => ({ proto: 'TCP', sport, dport, payload: Buffer.from(payload) });
const udp = (sport: number, dport: number, payload = 'ping'): L4Spec => ({ proto: 'UDP', sport, dport, payload: Buffer.from(payload) });

for (const [fam, A] of [[4, V4], [6, V6]] as const) {
  // ---- ingress: IP-in-IP ----------------------------------------------------------------------------------
  test.serial(`IPv${fam}-in-IPv${fam} to a served VIP is decapsulated to exactly the inner frame`, (t) => {
    const inner = ipPacket(A.client, A.ipipVip, tcp(CLIENT_PORT, VIP_PORT));
    const stat = fam === 4 ? 'decap_ipip4' : 'decap_ipip6';
    const r = run(ingress, encapFrame(A.lb, A.real, inner), [stat]);
    t.is(r.action, TcAction.ok);
    t.deepEqual(r.out, eth(inner, fam));
    t.is(r.delta[stat], 1);
  });

  test.serial(`IPv${fam}-in-IPv${fam} to an address we do not serve passes untouched`, (t) => {
    const input = encapFrame(A.lb, A.real, ipPacket(A.client, A.otherVip, tcp(CLIENT_PORT, VIP_PORT)));
    const r = run(ingress, input, ['ipip_not_vip']);
    t.is(r.action, TcAction.ok);
    t.deepEqual(r.out, input);
    t.is(r.delta.ipip_not_vip, 1);
  });

  test.serial(`IPv${fam}-in-IPv${fam}: an ipopt-only VIP is not a decap target`, (t) => {
    const input = encapFrame(A.lb, A.real, ipPacket(A.client, A.optVip, tcp(CLIENT_PORT, VIP_PORT)));
    const r = run(ingress, input, ['ipip_not_vip']);
    t.deepEqual(r.out, input);
    t.is(r.delta.ipip_not_vip, 1);
  });

  // ---- ingress: ipopt ------------------------------------------------------------------------------------
  for (const proto of ['TCP', 'UDP'] as const) {
    test.serial(`IPv${fam} ${proto} with the ipopt option: flow recorded, option stripped, packet otherwise intact`, (t) => {
      const clientPort = proto === 'TCP' ? 41000 : 41001;
      const l4 = proto === 'TCP' ? tcp(clientPort, TARGET_PORT) : udp(clientPort, TARGET_PORT);
      const input = ipoptFrame(A.client, A.real, l4, A.optVip, VIP_PORT);
      const stat = fam === 4 ? 'ipopt4' : 'ipopt6';
      const r = run(ingress, input, [stat]);
      t.is(r.action, TcAction.ok);
      // What remains is exactly the packet client -> real:target, as if the LB had only rewritten the destination.
      t.deepEqual(r.out, frame(A.client, A.real, l4));
      const p = parse(r.out);
      t.true(p.ipChecksumOk && p.lengthOk && p.l4ChecksumOk === true);
      t.is(r.delta[stat], 1);
      const c = connFor(fam, proto, A.client, A.real, clientPort);
      t.truthy(c, 'flow recorded');
      t.is(c!.vip, addrText(A.optVip));
      t.is(c!.vipPort, VIP_PORT);
      t.true(c!.lastSeenNs > 0n);
    });
  }

  test.serial(`IPv${fam} ipopt naming a VIP:port we do not serve: untouched, nothing recorded`, (t) => {
    const input = ipoptFrame(A.client, A.real, tcp(42000, TARGET_PORT), A.otherVip, VIP_PORT);
    const r = run(ingress, input, ['ipopt_not_vip']);
    t.is(r.action, TcAction.ok);
    t.deepEqual(r.out, input);
    t.is(r.delta.ipopt_not_vip, 1);
    t.is(connFor(fam, 'TCP', A.client, A.real, 42000), null);
  });

  test.serial(`IPv${fam} ipopt arriving at another port than the service's targetPort: untouched`, (t) => {
    const input = ipoptFrame(A.client, A.real, tcp(42001, 9999), A.optVip, VIP_PORT);
    const r = run(ingress, input, ['ipopt_not_vip']);
    t.deepEqual(r.out, input);
    t.is(r.delta.ipopt_not_vip, 1);
    t.is(connFor(fam, 'TCP', A.client, A.real, 42001, 9999), null);
  });

  test.serial(`IPv${fam} plain traffic to this node passes untouched both ways`, (t) => {
    const input = frame(A.client, A.real, tcp(43000, 22));
    t.deepEqual(run(ingress, input).out, input);
    const reply = frame(A.real, A.client, tcp(22, 43000));
    t.deepEqual(run(egress, reply).out, reply);
  });

  // ---- egress: replies of ipopt flows ---------------------------------------------------------------------
  for (const proto of ['TCP', 'UDP'] as const) {
    test.serial(`IPv${fam} ${proto} reply of an ipopt flow leaves from VIP:port with correct checksums`, (t) => {
      const clientPort = proto === 'TCP' ? 44000 : 44001;
      const req = proto === 'TCP' ? tcp(clientPort, TARGET_PORT) : udp(clientPort, TARGET_PORT);
      run(ingress, ipoptFrame(A.client, A.real, req, A.optVip, VIP_PORT));
      const rep = (sport: number): L4Spec => (proto === 'TCP' ? tcp(sport, clientPort, 'world!') : udp(sport, clientPort, 'pong'));
      const stat = fam === 4 ? 'reply4_rewrite' : 'reply6_rewrite';
      const r = run(egress, frame(A.real, A.client, rep(TARGET_PORT)), [stat]);
      t.is(r.action, TcAction.ok);
      // Byte for byte what the client would get had the VIP itself answered.
      t.deepEqual(r.out, frame(A.optVip, A.client, rep(VIP_PORT)));
      const p = parse(r.out);
      t.is(p.src, addrText(A.optVip));
      t.is(p.sport, VIP_PORT);
      t.true(p.ipChecksumOk && p.l4ChecksumOk === true);
      t.is(r.delta[stat], 1);
    });
  }

  test.serial(`IPv${fam} reply from another local port, or to another client port, is not rewritten`, (t) => {
    run(ingress, ipoptFrame(A.client, A.real, tcp(45000, TARGET_PORT), A.optVip, VIP_PORT));
    const otherLocal = frame(A.real, A.client, tcp(TARGET_PORT + 1, 45000));
    t.deepEqual(run(egress, otherLocal).out, otherLocal);
    const otherClient = frame(A.real, A.client, tcp(TARGET_PORT, 45001));
    t.deepEqual(run(egress, otherClient).out, otherClient);
  });

  // ---- egress: ICMP errors about ipopt flows --------------------------------------------------------------
  test.serial(`IPv${fam} ICMP error about an ipopt flow is translated to the VIP`, (t) => {
    const clientPort = 46000;
    const req = udp(clientPort, TARGET_PORT);
    run(ingress, ipoptFrame(A.client, A.real, req, A.optVip, VIP_PORT));
    const quoted = ipPacket(A.client, A.real, req);
    const stat = fam === 4 ? 'icmp4_rewrite' : 'icmp6_rewrite';
    const r = run(egress, icmpErrorFrame(A.real, A.client, quoted), [stat]);
    t.is(r.action, TcAction.ok);
    t.is(r.delta[stat], 1);
    const p = parse(r.out);
    t.is(p.proto, fam === 4 ? PROTO.ICMP : PROTO.ICMPV6);
    t.is(p.src, addrText(A.optVip), 'the error comes from the VIP');
    t.true(p.ipChecksumOk, 'outer IP checksum');
    t.true(p.l4ChecksumOk, 'ICMP checksum');
    // The quoted packet now reads client -> VIP:port, as the client sent it.
    const q = parse(eth(p.payload.subarray(8), fam));
    t.is(q.src, addrText(A.client));
    t.is(q.dst, addrText(A.optVip));
    t.is(q.sport, clientPort);
    t.is(q.dport, VIP_PORT);
    t.true(q.ipChecksumOk, 'quoted IP header checksum');
  });

  test.serial(`IPv${fam} ICMP error about an unknown flow is untouched`, (t) => {
    const input = icmpErrorFrame(A.real, A.client, ipPacket(A.client, A.real, udp(46999, TARGET_PORT)));
    t.deepEqual(run(egress, input).out, input);
  });
}

// ---- cross-family tunnels ---------------------------------------------------------------------------------
test.serial('IPv4-in-IPv6 to a served IPv4 VIP is decapsulated and the frame becomes IPv4', (t) => {
  const inner = ipPacket(V4.client, V4.ipipVip, tcp(CLIENT_PORT, VIP_PORT));
  const r = run(ingress, encapFrame(V6.lb, V6.real, inner), ['decap_4in6']);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, eth(inner, 4));
  t.is(r.delta.decap_4in6, 1);
});

test.serial('IPv6-in-IPv4 to a served IPv6 VIP is decapsulated and the frame becomes IPv6', (t) => {
  const inner = ipPacket(V6.client, V6.ipipVip, udp(CLIENT_PORT, VIP_PORT));
  const r = run(ingress, encapFrame(V4.lb, V4.real, inner), ['decap_6in4']);
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, eth(inner, 6));
  t.is(r.delta.decap_6in4, 1);
});

// ---- edge cases ------------------------------------------------------------------------------------------
test.serial('IPv4 UDP reply without checksum keeps checksum 0 while the addresses change', (t) => {
  run(ingress, ipoptFrame(V4.client, V4.real, udp(47000, TARGET_PORT), V4.optVip, VIP_PORT));
  const reply: L4Spec = { proto: 'UDP', sport: TARGET_PORT, dport: 47000, payload: Buffer.from('x'), udpNoChecksum: true };
  const r = run(egress, frame(V4.real, V4.client, reply));
  const p = parse(r.out);
  t.is(p.src, V4.optVip);
  t.is(p.sport, VIP_PORT);
  t.is(p.udpChecksum, 0);
  t.true(p.ipChecksumOk);
});

test.serial('IPv4 fragments pass untouched', (t) => {
  const input = encapFrame(V4.lb, V4.real, ipPacket(V4.client, V4.ipipVip, tcp(CLIENT_PORT, VIP_PORT)));
  input.writeUInt16BE(0x2000, 14 + 6); // MF set
  const r = run(ingress, input, ['fragment']);
  t.deepEqual(r.out, input);
  t.is(r.delta.fragment, 1);
});

test.serial('truncated and non-IP frames pass untouched', (t) => {
  const arp = Buffer.alloc(42);
  arp.writeUInt16BE(0x0806, 12);
  t.deepEqual(run(ingress, arp).out, arp);
  t.deepEqual(run(egress, arp).out, arp);
  const short = encapFrame(V4.lb, V4.real, ipPacket(V4.client, V4.ipipVip, tcp(CLIENT_PORT, VIP_PORT))).subarray(0, 14 + 20 + 10);
  const r = run(ingress, Buffer.from(short));
  t.is(r.action, TcAction.ok);
  t.deepEqual(r.out, short);
});

// ---- a targetPort change: the previous port stays trusted while lb nodes may still use it ---------------------
// lb nodes and backends apply a revision at different moments (lb nodes probe first, and may refuse and revert), so
// after a backend moved a listener from OLD to NEW it still gets options at OLD. Listener 443/TCP of the ipopt VIP,
// moved 8443 -> 9443 (docs/backend.md, "targetPort changes"). The entry is written the way apply() writes it.
const OLD = 8443;
const NEW = 9443;
const RETARGETED = 443;

/** Writes the retargeted listener; `ageNs` is how long ago the previous port was last seen (null: no previous port). */
function retarget(family: 4 | 6, vip: string, ageNs: bigint | null): bigint {
  const seen = process.hrtime.bigint() - (ageNs ?? 0n);
  obj.map('be_vips').update(encodeVipKey({ address: vip, family, port: RETARGETED, protocol: 'TCP' }),
    encodeVipValue({ flags: VIP_FLAG_IPOPT, targetPort: NEW, ...(ageNs !== null && { previousTargetPort: OLD, previousSeenNs: seen }) }));
  return seen;
}

function retargetedEntry(family: 4 | 6, vip: string) {
  const key = encodeVipKey({ address: vip, family, port: RETARGETED, protocol: 'TCP' });
  return decodeVipEntry(key, obj.map('be_vips').lookup(key)!);
}

for (const [fam, A] of [[4, V4], [6, V6]] as const) {
  const recorded = (clientPort: number, localPort: number) => connFor(fam, 'TCP', A.client, A.real, clientPort, localPort);

  test.serial(`IPv${fam} retargeted listener: an option at the previous targetPort is trusted within the grace, and the use renews it`, (t) => {
    const seen = retarget(fam, A.optVip, 10_000_000_000n); // changed 10 s ago
    const input = ipoptFrame(A.client, A.real, tcp(44000, OLD), A.optVip, RETARGETED);
    const before = process.hrtime.bigint();
    const r = run(ingress, input, ['ipopt_prev_target', fam === 4 ? 'ipopt4' : 'ipopt6', 'ipopt_not_vip']);
    t.is(r.action, TcAction.ok);
    t.deepEqual(r.out, frame(A.client, A.real, tcp(44000, OLD)), 'option stripped as for the current port');
    t.like(r.delta, { ipopt_prev_target: 1, [fam === 4 ? 'ipopt4' : 'ipopt6']: 1, ipopt_not_vip: 0 });
    const c = recorded(44000, OLD);
    t.truthy(c, 'flow recorded at the old port');
    t.is(c!.vipPort, RETARGETED);
    // The reply of the socket on the old port leaves from VIP:443.
    t.deepEqual(run(egress, frame(A.real, A.client, tcp(OLD, 44000))).out, frame(A.optVip, A.client, tcp(RETARGETED, 44000)));
    // Renewed with the program's clock, which is the daemon's (CLOCK_MONOTONIC): not before this run started.
    const e = retargetedEntry(fam, A.optVip);
    t.is(e.previousTargetPort, OLD);
    t.true(e.previousSeenNs! > seen && e.previousSeenNs! >= before, `renewed (${e.previousSeenNs} vs run at ${before})`);
    t.is(e.targetPort, NEW, 'the current port is untouched');
  });

  test.serial(`IPv${fam} retargeted listener: the current targetPort works as before, without touching the previous one`, (t) => {
    const seen = retarget(fam, A.optVip, 10_000_000_000n);
    const r = run(ingress, ipoptFrame(A.client, A.real, tcp(44001, NEW), A.optVip, RETARGETED), ['ipopt_prev_target', 'ipopt_not_vip']);
    t.deepEqual(r.out, frame(A.client, A.real, tcp(44001, NEW)));
    t.like(r.delta, { ipopt_prev_target: 0, ipopt_not_vip: 0 });
    t.truthy(recorded(44001, NEW));
    t.is(retargetedEntry(fam, A.optVip).previousSeenNs, seen, 'not renewed by traffic at the current port');
  });

  test.serial(`IPv${fam} retargeted listener: the guard still stops a port that was never the listener's, a lapsed previous port, and another listener's options`, (t) => {
    const cases: Array<[string, bigint | null, number, number, number]> = [
      // [what, age of the previous port (null: none kept), port it arrives at, VIP port it names, client port]
      ['a port that was never its targetPort', 10_000_000_000n, 7443, RETARGETED, 44002],
      ['the previous port after the grace', PREV_TARGET_GRACE_NS + 1_000_000_000n, OLD, RETARGETED, 44003],
      ['the previous port "seen" in the future (a clock it does not share)', -60_000_000_000n, OLD, RETARGETED, 44004],
      ['the old port when no previous port is kept (an entry of before, or a first apply)', null, OLD, RETARGETED, 44005],
      // The previous port belongs to 443 only: VIP:80 (target 8080) does not inherit it.
      ["another listener of the VIP, at the retargeted one's previous port", 10_000_000_000n, OLD, VIP_PORT, 44006],
    ];
    for (const [what, age, port, vipPort, clientPort] of cases) {
      retarget(fam, A.optVip, age);
      const input = ipoptFrame(A.client, A.real, tcp(clientPort, port), A.optVip, vipPort);
      const r = run(ingress, input, ['ipopt_not_vip', 'ipopt_prev_target']);
      t.is(r.action, TcAction.ok, what);
      t.deepEqual(r.out, input, `${what}: untouched`);
      t.like(r.delta, { ipopt_not_vip: 1, ipopt_prev_target: 0 }, what);
      t.is(recorded(clientPort, port), null, `${what}: nothing recorded`);
    }
  });
}

// ---- exhaustion: a full connection table evicts, it never translates wrongly -------------------------------
test.serial('full be_conns (LRU, 64 entries): new flows are still recorded, evicted flows are not rewritten', async (t) => {
  const small = await BpfObject.load('tc_backend', { mapMaxEntries: { be_conns: 64 } });
  try {
    const vipKey = encodeVipKey({ address: V4.optVip, family: 4, port: VIP_PORT, protocol: 'TCP' });
    small.map('be_vips').update(vipKey, encodeVipValue({ flags: VIP_FLAG_IPOPT, targetPort: TARGET_PORT }));
    const ing = small.program('backend_ingress');
    const eg = small.program('backend_egress');
    const flows = 512;
    for (let i = 0; i < flows; i++) {
      const r = ing.testRun({ data: ipoptFrame(V4.client, V4.real, tcp(20000 + i, TARGET_PORT), V4.optVip, VIP_PORT) });
      t.is(r.retval, TcAction.ok);
    }
    const conns = small.map('be_conns');
    const kept = conns.keys().length;
    t.true(kept <= 64 && kept > 0, `kept ${kept} entries`);
    // The newest flow is always there and is translated.
    const newest = eg.testRun({ data: frame(V4.real, V4.client, tcp(TARGET_PORT, 20000 + flows - 1)) });
    t.is(parse(newest.data).src, V4.optVip);
    // Every reply is either translated to the VIP (flow still known) or left as it was: never anything else.
    let translated = 0;
    for (let i = 0; i < flows; i++) {
      const input = frame(V4.real, V4.client, tcp(TARGET_PORT, 20000 + i));
      const out = eg.testRun({ data: input }).data;
      const known = conns.lookup(encodeConnKey({ family: 4, protocol: 'TCP', client: V4.client, clientPort: 20000 + i, local: V4.real, localPort: TARGET_PORT })) !== null;
      if (known) {
        t.deepEqual(out, frame(V4.optVip, V4.client, tcp(VIP_PORT, 20000 + i)));
        translated++;
      } else {
        t.deepEqual(out, input);
      }
    }
    t.true(translated > 0 && translated <= 64);
  } finally {
    small.close();
  }
});

// ---- pins left by the older layout ---------------------------------------------------------------------------
test.serial('pins of the older layout (4-byte be_vips values, 21 counters) are re-created with their entries and counters; the programs use them', async (t) => {
  const pinRoot = `/sys/fs/bpf/gitlb-test-${runPrefix()}tc-backend-migrate`;
  const listener = { address: V4.optVip, family: 4 as const, port: VIP_PORT, protocol: 'TCP' as const };
  const address = { address: V4.ipipVip, family: 4 as const, port: 0, protocol: null };
  const desired = {
    node: 'be1', role: 'backend', interface: 'b0', mtu: 1500, hashSeed: 0, conntrackMaxEntries: 1024, reals: [], services: [],
    vips: [{ vip: V4.optVip, family: 4, port: VIP_PORT, protocol: 'TCP', targetPort: TARGET_PORT, serviceId: 1, forwarding: 'dsr-ipopt', hashSourcePort: false },
      { vip: V4.ipipVip, family: 4, port: VIP_PORT, protocol: 'TCP', targetPort: VIP_PORT, serviceId: 2, forwarding: 'dsr-ipip', hashSourcePort: false }],
    localVips: [],
  } as unknown as DesiredState;
  let loaded: BpfObject | null = null;
  let dp: Awaited<ReturnType<typeof openBackendDataPlane>> | null = null;
  try {
    ensurePinDir(pinRoot);
    // What a backend of the version before wrote: the entries of `desired` in 4-byte values, 21 counters.
    const old = BpfMap.create({ name: 'be_vips', type: MapType.hash, keySize: 20, valueSize: OLD_VIP_VALUE_SIZE, maxEntries: 4096 });
    const oldValue = (flags: number, targetPort: number) => encodeVipValue({ flags, targetPort }).subarray(0, OLD_VIP_VALUE_SIZE);
    for (const vip of [V4.optVip, V4.ipipVip]) {
      old.update(encodeVipKey({ ...listener, address: vip }), oldValue(VIP_FLAG_IPOPT, vip === V4.optVip ? TARGET_PORT : VIP_PORT));
      old.update(encodeVipKey({ ...address, address: vip }), oldValue(VIP_FLAG_IPIP, 0));
    }
    old.pin(`${pinRoot}/be_vips`);
    old.close();
    const stats = BpfMap.create({ name: 'be_stats', type: MapType.percpuArray, keySize: 4, valueSize: 8, maxEntries: STAT_NAMES.length - 1 });
    const seven = Buffer.alloc(8);
    seven.writeBigUInt64LE(7n);
    for (const i of [0, 6]) stats.update(Buffer.from([i, 0, 0, 0]), seven); // rx_packets, ipopt4 on every CPU
    stats.pin(`${pinRoot}/be_stats`);
    stats.close();

    dp = await openBackendDataPlane({ pinRoot, interface: 'b0' }); // opens only: nothing is attached before apply()
    t.deepEqual(await planOf(dp, desired), [], 'nothing to re-apply: every entry came across');
    t.true(dp.readVipEntries().every((e) => e.previousTargetPort === undefined), 'no previous targetPort invented');
    const c = await dp.counters();
    t.like(c, { rx_packets: 7 * possibleCpus(), ipopt4: 7 * possibleCpus(), ipopt_prev_target: 0 });
    // A program loaded over the same pins (as the daemon's is) trusts the migrated listener.
    loaded = await BpfObject.load('tc_backend', { pinRoot });
    t.is(loaded.map('be_vips').valueSize, 16);
    const r = loaded.program('backend_ingress').testRun({ data: ipoptFrame(V4.client, V4.real, tcp(45000, TARGET_PORT), V4.optVip, VIP_PORT) });
    t.deepEqual(r.data, frame(V4.client, V4.real, tcp(45000, TARGET_PORT)));
  } finally {
    loaded?.close();
    dp?.close();
    rmSync(pinRoot, { recursive: true, force: true });
  }
});

// ---- the pure part: which be_vips entries a desired state asks for --------------------------------------------
test('desiredVipEntries: every DSR VIP gets an address entry and a listener per port:protocol, whatever its encap; none for snat', (t) => {
  const base = { serviceId: 1, hashSourcePort: false } as const;
  const entries = desiredVipEntries({
    vips: [
      { ...base, vip: '192.0.2.10', family: 4, port: 80, protocol: 'TCP', targetPort: 80, forwarding: 'dsr-ipip' },
      { ...base, vip: '192.0.2.10', family: 4, port: 443, protocol: 'TCP', targetPort: 443, forwarding: 'dsr-ipip' },
      { ...base, vip: '2001:db8:f::20', family: 6, port: 53, protocol: 'UDP', targetPort: 5353, forwarding: 'dsr-ipopt' },
      { ...base, vip: '192.0.2.30', family: 4, port: 80, protocol: 'TCP', targetPort: 80, forwarding: 'dsr-l2' },
      { ...base, vip: '192.0.2.40', family: 4, port: 53, protocol: 'UDP', targetPort: 53, forwarding: 'snat' },
    ],
  });
  const address = (a: string, family: 4 | 6) => ({ address: a, family, port: 0, protocol: null, flags: VIP_FLAG_IPIP, targetPort: 0 });
  const listener = (a: string, family: 4 | 6, port: number, protocol: 'TCP' | 'UDP', targetPort: number) =>
    ({ address: a, family, port, protocol, flags: VIP_FLAG_IPOPT, targetPort });
  t.deepEqual(entries, [
    address('192.0.2.10', 4),
    listener('192.0.2.10', 4, 443, 'TCP', 443),
    listener('192.0.2.10', 4, 80, 'TCP', 80),
    address('192.0.2.30', 4),
    listener('192.0.2.30', 4, 80, 'TCP', 80),
    address('2001:db8:f::20', 6),
    listener('2001:db8:f::20', 6, 53, 'UDP', 5353),
  ]);
  // Round trip through the map encoding.
  for (const e of entries) t.deepEqual(decodeVipEntry(encodeVipKey(e), encodeVipValue(e)), e);
});

test('formatAddr gives the canonical text render uses', (t) => {
  const cases = ['2001:db8::1', '2001:db8:0:1::', '::', '2001:db8:1:0:1::1', '2001:db8::1:0:0:1', '198.51.100.7'];
  for (const c of cases) t.is(formatAddr(addrBytes(c), c.includes(':') ? 6 : 4), c);
});
