// Detection latency of health checks against real servers in namespaces: kill a backend (SIGKILL) and time the
// `down` flip; restart it and time the `up` flip. Prints medians over several rounds for tcp and http checks.
// Usage: bench/health/run [rounds]   (root; creates and removes glb<pid>-* namespaces)
import { readFileSync } from 'node:fs';
import { createNetns, vethPair, cleanupRun, nsName, run, waitForTcp } from '../../src/lab/netns.js';
import { Backend, Runner, model, service } from '../../test/health-lab.js';

const rounds = Number(process.argv[2] ?? 5);
const interval = 200, timeout = 150, rise = 2, fall = 3;
const LB = nsName('blb'), BE = nsName('bbe'), ADDR = '198.51.100.2';

function stats(xs: number[]): string {
  const s = [...xs].sort((a, b) => a - b);
  const med = s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  return `median ${med} ms, min ${s[0]} ms, max ${s[s.length - 1]} ms (n=${s.length})`;
}

async function measure(kind: 'tcp' | 'http', port: number): Promise<void> {
  let backend = await Backend.start(BE, kind, port);
  await waitForTcp(LB, ADDR, port);
  const hc = { type: kind, port, path: '/', intervalMs: interval, timeoutMs: timeout, rise, fall };
  const runner = await Runner.start(LB, model([service('svc', hc, [ADDR])]));
  const downs: number[] = [], ups: number[] = [];
  try {
    await runner.change('svc', ADDR, 'up', 5000);
    for (let i = 0; i < rounds; i++) {
      await new Promise((r) => setTimeout(r, Math.random() * interval)); // random phase against the check timer
      const killedAt = await backend.kill();
      downs.push(Date.parse((await runner.change('svc', ADDR, 'down', 10_000)).at) - killedAt);
      backend = await Backend.start(BE, kind, port);
      ups.push(Date.parse((await runner.change('svc', ADDR, 'up', 10_000)).at) - backend.startedAt);
    }
  } finally {
    await runner.stop();
    await backend.stop();
  }
  console.log(`${kind}  kill -> down:      ${stats(downs)}   [expected (fall-1)..fall x interval = ${(fall - 1) * interval}..${fall * interval} ms]`);
  console.log(`${kind}  listening -> up:   ${stats(ups)}   [expected (rise-1)..rise x interval = ${(rise - 1) * interval}..${rise * interval} ms]`);
}

/** Checker cost: many targets against one live server; CPU of the checker process from /proc. */
async function scale(targets: number, intervalMs: number, seconds: number): Promise<void> {
  const port = 8203;
  const backend = await Backend.start(BE, 'tcp', port);
  await waitForTcp(LB, ADDR, port);
  const services = Array.from({ length: targets }, (_, i) =>
    service(`s${String(i).padStart(4, '0')}`, { type: 'tcp', port, intervalMs, timeoutMs: 150, rise, fall }, [ADDR]));
  const runner = await Runner.start(LB, model(services), 64);
  try {
    await new Promise((r) => setTimeout(r, 1500)); // let the first round spread out
    const cpu0 = cpuMs(runner.child.pid!), s0 = (await runner.snapshot()).snapshot.stats.checks, t0 = Date.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const cpu1 = cpuMs(runner.child.pid!), snap = await runner.snapshot(), t1 = Date.now();
    const checks = snap.snapshot.stats.checks - s0;
    const perSec = checks / ((t1 - t0) / 1000);
    console.log(`scale  ${targets} tcp targets @ ${intervalMs} ms: ${perSec.toFixed(0)} checks/s (ideal ${(targets * 1000 / intervalMs).toFixed(0)}), ` +
      `checker CPU ${((cpu1 - cpu0) / (t1 - t0) * 100).toFixed(1)}% of a core, ${((cpu1 - cpu0) * 1000 / checks).toFixed(0)} µs CPU per check, ` +
      `peak in flight ${snap.snapshot.stats.peakInFlight}, snapshot reply ${snap.replyMs.toFixed(2)} ms`);
  } finally {
    await runner.stop();
    await backend.stop();
  }
}

/** Consensus: three lb namespaces check one backend; the quorum (2 of 3) is reached when the 2nd node flips. */
async function quorum(port: number): Promise<void> {
  const LBS = ['qlb1', 'qlb2', 'qlb3'].map(nsName);
  for (const [i, ns] of LBS.entries()) {
    await createNetns(ns);
    await vethPair({ ns, name: 'veth-lb', addrs: [`192.0.2.${31 + i}/24`] }, { ns: BE, name: `veth-q${i}`, addrs: [] });
  }
  // The three lb links meet on a bridge in the backend namespace, on a subnet of their own.
  await run(['ip', '-n', BE, 'link', 'add', 'qbr', 'type', 'bridge']);
  for (let i = 0; i < 3; i++) await run(['ip', '-n', BE, 'link', 'set', `veth-q${i}`, 'master', 'qbr']);
  await run(['ip', '-n', BE, 'addr', 'add', '192.0.2.3/24', 'dev', 'qbr']);
  await run(['ip', '-n', BE, 'link', 'set', 'qbr', 'up']);
  const addr = '192.0.2.3'; // its own subnet: the bridge must not share a prefix with veth-be
  let backend = await Backend.start(BE, 'tcp', port);
  for (const ns of LBS) await waitForTcp(ns, addr, port);
  const m = model([service('svc', { type: 'tcp', port, intervalMs: interval, timeoutMs: timeout, rise, fall }, [addr])], ['qlb1', 'qlb2', 'qlb3'], { mode: 'consensus' });
  const runners = await Promise.all(LBS.map((ns) => Runner.start(ns, m)));
  const firsts: number[] = [], quorums: number[] = [], lasts: number[] = [];
  try {
    await Promise.all(runners.map((r) => r.change('svc', addr, 'up', 5000)));
    for (let i = 0; i < rounds; i++) {
      await new Promise((r) => setTimeout(r, Math.random() * interval));
      const killedAt = await backend.kill();
      const downs = (await Promise.all(runners.map((r) => r.change('svc', addr, 'down', 10_000)))).map((d) => Date.parse(d.at) - killedAt).sort((a, b) => a - b);
      firsts.push(downs[0]!); quorums.push(downs[1]!); lasts.push(downs[2]!);
      backend = await Backend.start(BE, 'tcp', port);
      await Promise.all(runners.map((r) => r.change('svc', addr, 'up', 10_000)));
    }
  } finally {
    await Promise.all(runners.map((r) => r.stop()));
    await backend.stop();
  }
  console.log(`consensus (3 lb nodes) kill -> first node down: ${stats(firsts)}`);
  console.log(`consensus (3 lb nodes) kill -> quorum down (2nd): ${stats(quorums)}   [+ status push and fetch, not measured here]`);
  console.log(`consensus (3 lb nodes) kill -> last node down:  ${stats(lasts)}`);
}

function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime + stime, in clock ticks of 10 ms
}

try {
  await createNetns(LB);
  await createNetns(BE);
  await vethPair({ ns: LB, name: 'veth-lb', addrs: ['198.51.100.1/24'] }, { ns: BE, name: 'veth-be', addrs: [`${ADDR}/24`] });
  console.log(`health detection, interval ${interval} ms, timeout ${timeout} ms, rise ${rise}, fall ${fall}, ${rounds} rounds`);
  await measure('tcp', 8201);
  await measure('http', 8202);
  await quorum(8204);
  await scale(500, 1000, 5);
} finally {
  await cleanupRun();
}
