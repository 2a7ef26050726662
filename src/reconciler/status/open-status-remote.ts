// Opens a repository for the read-only status commands: a throwaway cache for URLs, the repo itself for paths.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCredentials } from '../source/credentials.js';
import { isUrl, openRemote, type GitRemote } from '../source/git-remote.js';
import { readRevisionFiles } from '../source/git-objects.js';
import { parseConfig } from '../../render/config/index.js';
import { DEFAULTS } from '../../render/config/limits.js';

/** Opens `repo` (see withStatusRemote), resolves the status branch (see resolveStatusBranch) and hands both to `f`. */
export async function withStatusBranch<T>(
  opts: { repo: string; credentialsFile?: string; configBranch: string; statusBranch?: string; configPath?: string },
  f: (r: GitRemote, statusBranch: string) => Promise<T>,
): Promise<T> {
  return withStatusRemote(opts.repo, opts.credentialsFile, async (r) =>
    f(r, await resolveStatusBranch(r, opts.configBranch, opts.statusBranch, opts.configPath)),
  );
}

export async function withStatusRemote<T>(repo: string, credentialsFile: string | undefined, f: (r: GitRemote) => Promise<T>): Promise<T> {
  const cache = isUrl(repo) ? await mkdtemp(join(tmpdir(), 'gitlb-status-')) : null;
  try {
    return await f(openRemote(repo, { cacheDir: cache ?? '', credentials: loadCredentials({ file: credentialsFile }) }));
  } finally {
    if (cache) await rm(cache, { recursive: true, force: true });
  }
}

/**
 * The status branch to read: the one given on the command line, else the one the config branch's Cluster names
 * (`spec.status.branch`), else the default. An invalid or missing config falls back to the default: status must
 * stay readable exactly when the config is broken.
 */
export async function resolveStatusBranch(remote: GitRemote, configBranch: string, override: string | undefined, configPath = ''): Promise<string> {
  if (override) return override;
  try {
    const tip = await remote.fetch(configBranch, { depth: 1 });
    if (!tip) return DEFAULTS.statusBranch;
    const { model } = parseConfig(await readRevisionFiles(remote.gitdir, tip, configPath));
    return model?.cluster.spec.status.branch ?? DEFAULTS.statusBranch;
  } catch {
    return DEFAULTS.statusBranch;
  }
}
