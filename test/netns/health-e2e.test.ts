// End to end through the real XDP data plane: a lab (client, router, lb-1, three backends on one L2 segment, DSR),
// an lb process running the real data plane with a HealthService (test/health-lb-runner.ts), and a traffic client.
// A backend is killed while new connections arrive every few ms: new flows stop reaching it once the health check
// takes it out, and established connections to the other backends carry on without a reset.
import test from 'ava';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { labNs } from '../../src/lab/lab.js';
import { nsSpawn, stopChild, waitForPort } from '../../src/lab/netns.js';
import type { ChildProcess } from 'node:child_process';
import { startE2eLab } from '../health-lab.js';

const VIP = '203.0.113.10';
const BE = { 'be-1': '198.51.100.21', 'be-2': '198.51.100.22', 'be-3': '198.51.100.23' };
const interval = 200, fall = 3, rise = 2;

function writeConfig(dir: string): void {
  const put = (rel: string, text: string) => {
    mkdirSync(join(dir, rel, '..'), { recursive: true });
    writeFileSync(join(dir, rel), text);
  };
  put('cluster.yaml', `apiVersion: gitlb/v1\nkind: Cluster\nmetadata: { name: health-e2e }\nspec:\n  maglev: { tableSize: 1021, seed: JLfvgnHc2kaSUFaI }\n  conntrack: { maxEntries: 4096 }\n  status: { branch: gitlb-status }\n  rollback: { policy: manual }\n`);
  put('nodes/lb-1.yaml', `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: lb-1 }\nspec:\n  role: lb\n  interface: eth0\n  addresses: [198.51.100.11]\n  allowedVips: [203.0.113.0/24]\n`);
  for (const [name, addr] of Object.entries(BE)) {
    put(`nodes/${name}.yaml`, `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${name} }\nspec:\n  role: backend\n  interface: eth0\n  addresses: [${addr}]\n`);
  }
  put('services/web.yaml', `apiVersion: gitlb/v1\nkind: Service\nmetadata: { name: web }\nspec:\n  vip: ${VIP}\n  ports: [{ port: 80, protocol: TCP }]\n  dispatch: { mode: dsr, encap: l2 }\n` +
    `  healthCheck: { type: http, port: 80, path: /healthz, interval: ${interval}ms, timeout: 150ms, rise: ${rise}, fall: ${fall} }\n` +
    `  reals:\n${Object.values(BE).map((a) => `    - { address: ${a}, weight: 100 }\n`).join('')}`);
}

test('e2e: killed backend stops getting new flows once health applies its removal; other flows see no reset', async (t) => {
  const work = mkdtempSync(join(tmpdir(), `gitlb-health-e2e-${process.pid}-`));
  const configDir = join(work, 'config');
  writeConfig(configDir);
  const t0 = Date.now();
  const lab = await startE2eLab(configDir, work, 'health-e2e', VIP);
  const { state, lbOut, client, clientOut } = lab;
  t.log(`lab up in ${Date.now() - t0} ms`);
  let revived: ChildProcess | undefined;
  const ask = async (cmd: string, type: string, timeoutMs = 15_000) => {
    client.stdin!.write(cmd + '\n');
    return JSON.parse(await clientOut.next((l) => l.includes(`"type":"${type}"`), timeoutMs, type));
  };
  try {
    const first = JSON.parse(await lbOut.next((l) => l.includes('"type":"applied"') || l.includes('"type":"error"'), 60_000, 'first apply'));
    if (first.type === 'error') throw new Error(`lb runner: ${first.message}`);
    for (const a of Object.values(BE)) await lbOut.next((l) => l.includes('"type":"change"') && l.includes(a) && l.includes('"to":"up"'), 10_000, `${a} up`);

    t.log(`lb ready and all reals up ${Date.now() - t0} ms after start`);
    // Established connections, spread over the backends by Maglev.
    const opened = await ask('open 12', 'opened');
    t.true(opened.backends.every((b: string) => b.startsWith('be-')), `open: ${opened.backends}`);
    t.true(new Set(opened.backends).size === 3, `all three backends should get flows: ${opened.backends}`);

    // New flows every 5 ms for 2.5 s; be-2's server is killed 400 ms in. Meanwhile the kept connections send a
    // request every ~500 ms (also keeping them inside the server's 5 s keep-alive timeout).
    client.stdin!.write('burst 500 5\n');
    const probes: string[][] = [];
    let bursting = true;
    const prober = (async () => {
      while (bursting) {
        probes.push((await ask('probe', 'probed')).results);
        await new Promise((r) => setTimeout(r, 500));
      }
    })();
    await new Promise((r) => setTimeout(r, 400));
    const server = state.processes.find((p) => p.role === 'backend-server' && p.node === 'be-2')!;
    const killedAt = Date.now();
    process.kill(server.pid, 'SIGKILL');
    const applied = JSON.parse(await lbOut.next((l) => l.includes('"type":"applied"') && l.includes('-> down'), 10_000, 'apply after be-2 down'));
    const down = JSON.parse(lbOut.all().find((l) => l.includes('"type":"change"') && l.includes('"to":"down"')) ?? 'null') ?? applied;
    await clientOut.next((l) => l.includes('"type":"burst-done"'), 20_000, 'burst done');
    bursting = false;
    await prober;
    const flows = clientOut.all().filter((l) => l.includes('"type":"flow"')).map((l) => JSON.parse(l) as { start: number; end: number; result: string });

    const before = flows.filter((f) => f.start < killedAt - 20);
    const after = flows.filter((f) => f.start > applied.at + 5);
    const failed = flows.filter((f) => f.result.startsWith('error'));
    const lastFailedStart = Math.max(...failed.map((f) => f.start));
    t.log(`flows: ${flows.length} (before kill ${before.length}, failed ${failed.length}); kill -> down ${down.observedAt ? down.observedAt - killedAt : '?'} ms, ` +
      `kill -> applied ${applied.at - killedAt} ms, kill -> last new flow that hit be-2 ${lastFailedStart - killedAt} ms`);
    t.true(before.every((f) => !f.result.startsWith('error')), 'no failures before the kill');
    t.true(before.some((f) => f.result === 'be-2'), 'be-2 got new flows before the kill');
    t.true(failed.length > 0, 'flows to the dead backend fail until it is taken out (else the test proves nothing)');
    t.true(after.length > 50);
    t.deepEqual(after.filter((f) => f.result.startsWith('error') || f.result === 'be-2'), [], 'no new flow reaches be-2 after the apply');
    // Order, not timing (bench/health measures it): every failed new flow started before the apply took be-2 out.
    t.true(lastFailedStart <= applied.at + 5, `a new flow failed ${lastFailedStart - applied.at} ms after the apply`);
    t.regex(JSON.stringify(applied.services), /198\.51\.100\.22:down:0/);

    // Established connections to be-1 and be-3 carried on through the kill and the ring switch; those to be-2
    // died with it (after its first failure a connection stays failed).
    probes.push((await ask('probe', 'probed')).results);
    t.log(`kept connections over ${probes.length} probes: ${opened.backends.map((b: string, i: number) => `${b}->${[...new Set(probes.map((p) => p[i]))].join('|')}`).join(' ')}`);
    t.true(probes.length >= 3);
    opened.backends.forEach((b: string, i: number) => {
      const seen = probes.map((p) => p[i]!);
      if (b === 'be-2') t.true(seen.at(-1)!.startsWith('error'), `kept connection ${i} to dead be-2: ${seen}`);
      else t.deepEqual(seen, probes.map(() => b), `kept connection ${i} to ${b}`);
    });

    // be-2 comes back: up after rise checks, and it gets exactly its old ring entries back (same digest).
    const server2 = state.processes.find((p) => p.role === 'backend-server' && p.node === 'be-2')!;
    revived = nsSpawn(labNs(state, 'be-2'), server2.argv, { stdio: 'ignore' });
    await waitForPort(labNs(state, 'be-2'), 80);
    const back = JSON.parse(await lbOut.next((l) => l.includes('"type":"applied"') && l.includes('down -> up'), 10_000, 'apply after be-2 up'));
    const digestOf = (a: { services: { name: string; digest: string }[] }) => a.services.find((x) => x.name === 'web')!.digest;
    t.is(digestOf(back), digestOf(first));
    t.not(digestOf(applied), digestOf(first));
    client.stdin!.write('burst 100 5\n');
    await clientOut.next((l) => l.includes('"type":"burst-done"'), 20_000, 'second burst done');
    const again = clientOut.all().filter((l) => l.includes('"type":"flow"')).map((l) => JSON.parse(l) as { start: number; result: string })
      .filter((f) => f.start > back.at);
    t.true(again.some((f) => f.result === 'be-2'), 'be-2 gets new flows again');
    t.deepEqual(again.filter((f) => f.result.startsWith('error')), []);
  } finally {
    if (revived) await stopChild(revived, 1000);
    await lab.stop();
  }
});
