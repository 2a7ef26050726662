// Which data plane a node drives, from its Node document at the branch head (lb when it cannot tell).
import { parseConfig } from '../render/config/index.js';
import type { GitCredentials } from './source/credentials.js';
import { openRemote } from './source/git-remote.js';
import { readRevisionFiles } from './source/git-objects.js';

export async function detectRole(repo: string, branch: string, node: string, cacheDir: string, credentials?: GitCredentials): Promise<'lb' | 'backend'> {
  try {
    const remote = openRemote(repo, { cacheDir, credentials });
    const head = await remote.fetch(branch, { depth: 1 });
    if (!head) return 'lb';
    const { model } = parseConfig(await readRevisionFiles(remote.gitdir, head));
    return model?.nodes.find((n) => n.metadata.name === node)?.spec.role ?? 'lb';
  } catch {
    return 'lb';
  }
}
