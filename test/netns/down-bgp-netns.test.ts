// `gitlb down` on an lb node with BGP: BIRD keeps announcing what the daemon last wrote, so down withdraws every
// VIP itself (the daemon's --withdraw-on-exit path) — checked in BIRD's own tables, against a real BIRD 2 in a
// network namespace of its own. When BIRD cannot be told, down fails and removes nothing.
import test from 'ava';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BgpAnnouncer } from '../../src/reconciler/bgp/announcer.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { cleanupRun, createNetns, exec, nsName, nsSpawn, sleep } from '../../src/lab/netns.js';
import { goodFiles, goodModel } from '../helpers/bgp-model.js';
import { git, tempDir } from '../reconcile-helpers.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const MAIN = join(root, 'src/cli/main.ts');
let dir = '';
let sock = '';
let generated = '';
let repo = '';

test.before(async () => {
  dir = await tempDir('down-bgp');
  sock = join(dir, 'bird.ctl');
  generated = join(dir, 'gitlb.conf');
  const ns = nsName('downbgp');
  await createNetns(ns);
  await exec(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  writeFileSync(join(dir, 'bird.conf'), `log stderr all;\ninclude "${generated}";\n`);
  writeFileSync(generated, 'router id 198.51.100.11;\nprotocol device gitlb_device {\n}\n');
  nsSpawn(ns, ['bird', '-f', '-c', join(dir, 'bird.conf'), '-s', sock], { stdio: 'ignore' });
  let up = false;
  for (let i = 0; i < 100 && !up; i++) {
    up = (await exec(['birdc', '-s', sock, 'show', 'status'], { timeoutMs: 2000 })).stdout.includes('up and running');
    if (!up) await sleep(100);
  }
  if (!up) throw new Error('BIRD did not start');
  // The config repository the node runs from (a local one: down reads the head of --repo).
  repo = join(dir, 'repo');
  mkdirSync(repo);
  for (const f of goodFiles()) {
    mkdirSync(dirname(join(repo, f.path)), { recursive: true });
    writeFileSync(join(repo, f.path), f.content);
  }
  await git(repo, 'init', '-q', '-b', 'main');
  await git(repo, 'add', '-A');
  await git(repo, 'commit', '-q', '-m', 'config');
});

test.after.always(async () => {
  await cleanupRun();
  rmSync(dir, { recursive: true, force: true });
});

async function birdRoutes(): Promise<string[]> {
  const out: string[] = [];
  for (const p of ['gitlb_vip4', 'gitlb_vip6']) {
    const r = await exec(['birdc', '-s', sock, 'show', 'route', 'protocol', p], { timeoutMs: 5000 });
    out.push(...[...r.stdout.matchAll(/^([0-9a-f.:]+\/\d+)\s/gm)].map((m) => m[1]!));
  }
  return out.sort();
}

/** What a stopped daemon (without --withdraw-on-exit) leaves behind: BIRD announcing every VIP. */
async function announceAll(): Promise<void> {
  const model = goodModel();
  const a = new BgpAnnouncer({ node: 'lb-1', configFile: generated, birdSocket: sock, applied: () => ({ model, desired: renderDesiredState(model, 'lb-1') }), xdpAttached: async () => true });
  await a.sync();
  a.stop();
  if (a.status().bird.error) throw new Error(a.status().bird.error);
}

const down = async (extra: string[], cache?: string) => {
  // under the test's dir, so the after hook removes it with everything else
  cache ??= mkdtempSync(join(dir, 'cache-'));
  const args = ['down', '--node', 'lb-1', '--repo', repo, '--pin-root', join(dir, 'no-pins'), '--cache-dir', cache, ...extra];
  return exec([process.execPath, '--import', 'tsx', MAIN, ...args], { cwd: root, timeoutMs: 50_000 });
};

test.serial('down withdraws every VIP through BIRD (sessions kept) and says so', async (t) => {
  await announceAll();
  t.deepEqual(await birdRoutes(), ['2001:db8:ff::10/128', '203.0.113.10/32', '203.0.113.20/32']);
  const r = await down(['--bird-config', generated, '--bird-socket', sock]);
  t.is(r.code, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /BGP: withdrew 3 VIP\(s\) \(203\.0\.113\.10 203\.0\.113\.20 2001:db8:ff::10\).*BIRD reloaded/);
  t.deepEqual(await birdRoutes(), []);
  const text = readFileSync(generated, 'utf8');
  t.regex(text, /VIPs \(0 of 3 announced\)/);
  t.regex(text, /protocol bgp gitlb_peer_198_51_100_1 /, 'the sessions stay configured');
});

test.serial('down fails loudly (exit 1) when BIRD cannot be told, and removes nothing', async (t) => {
  await announceAll();
  const r = await down(['--bird-config', generated, '--bird-socket', join(dir, 'no-bird.ctl')]);
  t.is(r.code, 1, r.stdout + r.stderr);
  t.regex(r.stderr, /BIRD was not told to withdraw lb-1's VIPs/);
  t.notRegex(r.stdout, /nothing to remove|unpinned/);
  t.is((await birdRoutes()).length, 3, 'BIRD still announces: down did not claim otherwise');
});

test.serial('down --help says how to take a BGP node down: the BIRD options run takes, withdrawn first', async (t) => {
  const r = await exec([process.execPath, '--import', 'tsx', MAIN, 'down', '--help'], { cwd: root, timeoutMs: 60_000 });
  t.is(r.code, 0);
  t.regex(r.stdout, /--bird-config <file>/);
  t.regex(r.stdout, /--bird-socket <path>/);
  t.regex(r.stdout.replace(/\s+/g, ' '), /down first withdraws every VIP/);
});

test.serial('nothing under the pin root while lb-1 looks alive (a gitlb run --node lb-1 process): down refuses, records nothing', async (t) => {
  // A stand-in with the daemon's command line (node running a file named like the CLI); down reads /proc, not a mock.
  writeFileSync(join(dir, 'main.ts'), 'setTimeout(() => {}, 120_000);\n');
  const { spawn } = await import('node:child_process');
  const cache = mkdtempSync(join(dir, 'alive-'));
  const p = spawn(process.execPath, [join(dir, 'main.ts'), 'run', '--node', 'lb-1', '--cache-dir', cache], { stdio: 'ignore' });
  try {
    const r = await down(['--bird-socket', 'off'], cache);
    t.is(r.code, 1, r.stdout + r.stderr);
    t.regex(r.stderr, new RegExp(`found no data plane of lb-1 under ${dir}/no-pins/lb-1, but it looks alive: a gitlb run --node lb-1 process with cache dir ${cache} is running \\(pid ${p.pid}\\)`));
    t.notRegex(r.stdout, /recorded in status/);
  } finally {
    p.kill();
  }
  // Without it: said plainly, and what was recorded.
  const r = await down(['--bird-socket', 'off'], cache);
  t.is(r.code, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /nothing to remove \(nothing found at that pin root, and no sign of a running lb-1/);
  t.regex(r.stdout, /recorded in status\/lb-1\.yaml on gitlb-status: Ready=False\/Decommissioned \(no data plane found under .*no-pins\/lb-1/);
});
