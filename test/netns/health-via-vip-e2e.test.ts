// healthCheck.via: vip end to end through the real XDP data plane (the lab of test/netns/health-e2e.test.ts: client,
// router, lb-1, three DSR l2 backends holding the VIP on lo). be-2 loses the VIP from lo while its server keeps
// running on its own address: a via: real check would keep it up while every new flow Maglev gives it fails. With
// via: vip it is marked down and taken out of the table, and new flows stop failing.
import test from 'ava';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { labNs } from '../../src/lab/lab.js';
import { nsExec } from '../../src/lab/netns.js';
import { startE2eLab } from '../health-lab.js';

const VIP = '203.0.113.10';
const BE = { 'be-1': '198.51.100.21', 'be-2': '198.51.100.22', 'be-3': '198.51.100.23' };

function writeConfig(dir: string): void {
  const put = (rel: string, text: string) => {
    mkdirSync(join(dir, rel, '..'), { recursive: true });
    writeFileSync(join(dir, rel), text);
  };
  put('cluster.yaml', `apiVersion: gitlb/v1\nkind: Cluster\nmetadata: { name: via-vip-e2e }\nspec:\n  maglev: { tableSize: 1021, seed: JLfvgnHc2kaSUFaI }\n  conntrack: { maxEntries: 4096 }\n  status: { branch: gitlb-status }\n  rollback: { policy: manual }\n`);
  put('nodes/lb-1.yaml', `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: lb-1 }\nspec:\n  role: lb\n  interface: eth0\n  addresses: [198.51.100.11]\n  allowedVips: [203.0.113.0/24]\n`);
  for (const [name, addr] of Object.entries(BE)) {
    put(`nodes/${name}.yaml`, `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${name} }\nspec:\n  role: backend\n  interface: eth0\n  addresses: [${addr}]\n`);
  }
  put('services/web.yaml', `apiVersion: gitlb/v1\nkind: Service\nmetadata: { name: web }\nspec:\n  vip: ${VIP}\n  ports: [{ port: 80, protocol: TCP }]\n  dispatch: { mode: dsr, encap: l2 }\n` +
    `  healthCheck: { type: http, path: /healthz, via: vip, interval: 200ms, timeout: 150ms, rise: 2, fall: 2 }\n` +
    `  reals:\n${Object.values(BE).map((a) => `    - { address: ${a}, weight: 100 }\n`).join('')}`);
}

test('e2e via: vip: a backend that lost its VIP is taken out of the table; new flows stop failing', async (t) => {
  const work = mkdtempSync(join(tmpdir(), `gitlb-via-vip-e2e-${process.pid}-`));
  const configDir = join(work, 'config');
  writeConfig(configDir);
  const lab = await startE2eLab(configDir, work, 'via-vip-e2e', VIP);
  const { state, lbOut, client, clientOut } = lab;
  const burst = async (n: number) => {
    const seen = clientOut.all().length;
    client.stdin!.write(`burst ${n} 5\n`);
    await clientOut.next((l) => l.includes('"type":"burst-done"'), 20_000, 'burst done');
    return clientOut.all().slice(seen).filter((l) => l.includes('"type":"flow"')).map((l) => JSON.parse(l) as { start: number; result: string });
  };
  try {
    const first = JSON.parse(await lbOut.next((l) => l.includes('"type":"applied"') || l.includes('"type":"error"'), 60_000, 'first apply'));
    if (first.type === 'error') throw new Error(`lb runner: ${first.message}`);
    for (const a of Object.values(BE)) await lbOut.next((l) => l.includes('"type":"change"') && l.includes(a) && l.includes('"to":"up"'), 10_000, `${a} up via vip`);
    const healthy = await burst(60);
    t.deepEqual(healthy.filter((f) => f.result.startsWith('error')), []);
    t.true(healthy.some((f) => f.result === 'be-2'), 'be-2 serves the VIP before');

    await nsExec(labNs(state, 'be-2'), ['ip', 'addr', 'del', `${VIP}/32`, 'dev', 'lo'], { timeoutMs: 10_000 });
    const applied = JSON.parse(await lbOut.next((l) => l.includes('"type":"applied"') && l.includes('-> down'), 10_000, 'apply after be-2 down'));
    t.regex(applied.why, /web\/198\.51\.100\.22 up -> down/);
    t.regex(JSON.stringify(applied.services), /198\.51\.100\.22:down:0/);
    const after = await burst(60);
    t.deepEqual(after.filter((f) => f.result.startsWith('error') || f.result === 'be-2'), [], 'no new flow reaches be-2 once it is out');
    t.true(after.length === 60);
  } finally {
    await lab.stop();
  }
});
