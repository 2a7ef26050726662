// Prints how long verifying a range of signed commits takes: gitlb's verifyRange (what `gitlb run` does before
// applying, and `gitlb verify`) beside git's own signature check of the same range. Run through bench/verify/run.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, readFileSync, mkdirSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTrust } from '../../src/reconciler/verify/trust.js';
import { verifyRange, DEFAULT_POLICY } from '../../src/reconciler/verify/verify-range.js';

const N = Number(process.env.BENCH_COMMITS ?? 100);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const dir = mkdtempSync(join(tmpdir(), 'gitlb-bench-verify-'));
const env = { ...process.env, HOME: dir, GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 'bench', GIT_AUTHOR_EMAIL: 'bench@example.com', GIT_COMMITTER_NAME: 'bench', GIT_COMMITTER_EMAIL: 'bench@example.com' };
const run = (cmd: string, args: string[], cwd = dir) => execFileSync(cmd, args, { cwd, env, encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'pipe'] });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function repo(name: string, sign: string[]): { work: string; base: string; head: string } {
  const work = join(dir, name);
  run('git', ['init', '-q', '-b', 'main', work]);
  run('git', ['commit', '-q', '--allow-empty', '-m', 'base'], work);
  const base = run('git', ['rev-parse', 'HEAD'], work).trim();
  for (let i = 0; i < N; i++) {
    writeFileSync(join(work, 'f.txt'), `${i}\n`);
    run('git', ['add', '-A'], work);
    run('git', [...sign, 'commit', '-q', '-S', '-m', `change ${i}`], work);
  }
  return { work, base, head: run('git', ['rev-parse', 'HEAD'], work).trim() };
}

async function measure(label: string, r: { work: string; base: string; head: string }, trustText: string, gitArgs: string[]): Promise<void> {
  const root = await loadTrust(trustText, 'trust');
  const ours: number[] = [];
  const peer: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    let t = performance.now();
    const v = await verifyRange({ gitdir: join(r.work, '.git'), head: r.head, base: r.base, policy: { ...DEFAULT_POLICY, mode: 'enforce' }, root, now: new Date() });
    ours.push(performance.now() - t);
    if (v.verdicts.length !== N || v.failures.length) throw new Error(`${label}: ${v.failures.length} of ${v.verdicts.length} refused`);
    t = performance.now();
    const marks = run('git', [...gitArgs, 'log', '--format=%G?', `${r.base}..${r.head}`], r.work).trim().split('\n');
    peer.push(performance.now() - t);
    if (marks.length !== N || marks.some((m) => m !== 'G')) throw new Error(`${label}: git says ${[...new Set(marks)].join(',')}`);
  }
  const o = median(ours);
  const p = median(peer);
  console.log(
    `${label.padEnd(22)} ${N} commits: gitlb ${o.toFixed(0).padStart(6)} ms (${(o / N).toFixed(2)} ms/commit)   git ${p.toFixed(0).padStart(6)} ms (${(p / N).toFixed(2)} ms/commit)   ratio ${(o / p).toFixed(2)}`,
  );
}

try {
  // SSH: one Ed25519 key, git signs through ssh-keygen.
  run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'bench', '-f', join(dir, 'key')]);
  const pub = readFileSync(join(dir, 'key.pub'), 'utf8').trim().split(' ').slice(0, 2).join(' ');
  const allowed = join(dir, 'allowed_signers');
  writeFileSync(allowed, `bench@example.com ${pub}\n`);
  const ssh = repo('ssh', ['-c', 'gpg.format=ssh', '-c', `user.signingkey=${join(dir, 'key')}`]);
  await measure('SSH Ed25519', ssh, readFileSync(allowed, 'utf8'), ['-c', `gpg.ssh.allowedSignersFile=${allowed}`]);

  // OpenPGP: one Ed25519 key in a throwaway GNUPGHOME.
  const home = join(dir, 'gnupg');
  mkdirSync(home, { mode: 0o700 });
  const gpg = ['--homedir', home, '--batch', '--yes', '--pinentry-mode', 'loopback', '--passphrase', ''];
  run('gpg', [...gpg, '--quick-gen-key', 'Bench <bench@example.com>', 'ed25519', 'sign', '0']);
  const fpr = /^fpr:+([0-9A-F]{40}):/m.exec(run('gpg', ['--homedir', home, '--with-colons', '--list-keys']))![1]!;
  const wrapper = join(dir, 'gpg-wrapper');
  writeFileSync(wrapper, `#!/bin/sh\nexec gpg --homedir '${home}' "$@"\n`);
  chmodSync(wrapper, 0o755);
  const pgp = repo('pgp', ['-c', `gpg.program=${wrapper}`, '-c', `user.signingkey=${fpr}`]);
  await measure('OpenPGP Ed25519', pgp, run('gpg', ['--homedir', home, '--armor', '--export', fpr]), ['-c', `gpg.program=${wrapper}`]);
  try {
    run('gpgconf', ['--homedir', home, '--kill', 'gpg-agent']);
  } catch {
    /* no agent left */
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
