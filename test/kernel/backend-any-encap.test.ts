// A backend takes every DSR encapsulation for the VIPs it serves, whatever encap its own revision names, so lb
// nodes and backends may apply an encap change (l2 <-> ipip <-> ipopt) in any order (docs/backend.md). The be_vips
// entries come from the same pure mapping apply() writes (desiredVipEntries); the packets run through the real
// tc_backend.o under BPF_PROG_TEST_RUN. Serial: one loaded object, its map refilled per encap.
import test from 'ava';
import { BpfObject, TcAction, type BpfProgram } from '../../src/bpf/libbpf.js';
import { desiredVipEntries, encodeVipKey, encodeVipValue } from '../../src/bpf/backend/codec.js';
import type { DesiredVip, Forwarding } from '../../src/render/state.js';
import { loadBackendProgs } from '../lib/backend-prog.js';
import { encapFrame, eth, frame, ipPacket, ipoptFrame, type L4Spec } from '../lib/packets-backend.js';

const V4 = { lb: '203.0.113.1', real: '203.0.113.2', client: '198.51.100.7', vip: '192.0.2.10', other: '192.0.2.99' };
const V6 = { lb: '2001:db8:1::1', real: '2001:db8:1::2', client: '2001:db8:2::7', vip: '2001:db8:f::10', other: '2001:db8:f::99' };
const PORT = 80;

let obj: BpfObject;
let ingress: BpfProgram;

test.before(async () => {
  ({ obj, ingress } = await loadBackendProgs(V4, V6));
});

test.after.always(() => obj?.close());

/** be_vips exactly as a backend whose revision serves both VIPs (TCP port 80) with `forwarding`. */
function configure(forwarding: Forwarding): void {
  const vips = obj.map('be_vips');
  vips.clear();
  const listener = (vip: string, family: 4 | 6): DesiredVip =>
    ({ vip, family, port: PORT, protocol: 'TCP', targetPort: PORT, serviceId: 1, forwarding, hashSourcePort: false });
  for (const e of desiredVipEntries({ vips: [listener(V4.vip, 4), listener(V6.vip, 6)] })) vips.update(encodeVipKey(e), encodeVipValue(e));
}

const tcp = (sport: number): L4Spec => ({ proto: 'TCP', sport, dport: PORT, payload: Buffer.from('hello') });
const ingressOf = (data: Buffer) => ingress.testRun({ data, dataOutSize: data.length + 256 });

for (const served of ['dsr-l2', 'dsr-ipip', 'dsr-ipopt'] as const) {
  for (const [fam, A] of [[4, V4], [6, V6]] as const) {
    test.serial(`a backend serving an IPv${fam} VIP with ${served} accepts l2, ipip and ipopt packets for it`, (t) => {
      configure(served);
      // l2: the client's packet as it is; the VIP is local on the backend for every DSR encap (render's localVips).
      const plain = frame(A.client, A.vip, tcp(40001));
      t.deepEqual(ingressOf(plain).data, plain);

      // ipip from an lb node: decapsulated to exactly the client's packet.
      const inner = ipPacket(A.client, A.vip, tcp(40002));
      const tunnelled = ingressOf(encapFrame(A.lb, A.real, inner));
      t.is(tunnelled.retval, TcAction.ok);
      t.deepEqual(tunnelled.data, eth(inner, fam), 'ipip decapsulated');

      // ipopt: the option naming VIP:port is trusted (stripped, flow recorded for the reply rewrite).
      const withOpt = ipoptFrame(A.client, A.real, tcp(40003), A.vip, PORT);
      const opt = ingressOf(withOpt);
      t.is(opt.retval, TcAction.ok);
      t.deepEqual(opt.data, frame(A.client, A.real, tcp(40003)), 'ipopt option trusted and stripped');

      // Still only for VIPs it serves: another VIP's tunnel and option pass untouched.
      const foreignTunnel = encapFrame(A.lb, A.real, ipPacket(A.client, A.other, tcp(40004)));
      t.deepEqual(ingressOf(foreignTunnel).data, foreignTunnel);
      const foreignOpt = ipoptFrame(A.client, A.real, tcp(40005), A.other, PORT);
      t.deepEqual(ingressOf(foreignOpt).data, foreignOpt);
    });
  }
}

test.serial('the tunnel source allow-list still holds for a VIP served with l2: ipip from a non-lb source is dropped', (t) => {
  configure('dsr-l2');
  const r = ingressOf(encapFrame('203.0.113.66', V4.real, ipPacket(V4.client, V4.vip, tcp(40006))));
  t.is(r.retval, TcAction.shot);
});

test.serial('a snat VIP gets no entries: its tunnels and options are not taken', (t) => {
  configure('snat');
  const tunnelled = encapFrame(V4.lb, V4.real, ipPacket(V4.client, V4.vip, tcp(40007)));
  t.deepEqual(ingressOf(tunnelled).data, tunnelled);
  const withOpt = ipoptFrame(V4.client, V4.real, tcp(40008), V4.vip, PORT);
  t.deepEqual(ingressOf(withOpt).data, withOpt);
});
