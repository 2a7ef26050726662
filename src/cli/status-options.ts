// Options shared by the read-only commands over the status branch (`gitlb status`, `gitlb history`).
import { type Command, gitTimeoutOption, pathOption } from './command.js';

export interface StatusReadOptions {
  repo: string;
  statusBranch?: string;
  branch: string;
  credentialsFile?: string;
  json: boolean;
  path: string;
  /** Seconds (`--git-timeout`, as in `gitlb run`). */
  gitTimeout: number;
}

export function addStatusReadOptions(cmd: Command): Command {
  return cmd
    .requiredOption('--repo <url|dir>', 'config repository: http(s) URL or local path')
    .option('--status-branch <name>', "status branch (default: the config branch's Cluster.spec.status.branch, else gitlb-status)")
    .option('--branch <name>', 'config branch', 'main')
    .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
    .option('--json', 'print JSON (same as --format json)', false)
    .addOption(pathOption())
    .addOption(gitTimeoutOption('deadline of each Git fetch (a slow Git server needs more)'));
}

/** The options withStatusBranch takes, from the parsed command line. */
export function statusBranchOptions(o: StatusReadOptions) {
  return {
    repo: o.repo,
    credentialsFile: o.credentialsFile,
    configBranch: o.branch,
    statusBranch: o.statusBranch,
    configPath: o.path,
    timeoutMs: Math.round(o.gitTimeout * 1000),
  };
}
