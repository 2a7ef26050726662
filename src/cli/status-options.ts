// Options shared by the read-only commands over the status branch (`gitlb status`, `gitlb history`).
import { type Command, pathOption } from './command.js';

export interface StatusReadOptions {
  repo: string;
  statusBranch?: string;
  branch: string;
  credentialsFile?: string;
  json: boolean;
  path: string;
}

export function addStatusReadOptions(cmd: Command): Command {
  return cmd
    .requiredOption('--repo <url|dir>', 'config repository: http(s) URL or local path')
    .option('--status-branch <name>', "status branch (default: the config branch's Cluster.spec.status.branch, else gitlb-status)")
    .option('--branch <name>', 'config branch', 'main')
    .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
    .option('--json', 'print JSON (same as --format json)', false)
    .addOption(pathOption());
}
