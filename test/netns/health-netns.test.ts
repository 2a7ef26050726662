// Health checks against real servers: an lb namespace running a real HealthChecker (test/health-runner.ts) and a
// backend namespace running real TCP/HTTP servers (test/health-backend.ts), joined by a veth pair.
import test from 'ava';
import { createNetns, vethPair, addAddrs, cleanupRun, nsName, nsExec, waitForTcp } from '../../src/lab/netns.js';
import { Backend, Runner, model, service } from '../health-lab.js';

const LB = nsName('hlb');
const BE = nsName('hbe');
const BE_ADDR = '198.51.100.2';
/** 20 more backend addresses for the concurrency test. */
const EXTRA = Array.from({ length: 20 }, (_, i) => `198.51.100.${10 + i}`);
/** On the veth's subnet but held by nobody: ARP never resolves, so a connect hangs until our timeout. */
const SILENT = '198.51.100.99';
const BE_ADDR6 = '2001:db8:1::2';

test.before(async () => {
  await createNetns(LB);
  await createNetns(BE);
  await vethPair({ ns: LB, name: 'veth-lb', addrs: ['198.51.100.1/24', '2001:db8:1::1/64'] }, { ns: BE, name: 'veth-be', addrs: [`${BE_ADDR}/24`, `${BE_ADDR6}/64`] });
  await addAddrs(BE, 'veth-be', EXTRA.map((a) => `${a}/32`));
});

test.after.always(async () => {
  await cleanupRun();
});

test.serial('tcp: a killed backend goes down on refused checks, a restarted one comes up again', async (t) => {
  const interval = 200, rise = 2, fall = 3;
  let backend = await Backend.start(BE, 'tcp', 8001);
  await waitForTcp(LB, BE_ADDR, 8001);
  const runner = await Runner.start(LB, model([service('web', { type: 'tcp', port: 8001, intervalMs: interval, timeoutMs: 150, rise, fall }, [BE_ADDR])]));
  try {
    await runner.change('web', BE_ADDR, 'up', 3000);

    const killedAt = await backend.kill();
    const down = await runner.change('web', BE_ADDR, 'down', 5000);
    const detect = Date.parse(down.at) - killedAt;
    t.log(`tcp detection (kill -> down): ${detect} ms; bound fall x interval = ${fall * interval} ms (+1 interval phase)`);
    // Order and outcome (timing is bench/health's): down came after the kill, from refused connections.
    t.true(detect >= 0, `down before the kill: ${detect} ms`);
    t.is(down.result.detail, 'ECONNREFUSED');

    backend = await Backend.start(BE, 'tcp', 8001);
    const up = await runner.change('web', BE_ADDR, 'up', 5000);
    const recover = Date.parse(up.at) - backend.startedAt;
    t.log(`tcp recovery (listening -> up): ${recover} ms; bound rise x interval = ${rise * interval} ms`);
    t.true(recover >= 0, `up before the backend listened: ${recover} ms`);

    const { snapshot, observations } = await runner.snapshot();
    const real = snapshot.services.web.reals[BE_ADDR];
    t.is(real.state, 'up');
    t.is(real.since, up.at);
    t.is(real.check, `tcp ${BE_ADDR}:8001`);
    t.true(real.lastCheck.ok);
    t.deepEqual(observations, { web: { [BE_ADDR]: { up: true, since: up.at } } });
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('http: expected status ranges, timeouts on a hung server and on a silent address, IPv6 reals', async (t) => {
  const backend = await Backend.start(BE, 'http', 8002);
  await waitForTcp(LB, BE_ADDR, 8002);
  const hc = { type: 'http' as const, port: 8002, intervalMs: 150, timeoutMs: 200, rise: 1, fall: 2 };
  const m = model([
    service('ok-204', { ...hc, path: '/status/204' }, [BE_ADDR]),
    service('redirect-302', { ...hc, path: '/status/302' }, [BE_ADDR]),
    service('err-503', { ...hc, path: '/status/503' }, [BE_ADDR]),
    service('strict-200', { ...hc, path: '/status/204', expectStatus: { min: 200, max: 200 } }, [BE_ADDR]),
    service('accept-503', { ...hc, path: '/status/503', expectStatus: { min: 500, max: 503 } }, [BE_ADDR]),
    service('hang', { ...hc, path: '/hang' }, [BE_ADDR]),
    service('silent', { ...hc, type: 'tcp' }, [SILENT]),
    service('v6-http', { ...hc, path: '/status/200' }, [BE_ADDR6]),
    service('v6-tcp', { ...hc, type: 'tcp' }, [BE_ADDR6]),
  ]);
  const runner = await Runner.start(LB, m);
  try {
    await Promise.all([
      runner.change('ok-204', BE_ADDR, 'up', 3000),
      runner.change('redirect-302', BE_ADDR, 'up', 3000),
      runner.change('accept-503', BE_ADDR, 'up', 3000),
      runner.change('err-503', BE_ADDR, 'down', 3000),
      runner.change('strict-200', BE_ADDR, 'down', 3000),
      runner.change('hang', BE_ADDR, 'down', 3000),
      runner.change('silent', SILENT, 'down', 3000),
      runner.change('v6-http', BE_ADDR6, 'up', 3000),
      runner.change('v6-tcp', BE_ADDR6, 'up', 3000),
    ]);
    const { snapshot } = await runner.snapshot();
    const last = (s: string, a = BE_ADDR) => snapshot.services[s].reals[a].lastCheck;
    t.is(last('ok-204').detail, 'HTTP 204');
    t.is(last('redirect-302').detail, 'HTTP 302');
    t.is(last('err-503').detail, 'HTTP 503');
    t.false(last('err-503').ok);
    t.is(last('strict-200').detail, 'HTTP 204');
    t.false(last('strict-200').ok);
    t.true(last('accept-503').ok);
    t.is(last('hang').detail, 'timeout after 200 ms');
    t.true(last('hang').durationMs >= 195, `the timeout fired early: ${last('hang').durationMs} ms`);
    t.is(last('silent', SILENT).detail, 'timeout after 200 ms');
    t.is(snapshot.services['hang'].reals[BE_ADDR].check, `http GET ${BE_ADDR}:8002/hang`);
    t.is(last('v6-http', BE_ADDR6).detail, 'HTTP 200');
    t.is(snapshot.services['v6-http'].reals[BE_ADDR6].check, `http GET [${BE_ADDR6}]:8002/status/200`);
    t.is(last('v6-tcp', BE_ADDR6).detail, 'connected');
    // Every real of err-503 is down: fail-open (the default) keeps it and says so.
    t.true(snapshot.services['err-503'].failOpen);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('hysteresis: a real alternating ok/fail never churns; rise=fall=1 does', async (t) => {
  const backend = await Backend.start(BE, 'http', 8003);
  await waitForTcp(LB, BE_ADDR, 8003);
  // A generous timeout: a cold process's first request can be slow, and a timeout would break the strict alternation.
  const hc = { type: 'http' as const, port: 8003, intervalMs: 100, timeoutMs: 1000 };
  const runner = await Runner.start(LB, model([
    service('damped', { ...hc, path: '/flap/damped', rise: 2, fall: 2 }, [BE_ADDR]),
    service('twitchy', { ...hc, path: '/flap/twitchy', rise: 1, fall: 1 }, [BE_ADDR]),
  ]));
  try {
    await new Promise((r) => setTimeout(r, 2000));
    const { snapshot } = await runner.snapshot();
    const changes = runner.pendingChanges();
    const damped = changes.filter((c) => c.service === 'damped');
    const twitchy = changes.filter((c) => c.service === 'twitchy');
    t.log(`changes in 2 s: damped (rise=fall=2) ${damped.length}, twitchy (rise=fall=1) ${twitchy.length}`);
    t.deepEqual(damped.map((c) => `${c.from}->${c.to} (${c.result.detail})`), ['unknown->up (HTTP 200)']);
    t.is(snapshot.services.damped.reals[BE_ADDR].state, 'up');
    t.true(twitchy.length >= 4, `twitchy flipped only ${twitchy.length} times`);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('bounded concurrency: never more than maxInFlight probes at the server; event loop stays responsive', async (t) => {
  const backend = await Backend.start(BE, 'http', 8004);
  await waitForTcp(LB, EXTRA[0]!, 8004);
  const maxInFlight = 4;
  const runner = await Runner.start(LB, model([
    service('slow', { type: 'http', port: 8004, path: '/slow/250', intervalMs: 500, timeoutMs: 1000, rise: 1, fall: 3 }, EXTRA),
  ]), maxInFlight);
  try {
    await Promise.all(EXTRA.map((a) => runner.change('slow', a, 'up', 5000)));
    const { snapshot, replyMs } = await runner.snapshot();
    const peaks = backend.lines.all().filter((l) => l.startsWith('peak ')).map((l) => Number(l.slice(5)));
    const serverPeak = Math.max(...peaks);
    t.log(`server-side peak concurrent checks: ${serverPeak} (limit ${maxInFlight}); checker peak ${snapshot.stats.peakInFlight}; snapshot reply ${replyMs.toFixed(2)} ms with checks queued`);
    t.true(serverPeak <= maxInFlight, `server saw ${serverPeak} concurrent checks`);
    t.true(serverPeak >= 2, 'checks did not run concurrently at all');
    t.true(snapshot.stats.peakInFlight <= maxInFlight);
    // The snapshot is answered while probes are still in flight: it never waits for a check.
    t.true(snapshot.stats.inFlight > 0, `snapshot answered with ${snapshot.stats.inFlight} checks in flight`);
    t.is(Object.keys(snapshot.services.slow.reals).length, 20);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('post-apply gate: a revision that breaks health checks fails it, a small loss within the share passes', async (t) => {
  const backend = await Backend.start(BE, 'tcp', 8005);
  await waitForTcp(LB, EXTRA[0]!, 8005);
  const four = EXTRA.slice(0, 4);
  const hc = { type: 'tcp' as const, port: 8005, intervalMs: 100, timeoutMs: 150, rise: 1, fall: 2 };
  const v1 = model([service('web', hc, four)]);
  const wrongPort = model([service('web', { ...hc, port: 8006 }, four)]);
  const oneSilent = model([service('web', hc, [...four.slice(0, 3), SILENT])]);
  const runner = await Runner.start(LB, v1);
  try {
    const judge = async (after: typeof v1, share: number) => {
      runner.child.stdin!.write(`judge ${JSON.stringify({ before: v1, after, share })}\n`);
      return JSON.parse(await runner.lines.next((l) => l.includes('"type":"judge"'), 15_000, 'gate result'));
    };
    const broken = await judge(wrongPort, 0.5);
    t.false(broken.pass);
    t.is(broken.reason, 'web lost 100.0% of its healthy table share (100.0% -> 0.0% of entries on healthy reals); limit 50.0%');
    const small = await judge(oneSilent, 0.3);
    t.true(small.pass, small.reason);
    t.regex(small.reason, /^largest loss web 2[0-9]\.[0-9]% within limit 30\.0%$/, 'one of four reals silent: about a quarter of the table');
    const strict = await judge(oneSilent, 0.2);
    t.false(strict.pass);
    t.log(`gate times: broken ${broken.tookMs} ms, one silent real ${small.tookMs} ms`);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('update: unchanged checks keep state and rhythm, changed checks start over, removed ones stop', async (t) => {
  const backend = await Backend.start(BE, 'http', 8007);
  await waitForTcp(LB, BE_ADDR, 8007);
  const hc = { type: 'http' as const, port: 8007, intervalMs: 100, timeoutMs: 300, rise: 1, fall: 2 };
  const [r1, r2, r3] = EXTRA;
  const v1 = model([service('keep', { ...hc, path: '/status/200' }, [r1!, r2!]), service('retune', { ...hc, path: '/status/200' }, [r3!])]);
  const runner = await Runner.start(LB, v1);
  try {
    const keepUp = await runner.change('keep', r1!, 'up', 3000);
    await runner.change('retune', r3!, 'up', 3000);
    const before = (await runner.snapshot()).snapshot;
    // v2: `keep` loses r2 and changes only rise/fall; `retune` now checks a path that answers 503.
    await runner.update(model([service('keep', { ...hc, path: '/status/200', fall: 5 }, [r1!]), service('retune', { ...hc, path: '/status/503' }, [r3!])]));
    const down = await runner.change('retune', r3!, 'down', 3000);
    t.is(down.from, 'unknown', 'a changed check starts from unknown');
    await new Promise((r) => setTimeout(r, 300));
    const after = (await runner.snapshot()).snapshot;
    t.is(after.services.keep.reals[r1!].since, keepUp.at, 'unchanged check kept its state');
    t.true(Date.parse(after.services.keep.reals[r1!].lastCheck.at) > Date.parse(before.services.keep.reals[r1!].lastCheck.at), 'and kept checking');
    t.deepEqual(Object.keys(after.services.keep.reals), [r1]);
    t.is(after.stats.targets, 2);
    t.deepEqual(runner.pendingChanges().filter((c) => c.service === 'keep' && c.address === r1), []);
  } finally {
    await runner.stop();
    await backend.stop();
  }
});

test.serial('passive evidence: a suspect real that answers stays up; a silent one is down after one probe that gives up on the handshake', async (t) => {
  // The default timings (a 1 s timeout, fall 3): without the evidence a silent real would take three timed-out probes.
  const backend = await Backend.start(BE, 'tcp', 8008);
  const [live, silent] = EXTRA;
  await waitForTcp(LB, live!, 8008);
  const hc = { type: 'tcp' as const, port: 8008, intervalMs: 2000, timeoutMs: 1000, rise: 2, fall: 3 };
  const runner = await Runner.start(LB, model([service('live', hc, [live!]), service('silent', hc, [silent!])]));
  try {
    await runner.change('live', live!, 'up', 5000);
    await runner.change('silent', silent!, 'up', 5000);
    const checksOf = async (svc: string, a: string) => (await runner.snapshot()).snapshot.services[svc].reals[a].lastCheck.at as string;

    // benign: the evidence moves one probe forward, the real answers it and stays up
    const before = await checksOf('live', live!);
    t.is(await runner.suspect(live!), 1);
    t.is(await runner.suspect(live!), 0, 'at most one probe moved forward per interval');
    for (let i = 0; i < 50 && (await checksOf('live', live!)) === before; i++) await new Promise((r) => setTimeout(r, 20));
    const after = (await runner.snapshot()).snapshot.services.live.reals[live!];
    t.not(after.lastCheck.at, before, 'the suspect real was probed');
    t.true(after.lastCheck.ok);
    t.is(after.state, 'up');

    // the silent host: every packet to it is dropped on arrival
    for (const args of [['add', 'table', 'inet', 'glbhole'], ['add', 'chain', 'inet', 'glbhole', 'in', '{ type filter hook input priority 0; }'],
      ['add', 'rule', 'inet', 'glbhole', 'in', 'ip', 'daddr', silent!, 'tcp', 'dport', '8008', 'drop']]) {
      const r = await nsExec(BE, ['nft', ...args]);
      t.is(r.code, 0, r.stderr);
    }
    await runner.suspect(silent!); // 1, or 0 when a regular probe had just begun: then that one is hurried
    const down = await runner.change('silent', silent!, 'down', 5000);
    t.is(down.from, 'up');
    t.is(down.result.detail, 'no answer to connect within 250 ms (suspect)', 'the probe gave up on its handshake, not at the check timeout');
    const s = (await runner.snapshot()).snapshot;
    t.is(s.services.live.reals[live!].state, 'up', 'the evidence against one real touched no other');
    t.deepEqual(runner.pendingChanges().filter((c) => c.service === 'live'), []);
  } finally {
    await nsExec(BE, ['nft', 'delete', 'table', 'inet', 'glbhole']);
    await runner.stop();
    await backend.stop();
  }
});

test.serial('passive evidence while a probe of a silent real is running: that probe gets the handshake deadline from then on', async (t) => {
  const backend = await Backend.start(BE, 'tcp', 8009);
  const silent = EXTRA[2]!;
  await waitForTcp(LB, silent, 8009);
  // a timeout longer than the interval: once the real is silent a probe is (almost) always in flight
  const hc = { type: 'tcp' as const, port: 8009, intervalMs: 300, timeoutMs: 5000, rise: 2, fall: 3 };
  const runner = await Runner.start(LB, model([service('slow-silent', hc, [silent])]));
  try {
    await runner.change('slow-silent', silent, 'up', 5000);
    for (const args of [['add', 'table', 'inet', 'glbhole2'], ['add', 'chain', 'inet', 'glbhole2', 'in', '{ type filter hook input priority 0; }'],
      ['add', 'rule', 'inet', 'glbhole2', 'in', 'ip', 'daddr', silent, 'tcp', 'dport', '8009', 'drop']]) {
      const r = await nsExec(BE, ['nft', ...args]);
      t.is(r.code, 0, r.stderr);
    }
    await new Promise((r) => setTimeout(r, 700)); // the probe begun after the drop is waiting for its 5 s timeout
    t.is(await runner.suspect(silent), 1, 'the running probe was hurried (no second probe started)');
    const down = await runner.change('slow-silent', silent, 'down', 8000);
    t.is(down.result.detail, 'no answer to connect within 250 ms (suspect)');
    t.true(down.result.durationMs < hc.timeoutMs, `it ended before its own ${hc.timeoutMs} ms timeout (${down.result.durationMs} ms)`);
  } finally {
    await nsExec(BE, ['nft', 'delete', 'table', 'inet', 'glbhole2']);
    await runner.stop();
    await backend.stop();
  }
});
