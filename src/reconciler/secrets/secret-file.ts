// Reading a file that holds a secret (Git token, webhook or peer secret, commit signing key): capped, a regular file
// only (a FIFO or /dev/zero would hang or fill memory), and a warning when group or others can read or write it.
// Errors and warnings name the option and the file, never the content.
import { readFileSync, statSync } from 'node:fs';
import { GitlbError } from '../../errors.js';

export const MAX_SECRET_FILE_BYTES = 64 * 1024;

/** Shared secrets (webhook, peer) shorter than this are refused: GitLab's X-Gitlab-Token is the secret itself, so a
 * short one is guessable by anyone who can reach the port. `gitlb run` and `gitlb doctor` judge by the same rule. */
export const MIN_SHARED_SECRET_CHARS = 16;

/** Why `secret` cannot serve as the `what` (e.g. 'webhook secret'), or undefined when it can. */
export function sharedSecretProblem(secret: string, what: string): string | undefined {
  return secret.length < MIN_SHARED_SECRET_CHARS ? `the ${what} must be at least ${MIN_SHARED_SECRET_CHARS} characters (it has ${secret.length})` : undefined;
}

const READ_ERRORS: Record<string, string> = {
  ENOENT: 'no such file',
  EISDIR: 'is a directory, not a file',
  EACCES: 'permission denied',
  ENOTDIR: 'a part of the path is not a directory',
};

export type Warn = (message: string) => void;

export const warnOnStderr: Warn = (m) => process.stderr.write(`gitlb: warning: ${m}\n`);

/** The file's text; throws `<option> <file>: ...` when it cannot be used. */
export function readSecretFile(file: string, option: string, warn: Warn = warnOnStderr): string {
  try {
    const st = statSync(file);
    if (st.isDirectory()) throw Object.assign(new Error(), { code: 'EISDIR' });
    if (!st.isFile()) throw new GitlbError('InvalidOption', `${option} ${file}: not a regular file`, { field: option });
    if (st.size > MAX_SECRET_FILE_BYTES) throw new GitlbError('InvalidOption', `${option} ${file}: larger than ${MAX_SECRET_FILE_BYTES} bytes`, { field: option });
    if (st.mode & 0o077) warn(`${option} ${file} holds a secret but its mode is ${(st.mode & 0o777).toString(8).padStart(4, '0')}; chmod 600 it`);
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === undefined || err instanceof GitlbError) throw err; // ours (above), not the file system's
    throw new GitlbError('InvalidOption', `${option} ${file}: cannot read: ${READ_ERRORS[code] ?? code}`, { field: option });
  }
}
