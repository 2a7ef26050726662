// `gitlb status`: per node, the applied revision, agreement of table digests across nodes, the last error.
import { parseArgs } from 'node:util';
import { type CliCommand, UsageError } from '../command.js';
import { STATUS_READ_OPTIONS, withStatusBranch } from '../../reconciler/status/open-status-remote.js';
import { readAllStatuses, formatStatusTable } from '../../reconciler/status/status-report.js';

export const command: CliCommand = {
  name: 'status',
  summary: 'show every node\'s applied revision, digest agreement and last error (from the status branch)',
  help: `usage: gitlb status --repo URL|DIR [--status-branch NAME] [--branch CONFIG-BRANCH] [--credentials-file FILE] [--json]

Reads status/<node>.yaml of every node from the status branch (--status-branch, else the config
branch's Cluster.spec.status.branch, else gitlb-status) and prints a table:
NODE, APPLIED revision, DIGESTS (whether the node's Maglev table digests agree with the other nodes'), LAST ERROR.
`,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      options: STATUS_READ_OPTIONS,
    });
    if (!values.repo) throw new UsageError('--repo is required');
    const statuses = await withStatusBranch(
      { repo: values.repo, credentialsFile: values['credentials-file'], configBranch: values.branch, statusBranch: values['status-branch'] },
      (r, statusBranch) => readAllStatuses(r, statusBranch, (problem) => process.stderr.write(`gitlb status: skipped ${problem}\n`)),
    );
    process.stdout.write(values.json ? JSON.stringify(statuses, null, 2) + '\n' : formatStatusTable(statuses));
    return statuses.some((s) => s.lastAttempt?.result === 'failed') ? 1 : 0;
  },
};
