// The BGP announcer against a real BIRD 2 (in a network namespace of its own, no peers reachable): it writes the
// generated file, reloads BIRD only on a change, and BIRD's own tables show what is announced — through a drain,
// all reals down, a decommission, and the withdraw-on-exit path. Nothing is mocked; the XDP check is the only input
// given directly (the data plane is not the subject here).
import test from 'ava';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BgpAnnouncer } from '../../src/reconciler/bgp/announcer.js';
import { renderDesiredState } from '../../src/render/desired.js';
import type { ConfigModel } from '../../src/render/model.js';
import { cleanupRun, createNetns, exec, nsName, nsSpawn, sleep } from '../../src/lab/netns.js';
import { goodModel, PEERS } from '../helpers/bgp-model.js';

const dir = mkdtempSync(join(tmpdir(), 'gitlb-announcer-'));
const sock = join(dir, 'bird.ctl');
const generated = join(dir, 'gitlb.conf');
let ns = '';

test.before(async () => {
  ns = nsName('bird');
  await createNetns(ns);
  await exec(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  writeFileSync(join(dir, 'bird.conf'), `log stderr all;\ninclude "${generated}";\n`);
  writeFileSync(generated, 'router id 198.51.100.11;\nprotocol device gitlb_device {\n}\n');
  nsSpawn(ns, ['bird', '-f', '-c', join(dir, 'bird.conf'), '-s', sock], { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    if ((await exec(['birdc', '-s', sock, 'show', 'status'], { timeoutMs: 2000 })).stdout.includes('up and running')) return;
    await sleep(100);
  }
  throw new Error('BIRD did not start');
});

test.after.always(async () => {
  await cleanupRun();
  rmSync(dir, { recursive: true, force: true });
});

/** The routes BIRD holds from gitlb's static protocols, as BIRD itself reports them. */
async function birdRoutes(): Promise<string[]> {
  const out: string[] = [];
  for (const p of ['gitlb_vip4', 'gitlb_vip6']) {
    const r = await exec(['birdc', '-s', sock, 'show', 'route', 'protocol', p], { timeoutMs: 5000 });
    out.push(...[...r.stdout.matchAll(/^([0-9a-f.:]+\/\d+)\s/gm)].map((m) => m[1]!));
  }
  return out.sort();
}

test.serial('announce, drain, all reals down, decommission, withdraw on exit: BIRD holds exactly the announced VIPs', async (t) => {
  let model: ConfigModel | null = goodModel();
  let down: string[] = [];
  const desired = () => (model && model.nodes.some((n) => n.metadata.name === 'lb-1') ? renderDesiredState(model, 'lb-1') : null);
  const a = new BgpAnnouncer({
    node: 'lb-1',
    configFile: generated,
    birdSocket: sock,
    interface: 'lo',
    applied: () => ({ model, desired: desired() }),
    servicesDown: () => down,
    xdpAttached: async () => true,
  });
  const reloads = () => (a.status().bird.reloadedAt ?? '');

  await a.sync();
  t.is(a.status().bird.error, undefined);
  t.deepEqual(await birdRoutes(), ['2001:db8:ff::10/128', '203.0.113.10/32', '203.0.113.20/32']);
  t.is(statSync(generated).mode & 0o777, 0o600, 'the file may hold passwords');
  t.regex(readFileSync(generated, 'utf8'), /password "s3cret";/);
  const first = reloads();
  await sleep(5);
  await a.sync();
  t.is(reloads(), first, 'nothing changed: no reload');

  down = ['api'];
  await a.sync();
  t.deepEqual(await birdRoutes(), ['2001:db8:ff::10/128', '203.0.113.10/32']);
  t.deepEqual(a.status().vips.find((v) => v.vip === '203.0.113.20'), { vip: '203.0.113.20', services: ['api'], state: 'withdrawn: no healthy real' });
  down = [];

  model = goodModel(PEERS + '  state: drain\n');
  await a.sync();
  t.deepEqual(await birdRoutes(), []);
  t.true(a.status().vips.every((v) => v.state === 'withdrawn: draining'));

  model = goodModel();
  await a.sync();
  t.is((await birdRoutes()).length, 3);

  // Decommission: the revision no longer names lb-1. Its sessions stay configured, nothing is announced.
  const m = goodModel();
  model = { ...m, nodes: m.nodes.filter((n) => n.metadata.name !== 'lb-1') };
  await a.sync();
  t.deepEqual(await birdRoutes(), []);
  t.true(a.status().vips.every((v) => v.state === 'withdrawn: decommissioned'));
  t.regex(readFileSync(generated, 'utf8'), /protocol bgp gitlb_peer_198_51_100_1 /);

  model = goodModel();
  await a.sync();
  t.is((await birdRoutes()).length, 3);
  await a.withdrawAll();
  t.deepEqual(await birdRoutes(), []);
  t.true(a.status().vips.every((v) => v.state === 'withdrawn: stopping'));
});

test.serial('BIRD not answering on its socket: reported as an error, nothing counts as reloaded', async (t) => {
  const m = goodModel();
  const a = new BgpAnnouncer({ node: 'lb-1', configFile: join(dir, 'other.conf'), birdSocket: join(dir, 'nobody.ctl'),
    applied: () => ({ model: m, desired: renderDesiredState(m, 'lb-1') }), xdpAttached: async () => true });
  await a.sync();
  t.regex(a.status().bird.error ?? '', /^birdc configure: .*nobody\.ctl/);
  t.is(a.status().bird.reloadedAt, null);
  // The status still says what the node would announce.
  t.true(a.status().vips.every((v) => v.state === 'announced'));
});

test.serial('the generated file (it holds session passwords) is 0600 even when a stale .tmp with a wider mode is left over', async (t) => {
  const m = goodModel();
  const file = join(dir, 'leftover.conf');
  writeFileSync(`${file}.tmp`, 'stale\n', { mode: 0o644 });
  const a = new BgpAnnouncer({ node: 'lb-1', configFile: file, birdSocket: join(dir, 'nobody.ctl'),
    applied: () => ({ model: m, desired: renderDesiredState(m, 'lb-1') }), xdpAttached: async () => true });
  await a.sync();
  t.regex(readFileSync(file, 'utf8'), /password "s3cret"/);
  t.is(statSync(file).mode & 0o777, 0o600);
});

test.serial('BIRD refusing the file: its real reply reaches the status as one bounded line, with no password in it', async (t) => {
  // A second BIRD whose main configuration has its own device protocol, so it refuses gitlb's file (which has one
  // too) with a real error naming the file. The file lives under a directory named after the session password,
  // standing in for BIRD quoting back a part of the file that holds it.
  const sub = join(dir, 'cfg-s3cret');
  mkdirSync(sub);
  const file = join(sub, 'gitlb.conf');
  const sock2 = join(dir, 'refusing.ctl');
  writeFileSync(join(dir, 'refusing.conf'), `log stderr all;\nprotocol device {\n}\ninclude "${file}";\n`);
  writeFileSync(file, 'router id 198.51.100.11;\n');
  nsSpawn(ns, ['bird', '-f', '-c', join(dir, 'refusing.conf'), '-s', sock2], { stdio: 'ignore' });
  let up = false;
  for (let i = 0; i < 100 && !up; i++) {
    up = (await exec(['birdc', '-s', sock2, 'show', 'status'], { timeoutMs: 2000 })).stdout.includes('up and running');
    if (!up) await sleep(100);
  }
  t.true(up, 'the second BIRD started');
  const warnings: string[] = [];
  const m = goodModel();
  const a = new BgpAnnouncer({ node: 'lb-1', configFile: file, birdSocket: sock2, applied: () => ({ model: m, desired: renderDesiredState(m, 'lb-1') }),
    xdpAttached: async () => true, log: { info: () => {}, warn: (msg: string) => warnings.push(msg) } });
  await a.sync();
  t.regex(readFileSync(file, 'utf8'), /password "s3cret"/); // the file BIRD read does hold it
  const error = a.status().bird.error ?? '';
  t.regex(error, /^birdc configure: .*cfg-\(redacted\)\/gitlb\.conf:\d+:\d+ .*already defined/, error);
  t.false(error.includes('s3cret'));
  t.false(/[\x00-\x1f\x7f]/.test(error));
  t.true(error.length <= 300);
  t.deepEqual(warnings, [`bgp: ${error}`]);
  t.is(a.status().bird.reloadedAt, null);
});
