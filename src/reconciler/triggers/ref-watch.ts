// Local repository trigger: chokidar watches the refs of the config branch. Only a change of the
// branch's resolved commit triggers, so writes to the status branch (packed-refs rewrites, other loose
// refs) never start a config reconcile.
import { watch, type FSWatcher } from 'chokidar';
import { join } from 'node:path';
import type { GitRemote } from '../source/git-remote.js';

export interface RefWatch {
  close(): Promise<void>;
}

export async function watchLocalBranch(remote: GitRemote, branch: string, onChange: (why: string) => void): Promise<RefWatch> {
  const gitdir = remote.gitdir;
  let last = await remote.fetch(branch).catch(() => null);
  const paths = [join(gitdir, 'refs', 'heads', ...branch.split('/')), join(gitdir, 'packed-refs')];
  const watcher: FSWatcher = watch(paths, { ignoreInitial: true, awaitWriteFinish: false, depth: 0 });
  // The ref file may not exist yet (fresh repo): watch its directory for it to appear.
  watcher.add(join(gitdir, 'refs', 'heads'));
  const check = async () => {
    const now = await remote.fetch(branch).catch(() => null);
    if (now && now !== last) {
      last = now;
      onChange(`ref change ${now.slice(0, 12)}`);
    }
  };
  watcher.on('all', () => void check());
  await new Promise<void>((r) => watcher.once('ready', () => r()));
  return { close: () => watcher.close() };
}
