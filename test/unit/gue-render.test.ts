// dsr-gue from config to desired state and plan (pure): the Cluster's GUE port reaches the lb node's gue listeners
// (lb_vip_value.target_port) and every backend's address entries (be_vips), whatever encap its services name now;
// a changed port is a listener put; health checks of gue services go to the real unless they ask for via: vip,
// whose probes are tunnelled to the cluster's GUE port.
import test from 'ava';
import { cluster, model, node, real, service } from '../helpers/model-builder.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { EMPTY_LIVE, desiredBackendVips, type LiveState } from '../../src/render/ops.js';
import { planOps } from '../../src/render/ops-plan.js';
import { validateDesired } from '../../src/bpf/dataplane/validate.js';
import { DEFAULT_GUE_PORT } from '../../src/render/model.js';
import { effectiveVia, vipProbeUnsupported } from '../../src/render/config/health-via.js';
import { checkTargets } from '../../src/reconciler/health/targets.js';
import { checkFingerprint } from '../../src/reconciler/health/checker.js';
import { describeProbe } from '../../src/reconciler/health/probes.js';

const build = (gue?: { port: number }, encap: 'gue' | 'ipip' = 'gue') => model({
  cluster: { ...cluster({ tableSize: 251 }), spec: { ...cluster({ tableSize: 251 }).spec, ...(gue && { gue }) } },
  nodes: [
    node('lb-1', { role: 'lb', allowedVips: ['192.0.2.0/24', '2001:db8:f::/64'], addresses: ['203.0.113.1', '2001:db8:1::1'] }),
    node('be-1', { role: 'backend', addresses: ['203.0.113.2', '2001:db8:1::2'] }),
  ],
  services: [
    service('web', { vip: '192.0.2.10', ports: [{ port: 80, protocol: 'TCP' }, { port: 53, protocol: 'UDP' }], dispatch: { mode: 'dsr', encap }, reals: [real('203.0.113.2')] }),
    service('web6', { vip: '2001:db8:f::10', dispatch: { mode: 'dsr', encap: 'l2' }, reals: [real('2001:db8:1::2')] }),
  ],
});

test('lb node: gue listeners carry the cluster port (default 6080), targetPort stays the port; others carry none', (t) => {
  const lb = renderDesiredState(build(), 'lb-1');
  const gue = lb.vips.filter((v) => v.forwarding === 'dsr-gue');
  t.is(gue.length, 2);
  for (const v of gue) {
    t.is(v.guePort, DEFAULT_GUE_PORT);
    t.is(v.targetPort, v.port);
  }
  t.true(lb.vips.filter((v) => v.forwarding !== 'dsr-gue').every((v) => v.guePort === undefined));
  t.is(lb.guePort, undefined, 'the lb node needs no node-wide port');
  t.deepEqual(renderDesiredState(build({ port: 7777 }), 'lb-1').vips.filter((v) => v.forwarding === 'dsr-gue').map((v) => v.guePort), [7777, 7777]);
});

test('backend node: every DSR VIP address entry takes GUE at the cluster port, whatever the encap names now', (t) => {
  for (const encap of ['gue', 'ipip'] as const) {
    const be = renderDesiredState(build({ port: 7777 }, encap), 'be-1');
    t.is(be.guePort, 7777);
    const addresses = desiredBackendVips(be).filter((e) => e.kind === 'address');
    t.deepEqual(addresses.map((e) => [e.address, e.targetPort]), [['192.0.2.10', 7777], ['2001:db8:f::10', 7777]], encap);
    t.true(desiredBackendVips(be).filter((e) => e.kind === 'listener').every((e) => e.targetPort === e.port), 'listeners keep their ipopt port');
  }
});

test('plan: moving the GUE port is a put of each gue listener and nothing else; the same port plans nothing', (t) => {
  const a = renderDesiredState(build(), 'lb-1');
  const b = renderDesiredState(build({ port: 7777 }), 'lb-1');
  const live: LiveState = { ...EMPTY_LIVE, settings: { hashSeed: a.hashSeed, mtu: a.mtu, src4: ['203.0.113.1'], src6: '2001:db8:1::1' },
    reals: a.reals, services: a.services.map((s) => ({ id: s.id, tableSize: s.tableSize, digest: s.digest })), vips: a.vips,
    markers: [...new Map(a.vips.map((v) => [v.vip, { address: v.vip, family: v.family }])).values()] };
  const same = planOps(live, a).filter((o) => o.op.startsWith('vip'));
  t.deepEqual(same, []);
  const moved = planOps(live, b).filter((o) => o.op.startsWith('vip'));
  t.is(moved.length, 2);
  t.true(moved.every((o) => o.op === 'vip.put' && (o as { vip: { guePort?: number } }).vip.guePort === 7777), JSON.stringify(moved));
});

test('health: gue services are probed at the real by default and through the VIP (tunnelled to the GUE port) when they ask', (t) => {
  const hc = { type: 'tcp' as const, intervalMs: 1000, timeoutMs: 500, rise: 1, fall: 1 };
  const svc = service('g', { vip: '192.0.2.10', dispatch: { mode: 'dsr', encap: 'gue' }, reals: [], healthCheck: hc });
  t.is(vipProbeUnsupported(svc.spec as never), null);
  t.is(effectiveVia(svc.spec as never), 'real');
  const asked = service('g', { vip: '192.0.2.10', dispatch: { mode: 'dsr', encap: 'gue' }, reals: [], healthCheck: { ...hc, via: 'vip' } });
  t.is(effectiveVia(asked.spec as never), 'vip');
});

test('health: a via: vip probe of a gue service carries the cluster\'s GUE port (default 6080); moving the port changes the check', (t) => {
  const probed = (gue?: { port: number }) => {
    const m = build(gue);
    const services = m.services.map((s) => s.metadata.name === 'web'
      ? { ...s, spec: { ...s.spec, healthCheck: { type: 'tcp' as const, port: 80, intervalMs: 1000, timeoutMs: 500, rise: 1, fall: 1, via: 'vip' as const } } }
      : s);
    return checkTargets({ ...m, services }).find((x) => x.service === 'web')!;
  };
  const t0 = probed();
  t.deepEqual(t0.probe.via, { vip: '192.0.2.10', encap: 'gue', guePort: DEFAULT_GUE_PORT });
  t.is(describeProbe(t0.probe), 'tcp 192.0.2.10:80 via gue to 203.0.113.2');
  const t1 = probed({ port: 7777 });
  t.is(t1.probe.via?.guePort, 7777);
  t.not(checkFingerprint(t1), checkFingerprint(t0), 'a new GUE port is a changed check (probed again, probation)');
});

test('data-plane validation: a dsr-gue listener without its GUE port is refused before anything is written; with it, accepted', (t) => {
  const lb = renderDesiredState(build(), 'lb-1');
  t.notThrows(() => validateDesired(lb));
  for (const bad of [undefined, 0, 65536, 1.5]) {
    const vips = lb.vips.map((v) => (v.forwarding === 'dsr-gue' ? { ...v, guePort: bad } : v));
    t.regex(t.throws(() => validateDesired({ ...lb, vips }))!.message, /guePort: a dsr-gue listener needs its GUE port/, String(bad));
  }
});
