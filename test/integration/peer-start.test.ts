// Start-up refusals of the peer channel, through `gitlb run` and startNodeDaemon on a local config repository: all
// happen before any data plane is opened (no BPF here). A weak peer secret is refused naming the file, a random
// one is accepted (the start then goes on to the next check); consensus mode without peer authentication is
// refused; a --peer-key that is not the node's spec.peerKey is refused with the line to add.
import test from 'ava';
import { execFile } from 'node:child_process';
import { chmodSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startNodeDaemon, StartError } from '../../src/reconciler/node-daemon.js';
import { loadPeerKeyFile } from '../../src/reconciler/peer/index.js';
import { clusterYaml, commitFiles, git, serviceYaml, tempDir } from '../reconcile-helpers.js';

const execFileP = promisify(execFile);
const MAIN = join(import.meta.dirname, '..', '..', 'src', 'cli', 'main.ts');
const dirs: string[] = [];
test.after.always(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

async function scratch(name: string): Promise<string> {
  const d = await tempDir(name);
  dirs.push(d);
  return d;
}

/** A local config repository: consensus health, lb-1 (with `peerKey` when given) and lb-2. */
async function repo(peerKey?: string): Promise<string> {
  const dir = await scratch('peer-start-repo');
  await git(dir, 'init', '-q', '-b', 'main');
  const node = (n: string, a: number, key?: string) => `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${n} }\nspec:\n  role: lb\n  interface: eth0\n` +
    `  addresses: [198.51.100.${a}]\n  allowedVips: [203.0.113.0/24]\n${key ? `  peerKey: ${key}\n` : ''}`;
  await commitFiles(dir, {
    'cluster.yaml': clusterYaml() + '  health: { mode: consensus }\n',
    'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.21']),
    'nodes/lb-1.yaml': node('lb-1', 11, peerKey),
    'nodes/lb-2.yaml': node('lb-2', 12),
  }, 'consensus config');
  return dir;
}

async function gitlbRun(args: string[]): Promise<{ code: number; stderr: string }> {
  return execFileP(process.execPath, ['--import', 'tsx', MAIN, 'run', ...args], { timeout: 60_000 }).then(
    () => ({ code: 0, stderr: '' }),
    (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
  );
}

test('gitlb run: a weak peer secret is refused naming the file; a random 32-byte one is accepted', async (t) => {
  const dir = await repo();
  const cache = await scratch('peer-start-cache');
  const weak = join(cache, 'weak-secret');
  writeFileSync(weak, 'x'.repeat(16));
  chmodSync(weak, 0o600);
  const base = ['--repo', dir, '--node', 'lb-1', '--cache-dir', cache, '--no-status', '--metrics', 'off', '--bird-socket', 'off', '--pin-root', join(cache, 'pins')];
  const refused = await gitlbRun([...base, '--peer-secret-file', weak]);
  t.is(refused.code, 2, refused.stderr);
  t.regex(refused.stderr, new RegExp(`--peer-secret-file ${weak}: the peer secret holds at most 96 bits`));
  t.false(refused.stderr.includes('xxxxxxxxxxxxxxxx'), 'the secret is not echoed');
  const good = join(cache, 'good-secret');
  writeFileSync(good, `${randomBytes(32).toString('base64')}\n`);
  chmodSync(good, 0o600);
  // Accepted: the start goes on to the Node document checks (an interface that differs stops it there, before any
  // data plane is opened).
  const accepted = await gitlbRun([...base, '--peer-secret-file', good, '--interface', 'other0']);
  t.is(accepted.code, 2, accepted.stderr);
  t.regex(accepted.stderr, /--interface other0 differs from the Node document 'lb-1'/);
  t.notRegex(accepted.stderr, /peer secret/);
});

test('consensus without peer authentication is refused at start; so is a --peer-key the config does not name', async (t) => {
  const dir = await repo();
  const base = { repo: dir, branch: 'main', node: 'lb-1', xdpMode: 'auto' as const, pinRoot: join(dir, 'pins'), cacheDir: await scratch('peer-start-nd'),
    writeStatus: false, health: true, peerPoll: '2', gitTimeoutMs: 5000, once: false, log: { info: () => {}, warn: () => {} } };
  const none = await t.throwsAsync(startNodeDaemon(base), { instanceOf: StartError });
  t.regex(none!.message, /consensus health .* give --peer-secret-file FILE or --peer-key FILE/);
  const keyDir = await scratch('peer-start-key');
  await execFileP('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(keyDir, 'k')]);
  const key = loadPeerKeyFile(join(keyDir, 'k'));
  const other = await t.throwsAsync(startNodeDaemon({ ...base, peer: { key, port: 7946 } }), { instanceOf: StartError });
  t.regex(other!.message, /--peer-key: its public key is not spec.peerKey of the Node document 'lb-1' .* add this line there first: ssh-ed25519 AAAA/);
  // The config naming it: the key check passes and the start goes on (stopped here by an interface that differs).
  const named = await repo(key.publicLine);
  const next = await t.throwsAsync(startNodeDaemon({ ...base, repo: named, interface: 'other0', peer: { key, port: 7946 } }), { instanceOf: StartError });
  t.regex(next!.message, /--interface other0 differs/);
});
