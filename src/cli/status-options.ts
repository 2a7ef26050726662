// Options shared by the commands over the status branch: the read-only `gitlb status` and `gitlb history`, and
// `gitlb down --repo`, which records a node's removal there.
import { type Command, commandGitTimeoutOption, gitTimeoutMs, pathOption } from './command.js';

/** What withStatusBranch needs from a command line. */
export interface StatusBranchArgs {
  repo: string;
  statusBranch?: string;
  branch: string;
  credentialsFile?: string;
  path: string;
  /** Seconds (`--git-timeout`, as in `gitlb run`). */
  gitTimeout: number;
}

export interface StatusReadOptions extends StatusBranchArgs {
  json: boolean;
}

export function addStatusReadOptions(cmd: Command): Command {
  return cmd
    .requiredOption('--repo <url|dir>', 'config repository: http(s) URL or local path')
    .option('--status-branch <name>', "status branch (default: the config branch's Cluster.spec.status.branch, else gitlb-status)")
    .option('--branch <name>', 'config branch', 'main')
    .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
    .option('--json', 'print JSON (same as --format json)', false)
    .addOption(pathOption())
    .addOption(commandGitTimeoutOption());
}

/** The options withStatusBranch takes, from the parsed command line. */
export function statusBranchOptions(o: StatusBranchArgs) {
  return {
    repo: o.repo,
    credentialsFile: o.credentialsFile,
    configBranch: o.branch,
    statusBranch: o.statusBranch,
    configPath: o.path,
    timeoutMs: gitTimeoutMs(o.gitTimeout),
  };
}
