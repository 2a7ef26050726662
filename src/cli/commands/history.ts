// `gitlb history`: the audit trail — which revision each node applied and when, and whose commit it was.
import { defineCommand } from '../command.js';
import { addStatusReadOptions, statusBranchOptions, type StatusReadOptions } from '../status-options.js';
import { withStatusBranch, type ConfigTip } from '../../reconciler/status/open-status-remote.js';
import { readHistory, formatHistory, withConfigCommits } from '../../reconciler/status/status-report.js';
import { readRevisionFiles } from '../../reconciler/source/git-objects.js';
import type { GitRemote } from '../../reconciler/source/git-remote.js';
import { parseConfig } from '../../render/config/index.js';

/** Node names of the config at the branch head (empty when it is missing or invalid). */
async function configNodes(remote: GitRemote, configTip: ConfigTip, path: string): Promise<string[]> {
  const tip = await configTip();
  if (!tip) return [];
  const { model } = parseConfig(await readRevisionFiles(remote.gitdir, tip, path));
  return model?.nodes.map((n) => n.metadata.name) ?? [];
}

export const command = defineCommand<StatusReadOptions & { node?: string }>({
  name: 'history',
  summary: 'audit trail: which config revision each node applied, when, and whose commit it was',
  description: `Walks the status branch (--status-branch, else the config branch's Cluster.spec.status.branch, else
gitlb-status) and prints every change of a node's applied revision, oldest first by the time applied: time applied, node,
revision, the status commit that recorded it, the author and subject of the applied config commit, and who signed
it as verified by the node ("(not verified)" when verification was off or only warned; docs/verification.md).`,
  exitStatus: 'Exit status: 0 printed (possibly nothing recorded yet), 1 runtime failure (unreadable repository, --node names no node), 2 usage error.',
  define: (cmd) => addStatusReadOptions(cmd).option('--node <name>', "only this node's entries (a node of the config or of the status history)"),
  async run(opts) {
    const entries = await withStatusBranch(statusBranchOptions(opts), async (r, statusBranch, configTip) => {
      let all = await readHistory(r, statusBranch);
      if (opts.node) {
        const node = opts.node;
        all = all.filter((e) => e.node === node);
        if (!all.length && !(await configNodes(r, configTip, opts.path)).includes(node)) {
          throw new Error(`no node '${node}' in the config of branch '${opts.branch}' nor in the status history`);
        }
      }
      return withConfigCommits(r, opts.branch, all);
    });
    process.stdout.write(opts.json ? JSON.stringify(entries, null, 2) + '\n' : formatHistory(entries));
    return 0;
  },
});
