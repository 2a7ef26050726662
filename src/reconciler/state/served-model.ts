// The config of the revision a node last applied (its <cache-dir>/state.json and the Git objects the daemon
// fetched), for tools that act on what the node served rather than on the branch head: the daemon after a restart
// during a Git outage, `gitlb down` rendering the withdrawn BIRD file.
import { join } from 'node:path';
import { parseConfig } from '../../render/config/index.js';
import type { ConfigModel } from '../../render/model.js';
import { readLocalState } from './local-state.js';
import { readRevisionFiles } from '../source/git-objects.js';

/** null when the node recorded no applied revision (for this node and branch) or the objects are not there. */
export async function lastAppliedModel(o: { cacheDir: string; gitdir: string; node: string; branch: string; configPath?: string }): Promise<ConfigModel | null> {
  const local = await readLocalState(join(o.cacheDir, 'state.json'));
  if (!local?.appliedRevision || local.node !== o.node || local.branch !== o.branch) return null;
  try {
    return parseConfig(await readRevisionFiles(o.gitdir, local.appliedRevision, o.configPath)).model ?? null;
  } catch {
    return null; // not in the cache: the daemon says so when it tries to adopt it
  }
}
