// Opens a repository for the read-only status commands: a throwaway cache for URLs, the repo itself for paths.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCredentials } from '../source/credentials.js';
import { isUrl, openRemote, type GitRemote } from '../source/git-remote.js';

export async function withStatusRemote<T>(repo: string, credentialsFile: string | undefined, f: (r: GitRemote) => Promise<T>): Promise<T> {
  const cache = isUrl(repo) ? await mkdtemp(join(tmpdir(), 'gitlb-status-')) : null;
  try {
    return await f(openRemote(repo, { cacheDir: cache ?? '', credentials: loadCredentials({ file: credentialsFile }) }));
  } finally {
    if (cache) await rm(cache, { recursive: true, force: true });
  }
}
