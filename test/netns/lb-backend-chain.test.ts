// The LB's XDP program and the backend's TC programs agree on the wire format: frames produced by xdp_lb
// (BPF_PROG_TEST_RUN in its lab namespace, test/lib/xdp-lab.ts) are fed to backend_ingress, and the backend must
// recover exactly the client's packet (ipip) or the flow's VIP:port (ipopt, IPv4 and IPv6), then answer as the VIP.
import test from 'ava';
import { BpfObject, TcAction } from '../../src/bpf/libbpf.js';
import {
  decodeConnEntry, desiredTunnelAddrs, desiredVipEntries, encodeAddrKey, encodeAddrValue, encodeConnKey, encodeVipKey, encodeVipValue,
} from '../../src/bpf/backend/codec.js';
import { TCP_FLAGS, frame, ipPacket, type EthSpec } from '../lib/packets.js';
import { frame as beFrame, parse } from '../lib/packets-backend.js';
import { LAB, runHarness, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { makeState } from '../lib/lb-state.js';
import { DEFAULT_GUE_PORT } from '../../src/render/model.js';
import { stateToJson } from '../lib/xdp-harness.js';

const TAG = 'lbbe';
const CLIENT4 = '192.0.2.1';
const CLIENT6 = '2001:db8:c::1';
const REAL4 = '198.51.100.11';
const REAL6 = '2001:db8:2::11';
const IPIP4 = '203.0.113.11';
const IPIP6 = '2001:db8:f::11';
const OPT4 = '203.0.113.12';
const OPT6 = '2001:db8:f::12';
const GUE4 = '203.0.113.13';
const GUE6 = '2001:db8:f::13';
const ring7 = (id: number) => Array.from({ length: 7 }, () => id);

const state = makeState({
  reals: { 1: REAL4, 3: REAL6 },
  services: [
    { id: 2, vip: IPIP4, forwarding: 'dsr-ipip', ring: ring7(1) },
    { id: 3, vip: OPT4, forwarding: 'dsr-ipopt', ring: ring7(1), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }] },
    { id: 7, vip: IPIP6, forwarding: 'dsr-ipip', ring: ring7(3) },
    { id: 9, vip: GUE4, forwarding: 'dsr-gue', ring: ring7(1), ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }] },
    { id: 10, vip: GUE6, forwarding: 'dsr-gue', ring: ring7(3), ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }] },
    { id: 8, vip: OPT6, forwarding: 'dsr-ipopt', ring: ring7(3), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }, { port: 53, protocol: 'UDP' }] },
  ],
  addresses: ['198.51.100.1', '2001:db8:2::1'],
});

const ETH_IN: EthSpec = { dst: LAB.lbA.mac, src: LAB.clientMac };
const syn4 = (dst: string, sport: number, dport: number) =>
  ipPacket({ src: CLIENT4, dst, l4: { tcp: { sport, dport, flags: TCP_FLAGS.SYN, seq: 1000 } } });
const syn6 = (dst: string, sport: number, dport: number) =>
  ipPacket({ src: CLIENT6, dst, l4: { tcp: { sport, dport, flags: TCP_FLAGS.SYN, seq: 1000 } } });
const udp4 = (dst: string, sport: number, dport: number) =>
  ipPacket({ src: CLIENT4, dst, l4: { udp: { sport, dport, payload: Buffer.from('query') } } });

const udp6 = (dst: string, sport: number, dport: number) =>
  ipPacket({ src: CLIENT6, dst, l4: { udp: { sport, dport, payload: Buffer.from('query') } } });

const CASES = {
  ipip4: syn4(IPIP4, 50000, 80),
  ipip6: syn6(IPIP6, 50001, 80),
  opt4tcp: syn4(OPT4, 50002, 80),
  opt4udp: udp4(OPT4, 50003, 53),
  opt6tcp: syn6(OPT6, 50004, 80),
  opt6udp: udp6(OPT6, 50005, 53),
  gue4tcp: syn4(GUE4, 50006, 80),
  gue4udp: udp4(GUE4, 50007, 53),
  gue6tcp: syn6(GUE6, 50008, 80),
  gue6udp: udp6(GUE6, 50009, 53),
};

let lbOut: Record<keyof typeof CASES, Buffer>;
let backend: BpfObject;

test.before(async () => {
  const { ns, pinRoot } = setupLab(TAG);
  try {
    const names = Object.keys(CASES) as Array<keyof typeof CASES>;
    const out = await runHarness(ns, {
      pinRoot,
      steps: [
        { op: 'apply', state: stateToJson(state) },
        ...names.map((n) => ({ op: 'run', data: frame(ETH_IN, CASES[n]).toString('hex'), ifname: 'lbA' })),
      ],
    });
    if (out[0].error) throw new Error(out[0].error);
    lbOut = Object.fromEntries(names.map((n, i) => {
      const r = out[i + 1];
      if (r.error || r.retval !== 3) throw new Error(`LB did not transmit ${n}: ${JSON.stringify(r)}`);
      return [n, Buffer.from(r.data, 'hex')];
    })) as typeof lbOut;
  } finally {
    teardownLab(TAG);
  }
  backend = await BpfObject.load('tc_backend');
  // The backend's view of the same services (what apply() writes for role 'backend').
  for (const e of desiredVipEntries({ ...state, guePort: DEFAULT_GUE_PORT })) backend.map('be_vips').update(encodeVipKey(e), encodeVipValue(e));
  // Tunnels are accepted from the LB's addresses (the outer sources above) to the real's own addresses.
  const tunnels = desiredTunnelAddrs({ addresses: [REAL4, REAL6], lbAddresses: state.addresses });
  for (const e of tunnels) backend.map('be_tunnel_addrs').update(encodeAddrKey(e), encodeAddrValue(e));
});

test.after.always(() => backend?.close());

for (const n of ['ipip4', 'ipip6', 'gue4tcp', 'gue4udp', 'gue6tcp', 'gue6udp'] as const) {
  test(`${n}: the backend recovers exactly the client's packet from the LB's tunnel`, (t) => {
    const r = backend.program('backend_ingress').testRun({ data: lbOut[n] });
    t.is(r.retval, TcAction.ok);
    t.deepEqual(r.data.subarray(14), CASES[n], 'inner packet byte for byte');
    t.deepEqual(r.data.subarray(0, 12), lbOut[n].subarray(0, 12), 'MACs as the LB sent them');
  });
}

for (const [n, proto, sport, vipPort, targetPort] of [['opt4tcp', 'TCP', 50002, 80, 8080], ['opt4udp', 'UDP', 50003, 53, 53],
  ['opt6tcp', 'TCP', 50004, 80, 8080], ['opt6udp', 'UDP', 50005, 53, 53]] as const) {
  const v6 = n.startsWith('opt6');
  const [client, real, vip] = v6 ? [CLIENT6, REAL6, OPT6] : [CLIENT4, REAL4, OPT4];
  test(`${n}: the backend reads the LB's option, strips it, and answers as VIP:${vipPort}`, (t) => {
    const r = backend.program('backend_ingress').testRun({ data: lbOut[n] });
    t.is(r.retval, TcAction.ok);
    const p = parse(r.data);
    t.is(p.headerLen, v6 ? 40 : 20, 'option stripped');
    t.true(p.ipChecksumOk && p.lengthOk && p.l4ChecksumOk === true);
    t.is(p.dst, real);
    t.is(p.dport, targetPort);
    const key = encodeConnKey({ family: v6 ? 6 : 4, protocol: proto, client, clientPort: sport, local: real, localPort: targetPort });
    const v = backend.map('be_conns').lookup(key);
    t.truthy(v, 'flow recorded');
    const c = decodeConnEntry(key, v!);
    t.is(c.vip, vip);
    t.is(c.vipPort, vipPort);
    const l4 = proto === 'TCP' ? { proto, sport: targetPort, dport: sport, tcpFlags: 0x12 } : { proto, sport: targetPort, dport: sport, payload: Buffer.from('answer') };
    const reply = backend.program('backend_egress').testRun({ data: beFrame(real, client, l4) });
    t.deepEqual(reply.data, beFrame(vip, client, { ...l4, sport: vipPort }));
  });
}
