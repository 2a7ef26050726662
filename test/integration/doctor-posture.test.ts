// `gitlb doctor` (bin/gitlb, as operators run it) reports the node's trust posture from real inputs: a state.json
// written by the daemon's own writer, a trust file with a real SSH key, peer secret files, the config's branch head
// in a Git repository. The hardened node's posture lines are all OK; a weak one shows each weakness.
import test from 'ava';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { commitFiles, git, tempDir } from '../reconcile-helpers.js';
import { signerLine, sshKey } from '../verify-helpers.js';
import { writeLocalState } from '../../src/reconciler/state/local-state.js';

const root = join(import.meta.dirname, '..', '..');

function doctor(args: string[]): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve) => {
    execFile(join(root, 'bin', 'gitlb'), ['doctor', ...args], { cwd: root, timeout: 120_000 }, (err, stdout) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout });
    });
  });
}

/** The posture lines of doctor's output (level, name, detail), keyed by name. */
function posture(stdout: string): Record<string, string> {
  const names = ['verification', 'trust root', 'peer auth', 'listener metrics', 'listener webhook', 'listener peer'];
  const out: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const m = /^(OK|WARN|FAIL)\s+(.+?)\s{2,}(.*)$/.exec(line);
    if (m && names.includes(m[2]!)) out[m[2]!] = `${m[1]} ${m[3]}`;
  }
  return out;
}

let dir = '';
let head = '';
test.before(async () => {
  dir = await tempDir('doctor-posture');
  const work = join(dir, 'repo');
  mkdirSync(work);
  await git(work, 'init', '-q', '-b', 'main');
  const files: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const e of readdirSync(join(root, 'sample-config-repo', rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(p);
      else files[p] = readFileSync(join(root, 'sample-config-repo', p), 'utf8');
    }
  };
  walk('');
  head = await commitFiles(work, files, 'sample config');
});
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

test('a hardened node: verification enforce from its own state, trust root, authenticated peers, metrics on loopback', async (t) => {
  const cache = join(dir, 'cache-hardened');
  mkdirSync(cache);
  await writeLocalState(join(cache, 'state.json'), { node: 'lb-1', branch: 'main', appliedRevision: head,
    verification: { mode: 'enforce', formats: ['ssh'], signersFile: 'trust/allowed_signers' } });
  const key = await sshKey(dir, 'alice');
  writeFileSync(join(dir, 'trust'), `${signerLine('alice@example.com', key)}\n`);
  writeFileSync(join(dir, 'peer-secret'), `${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
  const r = await doctor(['--repo', join(dir, 'repo'), '--node', 'lb-1', '--cache-dir', cache, '--trust', join(dir, 'trust'),
    '--peer-secret-file', join(dir, 'peer-secret'), '--metrics', '127.0.0.1:9462']);
  const p = posture(r.stdout);
  t.deepEqual(Object.keys(p).length, 6, r.stdout);
  for (const [name, line] of Object.entries(p)) t.true(line.startsWith('OK '), `${name}: ${line}`);
  t.regex(p['verification']!, /mode enforce in force \(recorded in .*state\.json with [0-9a-f]{12}\), root --trust .*trust \(1 key\); the branch head asks for off/);
  t.is(p['trust root'], `OK local state: ${join(cache, 'state.json')} verified ${head.slice(0, 12)}; new commits are verified from there`);
  t.is(p['listener peer'], 'OK 198.51.100.11:7946: health votes and connection sync, authenticated (cluster secret)', "lb-1's first address in its Node document");
});

test('a weak node: verification off, no trust root, a weak peer secret, metrics and webhook on the network', async (t) => {
  writeFileSync(join(dir, 'weak-secret'), `${'abcd'.repeat(12)}\n`, { mode: 0o600 });
  writeFileSync(join(dir, 'webhook-secret'), `${randomBytes(24).toString('base64')}\n`, { mode: 0o600 });
  const r = await doctor(['--repo', join(dir, 'repo'), '--node', 'lb-1', '--cache-dir', join(dir, 'no-cache'),
    '--peer-secret-file', join(dir, 'weak-secret'), '--metrics', '192.0.2.7:9462', '--webhook', '0.0.0.0:9000',
    '--webhook-secret-file', join(dir, 'webhook-secret')]);
  const p = posture(r.stdout);
  t.regex(p['verification']!, /^WARN mode off in force .*commits are not verified; whoever can push to the branch steers the data plane$/);
  t.regex(p['trust root']!, /^OK none: no local state and no --trust-from \(verification is off/);
  t.regex(p['peer auth']!, /^FAIL --peer-secret-file .*weak-secret: the peer secret .*; gitlb run refuses to start$/);
  t.regex(p['listener metrics']!, /^WARN 192\.0\.2\.7:9462: .*unauthenticated and reachable from the network/);
  t.is(p['listener webhook'], 'OK 0.0.0.0:9000 (every interface): push notifications (a fetch trigger), authenticated (shared secret)');
  t.regex(r.stdout, /^verdict: NOT READY/m);
  t.is(r.code, 1);
});
