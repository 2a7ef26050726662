// The backend TC programs (build/bpf/tc_backend.o) under BPF_PROG_TEST_RUN: every translation in both
// directions, IPv4 and IPv6. Expected packets are built independently (test/lib/packets-backend.ts) and compared
// byte for byte where the program's output is fully determined; checksums are recomputed from scratch.
// Serial: the tests share one loaded object and read its counters.
import test from 'ava';
import { BpfObject, TcAction, type BpfProgram } from '../src/bpf/libbpf.js';
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
  type StatName,
} from '../src/bpf/backend/codec.js';
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
} from './lib/packets-backend.js';
import { addTunnelVips, backendStats, loadBackendProgs } from './lib/backend-prog.js';

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
