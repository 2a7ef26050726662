// The config of the revision a node last applied (its <cache-dir>/state.json and the Git objects the daemon
// fetched), for tools that act on what the node served rather than on the branch head: the daemon after a restart
// during a Git outage, `gitlb down` rendering the withdrawn BIRD file; and, at start, the config at the branch head
// with that one as its fallback (nodeAtHead: the node's role, interface and addresses before anything is opened).
import { join } from 'node:path';
import { parseConfig } from '../../render/config/index.js';
import type { ConfigModel } from '../../render/model.js';
import { readLocalState } from './local-state.js';
import { readRevisionFiles } from '../source/git-objects.js';
import { loadCredentials } from '../source/credentials.js';
import { openRemote } from '../source/git-remote.js';

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

/**
 * The config at the branch head; when Git is unreachable, the config of the revision this node last applied, read
 * from the local Git cache (so a restart during an outage still knows its role, interface and addresses), or null.
 */
export async function nodeAtHead(o: { repo: string; branch: string; node: string; cacheDir: string; credentialsFile?: string; gitTimeoutMs: number; configPath?: string }): Promise<{ reachable: boolean; model: ConfigModel | null }> {
  let gitdir: string | null = null;
  try {
    const remote = openRemote(o.repo, { cacheDir: join(o.cacheDir, 'git'), credentials: loadCredentials({ file: o.credentialsFile }), timeoutMs: o.gitTimeoutMs });
    gitdir = remote.gitdir;
    const head = await remote.fetch(o.branch, { depth: 1 });
    if (!head) return { reachable: true, model: null };
    return { reachable: true, model: parseConfig(await readRevisionFiles(remote.gitdir, head, o.configPath)).model ?? null };
  } catch {
    return { reachable: false, model: gitdir ? await lastAppliedModel({ ...o, gitdir }) : null };
  }
}
