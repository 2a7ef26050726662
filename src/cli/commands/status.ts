// `gitlb status`: per node, the applied revision, agreement of table digests across nodes, the last error.
import { defineCommand, formatOption } from '../command.js';
import { addStatusReadOptions, type StatusReadOptions } from '../status-options.js';
import { withStatusBranch } from '../../reconciler/status/open-status-remote.js';
import { readAllStatuses, formatStatusTable } from '../../reconciler/status/status-report.js';

export const command = defineCommand<StatusReadOptions & { format: 'text' | 'json' }>({
  name: 'status',
  summary: "show every node's applied revision, digest agreement and last error (from the status branch)",
  description: `Reads status/<node>.yaml of every node from the status branch (--status-branch, else the config
branch's Cluster.spec.status.branch, else gitlb-status) and prints a table:
NODE, APPLIED revision, DIGESTS (whether the node's Maglev table digests agree with the other nodes'), LAST ERROR.`,
  exitStatus: "Exit status: 0 every node healthy, 1 a node's last attempt failed or the status cannot be read, 2 usage error.",
  define: (cmd) => addStatusReadOptions(cmd).addOption(formatOption(['text', 'json'], 'text')),
  async run(opts) {
    const statuses = await withStatusBranch(
      { repo: opts.repo, credentialsFile: opts.credentialsFile, configBranch: opts.branch, statusBranch: opts.statusBranch, configPath: opts.path },
      (r, statusBranch) => readAllStatuses(r, statusBranch, (problem) => process.stderr.write(`gitlb status: skipped ${problem}\n`)),
    );
    const json = opts.json || opts.format === 'json';
    process.stdout.write(json ? JSON.stringify(statuses, null, 2) + '\n' : formatStatusTable(statuses));
    return statuses.some((s) => s.lastAttempt?.result === 'failed') ? 1 : 0;
  },
});
