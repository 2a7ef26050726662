// `gitlb history`: the audit trail — which revision each node applied and when, from the status branch's log.
import { parseArgs } from 'node:util';
import { type CliCommand, UsageError } from '../command.js';
import { STATUS_READ_OPTIONS, withStatusBranch } from '../../reconciler/status/open-status-remote.js';
import { readHistory, formatHistory } from '../../reconciler/status/status-report.js';

export const command: CliCommand = {
  name: 'history',
  summary: 'audit trail: which config revision each node applied, and when (git log of the status branch)',
  help: `usage: gitlb history --repo URL|DIR [--status-branch NAME] [--branch CONFIG-BRANCH] [--node NAME] [--credentials-file FILE] [--json]

Walks the status branch (--status-branch, else the config branch's Cluster.spec.status.branch, else
gitlb-status) from its first commit and prints every change of a node's
applied revision: time applied, node, revision, and the status commit that recorded it.
`,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      options: { ...STATUS_READ_OPTIONS, node: { type: 'string' } },
    });
    if (!values.repo) throw new UsageError('--repo is required');
    let entries = await withStatusBranch(
      { repo: values.repo, credentialsFile: values['credentials-file'], configBranch: values.branch, statusBranch: values['status-branch'] },
      (r, statusBranch) => readHistory(r, statusBranch),
    );
    if (values.node) entries = entries.filter((e) => e.node === values.node);
    process.stdout.write(values.json ? JSON.stringify(entries, null, 2) + '\n' : formatHistory(entries));
    return 0;
  },
};
