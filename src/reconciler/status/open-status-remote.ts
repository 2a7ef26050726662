// Opens a repository for the read-only status commands: a throwaway cache for URLs, the repo itself for paths.
import { loadCredentials } from '../source/credentials.js';
import { isUrl, openRemote, type GitRemote } from '../source/git-remote.js';
import { readRevisionFiles } from '../source/git-objects.js';
import { parseConfig } from '../../render/config/index.js';
import { DEFAULTS } from '../../render/config/limits.js';
import { makeTempDir, removeTempDir } from '../temp/temp-dirs.js';

/**
 * The config branch's tip, fetched at most once per command (the status branch is resolved from it, and `status`
 * and `history` read it again): null when the branch does not exist; a fetch error (a timeout, a refused login)
 * is thrown to the caller.
 */
export type ConfigTip = () => Promise<string | null>;

function onceConfigTip(remote: GitRemote, configBranch: string): ConfigTip {
  let tip: Promise<string | null> | undefined;
  return () => (tip ??= remote.fetch(configBranch, { depth: 1 }));
}

/** Opens `repo` (see withStatusRemote), resolves the status branch (see resolveStatusBranch) and hands both to `f`. */
export async function withStatusBranch<T>(
  opts: { repo: string; credentialsFile?: string; configBranch: string; statusBranch?: string; configPath?: string; timeoutMs?: number },
  f: (r: GitRemote, statusBranch: string, configTip: ConfigTip) => Promise<T>,
): Promise<T> {
  return withStatusRemote(
    opts.repo,
    opts.credentialsFile,
    async (r) => {
      const configTip = onceConfigTip(r, opts.configBranch);
      return f(r, await resolveStatusBranch(r, configTip, opts.statusBranch, opts.configPath), configTip);
    },
    opts.timeoutMs,
  );
}

/** `timeoutMs`: the deadline of each Git fetch and push (`--git-timeout`; default that of `gitlb run`). */
export async function withStatusRemote<T>(repo: string, credentialsFile: string | undefined, f: (r: GitRemote) => Promise<T>, timeoutMs?: number): Promise<T> {
  const cache = isUrl(repo) ? await makeTempDir('gitlb-status-') : null;
  try {
    return await f(openRemote(repo, { cacheDir: cache ?? '', credentials: loadCredentials({ file: credentialsFile }), timeoutMs }));
  } finally {
    if (cache) await removeTempDir(cache);
  }
}

/**
 * The status branch to read: the one given on the command line, else the one the config branch's Cluster names
 * (`spec.status.branch`), else the default. A missing config branch, or a config that cannot be read or is
 * invalid, falls back to the default: status must stay readable exactly when the config is broken. A failed
 * fetch (timeout, authentication, server error) is not "missing": it is thrown, since guessing the default
 * branch there would read the wrong branch, or an empty one, and report that instead of the real cause.
 */
export async function resolveStatusBranch(remote: GitRemote, configTip: ConfigTip, override: string | undefined, configPath = ''): Promise<string> {
  if (override) return override;
  const tip = await configTip();
  if (!tip) return DEFAULTS.statusBranch;
  try {
    const { model } = parseConfig(await readRevisionFiles(remote.gitdir, tip, configPath));
    return model?.cluster.spec.status.branch ?? DEFAULTS.statusBranch;
  } catch {
    return DEFAULTS.statusBranch;
  }
}
