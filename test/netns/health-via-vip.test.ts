// healthCheck.via: vip in a network-namespace lab: a real HealthChecker in the lb namespace with the TC egress
// probe program (src/bpf/vip-probe.ts) on its interface; two backends holding the VIP on lo, all on one bridge.
// The lb's own route to the VIP points at backend 2, so a probe for backend 1 only reaches backend 1 when the
// program steers it there: removing the VIP from backend 1 must mark it down through the VIP path, while the
// same real probed on its own address (via: real) stays up.
// ipip: backend 1 runs the real backend data plane (tc_backend decapsulation); detaching it must mark it down.
// gue: the probe is tunnelled in UDP to the cluster's GUE port; a backend decapsulating at another port, or not at
// all, is down via vip while up via real.
import test from 'ava';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADDR, ADDR6, bridgeLab, sh } from '../lib/bridge-lab.js';
import { Backend, Runner, model, service } from '../health-lab.js';
import { nsExec, runPrefix } from '../../src/lab/netns.js';
import type { DesiredState } from '../../src/render/state.js';
import { DEFAULT_GUE_PORT } from '../../src/render/model.js';

const VIP = '203.0.113.10';
const VIP_IPIP = '203.0.113.20';
const VIP_OPT = '203.0.113.30';
const VIP6 = '2001:db8:f::10';
const VIP6_IPIP = '2001:db8:f::20';
const VIP6_OPT = '2001:db8:f::30';
const VIP_GUE = '203.0.113.40';
const VIP6_GUE = '2001:db8:f::40';
const TARGET_PORT = 8081; // the ipopt service's targetPort: the backend listens there, clients reach VIP:PORT
const PORT = 8001;
const lab = bridgeLab('v');
const pinRoot = `/sys/fs/bpf/gitlb-test-${runPrefix()}health-via-vip`;
const ROOT = join(import.meta.dirname, '..', '..');
const work = mkdtempSync(join(tmpdir(), `${runPrefix()}health-via-vip-`));

test.before(() => {
  lab.setup();
  for (const b of [lab.ns.b1, lab.ns.b2]) {
    sh(b, ['ip', 'addr', 'add', `${VIP}/32`, 'dev', 'lo']);
    sh(b, ['sysctl', '-qw', 'net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2']);
  }
  // without the program every probe to the VIP would go to backend 2
  sh(lab.ns.lb, ['ip', 'route', 'add', `${VIP}/32`, 'via', ADDR.b2]);
  for (const b of [lab.ns.b1, lab.ns.b2]) sh(b, ['ip', 'addr', 'add', `${VIP6}/128`, 'dev', 'lo', 'nodad']);
  sh(lab.ns.lb, ['ip', '-6', 'route', 'add', `${VIP6}/128`, 'via', ADDR6.b2]);
});

test.after.always(() => {
  lab.teardown([pinRoot]);
  rmSync(work, { recursive: true, force: true });
});

test.serial('l2: a real that lost its VIP is down via vip, up via real; it comes back when the VIP returns', async (t) => {
  const hc = { type: 'tcp' as const, port: PORT, intervalMs: 200, timeoutMs: 150, rise: 2, fall: 2 };
  const backends = [await Backend.start(lab.ns.b1, 'tcp', PORT), await Backend.start(lab.ns.b2, 'tcp', PORT)];
  const m = model([
    service('viavip', { ...hc, via: 'vip' }, [ADDR.b1, ADDR.b2], PORT),
    service('viareal', hc, [ADDR.b1, ADDR.b2], PORT),
  ]);
  const runner = await Runner.start(lab.ns.lb, m, 64, 'eth0');
  try {
    try {
      for (const s of ['viavip', 'viareal']) for (const a of [ADDR.b1, ADDR.b2]) await runner.change(s, a, 'up', 5000);
    } catch (e) {
      t.log(JSON.stringify((await runner.snapshot()).snapshot.services, null, 1));
      throw e;
    }
    const snap0 = await runner.snapshot();
    t.is(snap0.snapshot.services.viavip.reals[ADDR.b1].check, `tcp ${VIP}:${PORT} via l2 to ${ADDR.b1}`);

    sh(lab.ns.b1, ['ip', 'addr', 'del', `${VIP}/32`, 'dev', 'lo']);
    const down = await runner.change('viavip', ADDR.b1, 'down', 5000);
    t.false(down.result.ok);
    // a few more intervals: the other reals and the via: real check of the same real do not move
    await new Promise((r) => setTimeout(r, 800));
    const snap = (await runner.snapshot()).snapshot.services;
    t.is(snap.viavip.reals[ADDR.b1].state, 'down');
    t.is(snap.viavip.reals[ADDR.b2].state, 'up');
    t.is(snap.viareal.reals[ADDR.b1].state, 'up');
    t.is(snap.viareal.reals[ADDR.b2].state, 'up');
    t.deepEqual(runner.pendingChanges().filter((e) => !(e.service === 'viavip' && e.address === ADDR.b1)), []);

    sh(lab.ns.b1, ['ip', 'addr', 'add', `${VIP}/32`, 'dev', 'lo']);
    const up = await runner.change('viavip', ADDR.b1, 'up', 5000);
    t.true(up.result.ok);
  } finally {
    await runner.stop();
    for (const b of backends) await b.stop();
  }
});

/** What `gitlb run` does on a backend node for one dsr-ipip VIP and one dsr-ipopt VIP (test/lib/backend-lab-node.ts),
 * in backend 1. */
let lastDesired: DesiredState | undefined;
async function backendDataPlane(guePort = DEFAULT_GUE_PORT): Promise<void> {
  const desired: DesiredState = {
    node: 'be1', role: 'backend', interface: 'eth0', mtu: 1500, hashSeed: 0, conntrackMaxEntries: 1024, reals: [], services: [],
    vips: [{ vip: VIP_IPIP, family: 4, port: PORT, protocol: 'TCP', targetPort: PORT, serviceId: 1, forwarding: 'dsr-ipip', hashSourcePort: false },
      { vip: VIP_OPT, family: 4, port: PORT, protocol: 'TCP', targetPort: TARGET_PORT, serviceId: 2, forwarding: 'dsr-ipopt', hashSourcePort: false },
      { vip: VIP6_IPIP, family: 6, port: PORT, protocol: 'TCP', targetPort: PORT, serviceId: 3, forwarding: 'dsr-ipip', hashSourcePort: false },
      { vip: VIP6_OPT, family: 6, port: PORT, protocol: 'TCP', targetPort: TARGET_PORT, serviceId: 4, forwarding: 'dsr-ipopt', hashSourcePort: false },
      { vip: VIP_GUE, family: 4, port: PORT, protocol: 'TCP', targetPort: PORT, serviceId: 5, forwarding: 'dsr-gue', hashSourcePort: false, guePort },
      { vip: VIP6_GUE, family: 6, port: PORT, protocol: 'TCP', targetPort: PORT, serviceId: 6, forwarding: 'dsr-gue', hashSourcePort: false, guePort }],
    localVips: [VIP_IPIP, VIP_OPT, VIP6_IPIP, VIP6_OPT, VIP_GUE, VIP6_GUE],
    addresses: [ADDR.b1, ADDR6.b1],
    lbAddresses: [ADDR.lb, ADDR6.lb],
    guePort,
  };
  lastDesired = desired;
  const args = { pinRoot, stateFile: join(work, 'backend-vips.json'), desired };
  const r = await nsExec(lab.ns.b1, [process.execPath, '--import', 'tsx', join(ROOT, 'test/lib/backend-lab-node.ts'), 'backend', JSON.stringify(args)], { cwd: ROOT, timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`backend data plane in ${lab.ns.b1}: ${r.stderr}`);
}

test.serial('ipip: a real whose decapsulation program is gone is down via vip, up via real', async (t) => {
  const hc = { type: 'tcp' as const, port: PORT, intervalMs: 200, timeoutMs: 150, rise: 2, fall: 2 };
  await backendDataPlane();
  const backend = await Backend.start(lab.ns.b1, 'tcp', PORT);
  const ipip = (name: string, via: 'vip' | 'real') => {
    const s = service(name, { ...hc, via }, [ADDR.b1], PORT);
    return { ...s, spec: { ...s.spec, vip: VIP_IPIP, dispatch: { mode: 'dsr' as const, encap: 'ipip' as const } } };
  };
  const runner = await Runner.start(lab.ns.lb, model([ipip('tunvip', 'vip'), ipip('tunreal', 'real')]), 64, 'eth0');
  try {
    await runner.change('tunvip', ADDR.b1, 'up', 5000);
    await runner.change('tunreal', ADDR.b1, 'up', 5000);
    t.is((await runner.snapshot()).snapshot.services.tunvip.reals[ADDR.b1].check, `tcp ${VIP_IPIP}:${PORT} via ipip to ${ADDR.b1}`);

    // the pinned link is the only thing keeping the decapsulating program attached
    const link = join(pinRoot, 'tc_ingress_link');
    t.true(existsSync(link));
    rmSync(link);
    const down = await runner.change('tunvip', ADDR.b1, 'down', 5000);
    t.false(down.result.ok);
    await new Promise((r) => setTimeout(r, 800));
    const snap = (await runner.snapshot()).snapshot.services;
    t.is(snap.tunvip.reals[ADDR.b1].state, 'down');
    t.is(snap.tunreal.reals[ADDR.b1].state, 'up');

    await backendDataPlane(); // re-attaches
    await runner.change('tunvip', ADDR.b1, 'up', 5000);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('ipopt: the probe SYN names VIP:port; a real that stops taking the option is down via vip, up via real', async (t) => {
  const hc = { type: 'tcp' as const, intervalMs: 200, timeoutMs: 150, rise: 2, fall: 2 };
  await backendDataPlane();
  const backend = await Backend.start(lab.ns.b1, 'tcp', TARGET_PORT);
  const ipopt = (name: string, via: 'vip' | 'real') => {
    const s = service(name, { ...hc, via }, [ADDR.b1], PORT);
    return { ...s, spec: { ...s.spec, vip: VIP_OPT, ports: [{ port: PORT, protocol: 'TCP' as const, targetPort: TARGET_PORT }],
      dispatch: { mode: 'dsr' as const, encap: 'ipopt' as const } } };
  };
  const runner = await Runner.start(lab.ns.lb, model([ipopt('optvip', 'vip'), ipopt('optreal', 'real')]), 64, 'eth0');
  try {
    await runner.change('optvip', ADDR.b1, 'up', 5000);
    await runner.change('optreal', ADDR.b1, 'up', 5000);
    t.is((await runner.snapshot()).snapshot.services.optvip.reals[ADDR.b1].check, `tcp ${VIP_OPT}:${PORT} via ipopt to ${ADDR.b1}:${TARGET_PORT}`);

    // without the backend's programs the option is ignored and the real answers from its own address and
    // targetPort, which a client of the VIP would never accept: the probe must fail the same way. (Both go: with the
    // egress program alone left, the probe's fixed 4-tuple would still be rewritten from the flow recorded before,
    // docs/health.md "ipopt")
    for (const name of ['tc_ingress_link', 'tc_egress_link']) {
      const link = join(pinRoot, name);
      t.true(existsSync(link), name);
      rmSync(link);
    }
    const down = await runner.change('optvip', ADDR.b1, 'down', 5000);
    t.false(down.result.ok);
    await new Promise((r) => setTimeout(r, 800));
    const snap = (await runner.snapshot()).snapshot.services;
    t.is(snap.optvip.reals[ADDR.b1].state, 'down');
    t.is(snap.optreal.reals[ADDR.b1].state, 'up', 'the real itself answers');

    await backendDataPlane(); // re-attaches
    await runner.change('optvip', ADDR.b1, 'up', 5000);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('IPv6 l2: a real that lost its VIP is down via vip (asked for), up via real; back when the VIP returns', async (t) => {
  const hc = { type: 'tcp' as const, port: PORT, intervalMs: 200, timeoutMs: 150, rise: 2, fall: 2 };
  const backends = [await Backend.start(lab.ns.b1, 'tcp', PORT), await Backend.start(lab.ns.b2, 'tcp', PORT)];
  const v6 = (name: string, via: 'vip' | 'real') => {
    const s = service(name, { ...hc, via }, [ADDR6.b1, ADDR6.b2], PORT);
    return { ...s, spec: { ...s.spec, vip: VIP6 } };
  };
  const runner = await Runner.start(lab.ns.lb, model([v6('v6vip', 'vip'), v6('v6real', 'real')]), 64, 'eth0');
  try {
    for (const s of ['v6vip', 'v6real']) for (const a of [ADDR6.b1, ADDR6.b2]) await runner.change(s, a, 'up', 5000);
    t.is((await runner.snapshot()).snapshot.services.v6vip.reals[ADDR6.b1].check, `tcp [${VIP6}]:${PORT} via l2 to ${ADDR6.b1}`);
    sh(lab.ns.b1, ['ip', 'addr', 'del', `${VIP6}/128`, 'dev', 'lo']);
    const down = await runner.change('v6vip', ADDR6.b1, 'down', 5000);
    t.false(down.result.ok);
    await new Promise((r) => setTimeout(r, 800));
    const snap = (await runner.snapshot()).snapshot.services;
    t.is(snap.v6vip.reals[ADDR6.b2].state, 'up', 'the other real, through the VIP path');
    t.is(snap.v6real.reals[ADDR6.b1].state, 'up', 'the real itself answers');
    sh(lab.ns.b1, ['ip', 'addr', 'add', `${VIP6}/128`, 'dev', 'lo', 'nodad']);
    await runner.change('v6vip', ADDR6.b1, 'up', 5000);
  } finally {
    await runner.stop();
    for (const b of backends) await b.stop();
  }
});

test.serial('IPv6 ipip: a real whose decapsulation program is gone is down via vip (asked for), up via real', async (t) => {
  const hc = { type: 'tcp' as const, port: PORT, intervalMs: 200, timeoutMs: 150, rise: 2, fall: 2 };
  await backendDataPlane();
  const backend = await Backend.start(lab.ns.b1, 'tcp', PORT);
  const ipip6 = (name: string, via: 'vip' | 'real') => {
    const s = service(name, { ...hc, via }, [ADDR6.b1], PORT);
    return { ...s, spec: { ...s.spec, vip: VIP6_IPIP, dispatch: { mode: 'dsr' as const, encap: 'ipip' as const } } };
  };
  const runner = await Runner.start(lab.ns.lb, model([ipip6('tun6vip', 'vip'), ipip6('tun6real', 'real')]), 64, 'eth0');
  try {
    await runner.change('tun6vip', ADDR6.b1, 'up', 5000);
    await runner.change('tun6real', ADDR6.b1, 'up', 5000);
    t.is((await runner.snapshot()).snapshot.services.tun6vip.reals[ADDR6.b1].check, `tcp [${VIP6_IPIP}]:${PORT} via ipip to ${ADDR6.b1}`);
    const link = join(pinRoot, 'tc_ingress_link');
    t.true(existsSync(link));
    rmSync(link);
    const down = await runner.change('tun6vip', ADDR6.b1, 'down', 5000);
    t.false(down.result.ok);
    await new Promise((r) => setTimeout(r, 800));
    t.is((await runner.snapshot()).snapshot.services.tun6real.reals[ADDR6.b1].state, 'up');
    await backendDataPlane(); // re-attaches
    await runner.change('tun6vip', ADDR6.b1, 'up', 5000);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('IPv6 ipopt: the probe SYN carries the destination-options header; a backend without its programs is down via vip', async (t) => {
  const hc = { type: 'tcp' as const, intervalMs: 200, timeoutMs: 150, rise: 2, fall: 2 };
  await backendDataPlane();
  const backend = await Backend.start(lab.ns.b1, 'tcp', TARGET_PORT);
  const opt6 = (name: string, via: 'vip' | 'real') => {
    const s = service(name, { ...hc, via }, [ADDR6.b1], PORT);
    return { ...s, spec: { ...s.spec, vip: VIP6_OPT, ports: [{ port: PORT, protocol: 'TCP' as const, targetPort: TARGET_PORT }],
      dispatch: { mode: 'dsr' as const, encap: 'ipopt' as const } } };
  };
  const runner = await Runner.start(lab.ns.lb, model([opt6('opt6vip', 'vip'), opt6('opt6real', 'real')]), 64, 'eth0');
  try {
    await runner.change('opt6vip', ADDR6.b1, 'up', 5000);
    await runner.change('opt6real', ADDR6.b1, 'up', 5000);
    t.is((await runner.snapshot()).snapshot.services.opt6vip.reals[ADDR6.b1].check, `tcp [${VIP6_OPT}]:${PORT} via ipopt to ${ADDR6.b1}:${TARGET_PORT}`);
    for (const name of ['tc_ingress_link', 'tc_egress_link']) rmSync(join(pinRoot, name));
    const down = await runner.change('opt6vip', ADDR6.b1, 'down', 5000);
    t.false(down.result.ok);
    await new Promise((r) => setTimeout(r, 800));
    t.is((await runner.snapshot()).snapshot.services.opt6real.reals[ADDR6.b1].state, 'up', 'the real itself answers');
    await backendDataPlane(); // re-attaches
    await runner.change('opt6vip', ADDR6.b1, 'up', 5000);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

const gueService = (name: string, vip: string, real: string, via: 'vip' | 'real') => {
  const s = service(name, { type: 'tcp', port: PORT, intervalMs: 200, timeoutMs: 150, rise: 2, fall: 2, via }, [real], PORT);
  return { ...s, spec: { ...s.spec, vip, dispatch: { mode: 'dsr' as const, encap: 'gue' as const } } };
};

test.serial('gue: the probe is tunnelled to the GUE port; a backend decapsulating at another port is down via vip, up via real; back when the ports agree', async (t) => {
  await backendDataPlane();
  const backend = await Backend.start(lab.ns.b1, 'tcp', PORT);
  const runner = await Runner.start(lab.ns.lb, model([gueService('guevip', VIP_GUE, ADDR.b1, 'vip'), gueService('guereal', VIP_GUE, ADDR.b1, 'real')]), 64, 'eth0');
  try {
    await runner.change('guevip', ADDR.b1, 'up', 5000);
    await runner.change('guereal', ADDR.b1, 'up', 5000);
    t.is((await runner.snapshot()).snapshot.services.guevip.reals[ADDR.b1].check, `tcp ${VIP_GUE}:${PORT} via gue to ${ADDR.b1}`);
    // the backend's decapsulation is what answers: its GUE count grew with the probes
    const before = await gueDecaps();
    await new Promise((r) => setTimeout(r, 600));
    t.true((await gueDecaps()).v4 > before.v4, 'the probes arrived as GUE and were decapsulated');
    // healthy, it stays up: several intervals later no check of it has gone down
    t.is((await runner.snapshot()).snapshot.services.guevip.reals[ADDR.b1].state, 'up');
    t.deepEqual(runner.pendingChanges().filter((e) => e.service === 'guevip' && e.to === 'down'), []);

    // the backend now decapsulates GUE at another port than the cluster's (Cluster spec.gue.port moved on one side
    // only): every client packet the lb nodes tunnel to 6080 is lost there, the real's own address still answers
    await backendDataPlane(DEFAULT_GUE_PORT + 1);
    const down = await runner.change('guevip', ADDR.b1, 'down', 5000);
    t.false(down.result.ok);
    await new Promise((r) => setTimeout(r, 800));
    t.is((await runner.snapshot()).snapshot.services.guereal.reals[ADDR.b1].state, 'up', 'the real itself answers');

    await backendDataPlane();
    const up = await runner.change('guevip', ADDR.b1, 'up', 5000);
    t.true(up.result.ok);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('IPv6 gue: the probe is tunnelled in outer IPv6 + UDP; a real whose decapsulation program is gone is down via vip, up via real', async (t) => {
  await backendDataPlane();
  const backend = await Backend.start(lab.ns.b1, 'tcp', PORT);
  const runner = await Runner.start(lab.ns.lb, model([gueService('gue6vip', VIP6_GUE, ADDR6.b1, 'vip'), gueService('gue6real', VIP6_GUE, ADDR6.b1, 'real')]), 64, 'eth0');
  try {
    await runner.change('gue6vip', ADDR6.b1, 'up', 5000);
    await runner.change('gue6real', ADDR6.b1, 'up', 5000);
    t.is((await runner.snapshot()).snapshot.services.gue6vip.reals[ADDR6.b1].check, `tcp [${VIP6_GUE}]:${PORT} via gue to ${ADDR6.b1}`);
    t.true((await gueDecaps()).v6 > 0, 'the probes arrived as GUE over IPv6 and were decapsulated');
    rmSync(join(pinRoot, 'tc_ingress_link'));
    const down = await runner.change('gue6vip', ADDR6.b1, 'down', 5000);
    t.false(down.result.ok);
    await new Promise((r) => setTimeout(r, 800));
    t.is((await runner.snapshot()).snapshot.services.gue6real.reals[ADDR6.b1].state, 'up', 'the real itself answers');
    await backendDataPlane(); // re-attaches
    await runner.change('gue6vip', ADDR6.b1, 'up', 5000);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

/** Backend 1's GUE decapsulation counters (decap_gue4, decap_gue6), as `gitlb run` reads them. */
async function gueDecaps(): Promise<{ v4: number; v6: number }> {
  const args = { pinRoot, stateFile: join(work, 'backend-vips.json'), desired: lastDesired! };
  const r = await nsExec(lab.ns.b1, [process.execPath, '--import', 'tsx', join(ROOT, 'test/lib/backend-lab-node.ts'), 'backend', JSON.stringify(args)], { cwd: ROOT, timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`backend counters in ${lab.ns.b1}: ${r.stderr}`);
  const counters = (JSON.parse(r.stdout.trim().split('\n').pop()!) as { counters: Record<string, number> }).counters;
  return { v4: counters.decap_gue4 ?? 0, v6: counters.decap_gue6 ?? 0 };
}
