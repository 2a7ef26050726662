// Test helpers for signed commits: real keys from ssh-keygen and gpg (a throwaway GNUPGHOME per test), and
// commits signed by the real git CLI (gpg.format=ssh, or OpenPGP through a gpg wrapper).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdir, readFile, writeFile, chmod, readdir } from 'node:fs/promises';
import { join, dirname } from 'node:path';
import { git } from './reconcile-helpers.js';
import { loadTrust, type Trust } from '../src/reconciler/verify/trust.js';
import { runCli } from '../src/cli/main.js';

const execFileP = promisify(execFile);

export interface SshKey {
  private: string; // path
  publicText: string; // "ssh-ed25519 AAAA..."
}

export async function sshKey(dir: string, name: string, type = 'ed25519', bits?: number): Promise<SshKey> {
  const path = join(dir, name);
  await execFileP('ssh-keygen', ['-q', '-t', type, ...(bits ? ['-b', String(bits)] : []), '-N', '', '-C', name, '-f', path]);
  const pub = (await readFile(`${path}.pub`, 'utf8')).trim().split(' ');
  return { private: path, publicText: `${pub[0]} ${pub[1]}` };
}

export function signerLine(principal: string, key: SshKey, options = ''): string {
  return `${principal}${options ? ` ${options}` : ''} ${key.publicText}`;
}

export interface GpgKey {
  home: string;
  fingerprint: string;
  program: string; // wrapper for git's gpg.program (adds --homedir, and --faked-system-time when given)
  publicArmored(): Promise<string>;
  revoke(): Promise<void>;
  close(): Promise<void>;
}

const gpgBase = (home: string) => ['--homedir', home, '--batch', '--yes', '--pinentry-mode', 'loopback', '--passphrase', ''];

/** A fresh GNUPGHOME with one signing key; `fakedTime` (epoch seconds) makes gpg believe it is then. */
export async function gpgKey(dir: string, uid: string, o: { expire?: string; fakedTime?: number } = {}): Promise<GpgKey> {
  const home = join(dir, `gnupg-${uid.replace(/[^a-z]/gi, '')}`);
  await mkdir(home, { recursive: true, mode: 0o700 });
  const faked = o.fakedTime ? ['--faked-system-time', `${o.fakedTime}!`] : [];
  await execFileP('gpg', [...gpgBase(home), ...faked, '--quick-gen-key', uid, 'ed25519', 'sign', o.expire ?? '0']);
  const { stdout } = await execFileP('gpg', ['--homedir', home, '--batch', '--with-colons', '--list-keys']);
  const fingerprint = /^fpr:+([0-9A-F]{40}):/m.exec(stdout)![1]!;
  const program = join(home, 'gpg-wrapper');
  await writeFile(program, `#!/bin/sh\nexec gpg --homedir '${home}' ${faked.join(' ')} "$@"\n`);
  await chmod(program, 0o755);
  return {
    home,
    fingerprint,
    program,
    publicArmored: async () => (await execFileP('gpg', ['--homedir', home, '--batch', '--armor', '--export', fingerprint])).stdout,
    revoke: async () => {
      // gpg leaves a ready revocation certificate, its armor escaped with ':' so it cannot be imported by accident.
      const revs = join(home, 'openpgp-revocs.d');
      const file = (await readdir(revs)).find((f) => f.startsWith(fingerprint))!;
      const cert = (await readFile(join(revs, file), 'utf8')).replace(/^:-----/m, '-----');
      const certFile = join(home, 'revoke.asc');
      await writeFile(certFile, cert);
      await execFileP('gpg', [...gpgBase(home), '--import', certFile]);
    },
    close: async () => {
      await execFileP('gpgconf', ['--homedir', home, '--kill', 'gpg-agent']).catch(() => {});
    },
  };
}

export type Signing = { ssh: SshKey } | { gpg: GpgKey } | null;

function signingArgs(s: Signing): string[] {
  if (!s) return [];
  if ('ssh' in s) return ['-c', 'gpg.format=ssh', '-c', `user.signingkey=${s.ssh.private}`];
  return ['-c', 'gpg.format=openpgp', '-c', `gpg.program=${s.gpg.program}`, '-c', `user.signingkey=${s.gpg.fingerprint}`];
}

/** Writes files (null deletes) and commits them with the git CLI, signed as given; returns the commit id. */
export async function signedCommit(work: string, files: Record<string, string | null>, message: string, signing: Signing): Promise<string> {
  for (const [path, content] of Object.entries(files)) {
    const full = join(work, path);
    if (content === null) await execFileP('rm', ['-f', full]);
    else {
      await mkdir(dirname(full), { recursive: true });
      await writeFile(full, content);
    }
  }
  await git(work, 'add', '-A');
  await git(work, ...signingArgs(signing), 'commit', '-q', '--allow-empty', ...(signing ? ['-S'] : ['--no-gpg-sign']), '-m', message);
  return git(work, 'rev-parse', 'HEAD');
}

/** A commit with `victim`'s content and `donor`'s signature (a signature over other content). */
export async function tamperedCommit(work: string, victim: string, donor: string): Promise<string> {
  const donorRaw = await git(work, 'cat-file', 'commit', donor);
  const sig = /\ngpgsig [\s\S]*?\n(?! )/.exec(`${donorRaw}\n`)![0].slice(1);
  const victimRaw = await git(work, 'cat-file', 'commit', victim);
  const stripped = victimRaw.replace(/\ngpgsig [\s\S]*?\n(?! )/, '\n');
  const at = stripped.indexOf('\n\n');
  const forged = `${stripped.slice(0, at + 1)}${sig}${stripped.slice(at + 1)}\n`;
  return hashObject(work, forged);
}

async function hashObject(work: string, content: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile('git', ['hash-object', '-t', 'commit', '-w', '--stdin'], { cwd: work }, (err, out) => (err ? reject(err) : resolve(out.trim())));
    child.stdin!.end(content);
  });
}

/** A trust set from text that must parse completely. */
export async function trustOf(text: string): Promise<Trust> {
  const t = await loadTrust(text, 'trust');
  if (t.problems.length) throw new Error(t.problems.join('; '));
  return t;
}

/** `gitlb …` in this process (status, verify, history), capturing stdout and stderr: no second Node start-up. */
export async function cli(...args: string[]): Promise<{ code: number; stdout: string }> {
  const [out, err] = [process.stdout.write, process.stderr.write];
  let text = '';
  process.stdout.write = process.stderr.write = ((chunk: string | Uint8Array) => ((text += String(chunk)), true)) as typeof process.stdout.write;
  try {
    return { code: await runCli(args), stdout: text };
  } finally {
    [process.stdout.write, process.stderr.write] = [out, err];
  }
}
