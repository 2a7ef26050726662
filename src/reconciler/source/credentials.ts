// Git credentials for HTTP remotes: from the environment or a file, handed to isomorphic-git's onAuth.
// Secrets never reach a log line: every URL printed goes through redactUrl().
import { readSecretFile, type Warn } from '../secrets/secret-file.js';
import { GitlbError } from '../../errors.js';

export interface GitCredentials {
  username: string;
  password: string; // a token or password
}

export const TOKEN_ENV = 'GITLB_GIT_TOKEN';
export const USERNAME_ENV = 'GITLB_GIT_USERNAME';

/**
 * Reads credentials. File format: either a single line holding a token, or `key=value` lines with keys
 * `username` and `token` (or `password`). The environment (GITLB_GIT_TOKEN, GITLB_GIT_USERNAME) wins over the file.
 * Returns undefined when none are configured (anonymous access, or userinfo embedded in the URL).
 */
export function loadCredentials(opts: { file?: string; env?: NodeJS.ProcessEnv; warn?: Warn } = {}): GitCredentials | undefined {
  const env = opts.env ?? process.env;
  let username: string | undefined;
  let password: string | undefined;
  if (opts.file) {
    const lines = readCredentialsFile(opts.file, opts.warn);
    if (lines.length === 1 && !lines[0]!.includes('=')) password = lines[0];
    else {
      for (const line of lines) {
        const eq = line.indexOf('=');
        if (eq < 0) throw new GitlbError('InvalidOption', `${CREDENTIALS_OPTION} ${opts.file}: expected key=value lines (username=, token=)`, { field: CREDENTIALS_OPTION });
        const key = line.slice(0, eq).trim();
        const value = line.slice(eq + 1).trim();
        if (key === 'username') username = value;
        else if (key === 'token' || key === 'password') password = value;
        else throw new GitlbError('InvalidOption', `${CREDENTIALS_OPTION} ${opts.file}: unknown key '${key}' (expected username, token)`, { field: CREDENTIALS_OPTION });
      }
    }
    if (!password) throw new GitlbError('InvalidOption', `${CREDENTIALS_OPTION} ${opts.file}: no token (expected a token, or a token= line)`, { field: CREDENTIALS_OPTION });
  }
  if (env[TOKEN_ENV]) password = env[TOKEN_ENV];
  if (env[USERNAME_ENV]) username = env[USERNAME_ENV];
  if (password === undefined) return undefined;
  // GitHub and GitLab accept any non-empty user name with a token.
  return { username: username ?? 'gitlb', password };
}

/** The command-line option the file comes from (`gitlb run`, `status`, `history`): errors name it. */
const CREDENTIALS_OPTION = '--credentials-file';

/** The meaningful lines of a credentials file; every failure names the option and the file, never the content. */
function readCredentialsFile(file: string, warn?: Warn): string[] {
  const text = readSecretFile(file, CREDENTIALS_OPTION, warn);
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  if (lines.length === 0) throw new GitlbError('InvalidOption', `${CREDENTIALS_OPTION} ${file}: the file is empty (expected a token, or username= and token= lines)`, { field: CREDENTIALS_OPTION });
  return lines;
}

/** `https://user:secret@host/x.git` -> `https://***@host/x.git`; other strings are returned as they are. */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/]*@/i, '$1***@');
}

/** Removes any secret from free text (error messages of HTTP clients may echo a URL). */
export function redactText(text: string, creds?: GitCredentials): string {
  let out = text.replace(/([a-z][a-z0-9+.-]*:\/\/)[^@/\s]*@/gi, '$1***@');
  if (creds?.password) out = out.split(creds.password).join('***');
  return out;
}
