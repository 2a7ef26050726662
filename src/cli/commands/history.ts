// `gitlb history`: the audit trail — which revision each node applied and when, from the status branch's log.
import { parseArgs } from 'node:util';
import { type CliCommand, UsageError } from '../command.js';
import { resolveStatusBranch, withStatusRemote } from '../../reconciler/status/open-status-remote.js';
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
      options: {
        repo: { type: 'string' },
        'status-branch': { type: 'string' },
        branch: { type: 'string', default: 'main' },
        node: { type: 'string' },
        'credentials-file': { type: 'string' },
        json: { type: 'boolean', default: false },
      },
    });
    if (!values.repo) throw new UsageError('--repo is required');
    let entries = await withStatusRemote(values.repo, values['credentials-file'], async (r) => readHistory(r, await resolveStatusBranch(r, values.branch!, values['status-branch'])));
    if (values.node) entries = entries.filter((e) => e.node === values.node);
    process.stdout.write(values.json ? JSON.stringify(entries, null, 2) + '\n' : formatHistory(entries));
    return 0;
  },
};
