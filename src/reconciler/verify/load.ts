// Reading the daemon's key files: the --trust root must parse completely (a typo in the root of trust is a
// startup error naming file:line, not a silently smaller trust), and the --signing-key must be usable.
import { readFile, stat } from 'node:fs/promises';
import { loadTrust, type Trust } from './trust.js';
import { MAX_TRUST_BYTES } from './allowed-signers.js';
import { loadSigningKey, type CommitSigner } from './signing-key.js';
import { readSecretFile, type Warn } from '../secrets/secret-file.js';
import { GitlbError } from '../../errors.js';

async function readCapped(file: string, what: string): Promise<string> {
  let st;
  try {
    st = await stat(file);
  } catch (err) {
    // The option and the path, not the raw `ENOENT: no such file or directory, stat '…'`.
    const code = (err as NodeJS.ErrnoException).code;
    throw new GitlbError('InvalidOption', `--trust ${file}: ${code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : (err as Error).message}`, { field: '--trust' });
  }
  if (st.size > MAX_TRUST_BYTES) throw new GitlbError('InvalidOption', `${file}: ${what} larger than ${MAX_TRUST_BYTES} bytes`, { field: '--trust' });
  return readFile(file, 'utf8');
}

export async function loadTrustFile(file: string): Promise<Trust> {
  const t = await loadTrust(await readCapped(file, 'trust file'), file);
  if (t.problems.length) throw new GitlbError('InvalidOption', `trust file rejected:\n  ${t.problems.join('\n  ')}`, { field: '--trust' });
  if (!t.ssh.length && !t.pgp.length) throw new GitlbError('InvalidOption', `${file}: no keys (expected allowed_signers lines and/or armored OpenPGP public keys)`, { field: '--trust' });
  return t;
}

export async function loadSigningKeyFile(file: string, warn?: Warn): Promise<CommitSigner> {
  return loadSigningKey(readSecretFile(file, '--signing-key', warn), file);
}
