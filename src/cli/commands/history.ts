// `gitlb history`: the audit trail — which revision each node applied and when, from the status branch's log.
import { defineCommand } from '../command.js';
import { addStatusReadOptions, type StatusReadOptions } from '../status-options.js';
import { withStatusBranch } from '../../reconciler/status/open-status-remote.js';
import { readHistory, formatHistory } from '../../reconciler/status/status-report.js';

export const command = defineCommand<StatusReadOptions & { node?: string }>({
  name: 'history',
  summary: 'audit trail: which config revision each node applied, and when (git log of the status branch)',
  description: `Walks the status branch (--status-branch, else the config branch's Cluster.spec.status.branch, else
gitlb-status) from its first commit and prints every change of a node's applied revision: time applied, node,
revision, and the status commit that recorded it.`,
  define: (cmd) => addStatusReadOptions(cmd).option('--node <name>', "only this node's entries"),
  async run(opts) {
    let entries = await withStatusBranch(
      { repo: opts.repo, credentialsFile: opts.credentialsFile, configBranch: opts.branch, statusBranch: opts.statusBranch },
      (r, statusBranch) => readHistory(r, statusBranch),
    );
    if (opts.node) entries = entries.filter((e) => e.node === opts.node);
    process.stdout.write(opts.json ? JSON.stringify(entries, null, 2) + '\n' : formatHistory(entries));
    return 0;
  },
});
