// `gitlb plan`: what a change (e.g. a pull request) does to traffic, from two revisions or two directories.
import { defineCommand, formatOption, pathOption, UsageError } from '../command.js';
import { readConfigDir } from '../../reconciler/source/read-dir.js';
import { readConfigAtRevision } from '../../reconciler/source/git-tree.js';
import { join } from 'node:path';
import { formatDiagnostic, parseConfig, type ConfigFile } from '../../render/config/index.js';
import { renderDesiredState } from '../../render/desired.js';
import { describeOp, opToJson, planOps } from '../../render/ops.js';
import { planChanges, invalidHeadPlan, type Plan } from '../../render/plan.js';
import { formatPlanMarkdown, formatPlanText, planToJson } from '../../render/plan-format.js';

const FORMATS = ['text', 'markdown', 'json'] as const;
type Format = (typeof FORMATS)[number];

interface PlanOptions {
  base?: string;
  head?: string;
  repo?: string;
  baseDir?: string;
  headDir?: string;
  format: Format;
  exitCode: boolean;
  live: boolean;
  node?: string;
  pinRoot: string;
  path: string;
}

/** Exit status of `--exit-code` when the plan changes something (0 and 1 keep their meaning). */
export const EXIT_CHANGES = 3;

/** The config under a directory option; a missing directory is named by its option and path, not by realpath's ENOENT. */
async function readDirOption(option: string, dir: string, path: string) {
  try {
    return await readConfigDir(join(dir, path));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new Error(`${option} ${join(dir, path)}: no such directory`);
    throw err;
  }
}

export const command = defineCommand<PlanOptions>({
  name: 'plan',
  summary: 'show what a config change does to traffic (per service: reals, weights, modes, moved connections)',
  description: `Compares two revisions of the config: read straight from Git objects (no checkout; REV is a branch, tag, commit
id, optionally with ~N / ^N, e.g. --base origin/main --head HEAD) in the repository DIR (default: .), or two
plain directories (--base-dir A --head-dir B). Per service it lists added, removed and changed reals, weight and
state changes, mode and other field changes, the share of Maglev table entries that change backend (= the share of
new connections that will land on a different real) and the reals that gain or lose share; plus node and cluster
changes, and the validation errors of the head revision. All reals count as healthy.`,
  exitStatus: `Exit status: 0 planned (changes or not), 1 runtime failure (unreadable revision, head revision does not
validate), 2 usage error; with --exit-code, ${EXIT_CHANGES} when the plan changes something.`,
  define: (cmd) =>
    cmd
      .option('--base <rev>', 'base revision (with --head)')
      .option('--head <rev>', 'head revision (with --base)')
      .option('--repo <dir>', 'repository holding --base and --head (default: .)')
      .option('--base-dir <dir>', 'base config directory (with --head-dir)')
      .option('--head-dir <dir>', 'head config directory (with --base-dir)')
      .addOption(formatOption(FORMATS, 'text', 'text, markdown (ready to post as a pull-request comment) or json (sorted keys)'))
      .addOption(pathOption())
      .option('--exit-code', `exit ${EXIT_CHANGES} when the plan changes something (like git diff --exit-code)`, false)
      .option('--live', 'print the exact map operations node --node would perform to reach --head (or --head-dir), read from its pinned maps', false)
      .option('--node <name>', 'the node whose pinned maps --live reads')
      .option('--pin-root <dir>', 'bpffs root of pinned maps (node dir below it), for --live', '/sys/fs/bpf/gitlb'),
  async run(opts) {
    const result = await planCore(opts);
    process.stdout.write(result.stdout);
    return result.code;
  },
});

/** The whole command minus the process: parses argv, reads both revisions, returns the output and exit code.
 * Usage errors throw UsageError, unreadable revisions throw as they are (exit status 1 from the dispatcher). */
export async function runPlan(argv: string[]): Promise<{ code: number; stdout: string }> {
  return planCore(command.parse(argv).opts as unknown as PlanOptions);
}

async function planCore(opts: PlanOptions): Promise<{ code: number; stdout: string }> {
  if (opts.live) return livePlan(opts);
  const byRev = opts.base !== undefined || opts.head !== undefined;
  const byDir = opts.baseDir !== undefined || opts.headDir !== undefined;
  if (byRev === byDir) throw new UsageError('give either --base and --head, or --base-dir and --head-dir');
  if (byRev && (!opts.base || !opts.head)) throw new UsageError('--base and --head are both required');
  if (byDir && (!opts.baseDir || !opts.headDir)) throw new UsageError('--base-dir and --head-dir are both required');
  if (byDir && opts.repo) throw new UsageError('--repo goes with --base/--head');

  let baseFiles: ConfigFile[];
  let headFiles: ConfigFile[];
  if (byRev) {
    const repo = opts.repo ?? '.';
    baseFiles = await readConfigAtRevision(repo, opts.base!, opts.path);
    headFiles = await readConfigAtRevision(repo, opts.head!, opts.path);
  } else {
    baseFiles = await readDirOption('--base-dir', opts.baseDir!, opts.path);
    headFiles = await readDirOption('--head-dir', opts.headDir!, opts.path);
  }

  const base = parseConfig(baseFiles);
  const head = parseConfig(headFiles);
  const plan: Plan = head.model
    ? planChanges(base.model, head.model, head.diagnostics)
    : invalidHeadPlan(head.diagnostics, base.model !== null);
  const stdout = opts.format === 'json' ? planToJson(plan) : opts.format === 'markdown' ? formatPlanMarkdown(plan) : formatPlanText(plan);
  const code = !plan.headValid ? 1 : plan.changed && opts.exitCode ? EXIT_CHANGES : 0;
  return { code, stdout };
}

/**
 * `--live`: the ops the node's data plane would execute to serve the head revision (all reals counted healthy),
 * from what its pinned maps hold now. Reads pins only: nothing is loaded, attached or written.
 */
async function livePlan(opts: PlanOptions): Promise<{ code: number; stdout: string }> {
  if (!opts.node) throw new UsageError('--live needs --node');
  if (opts.base !== undefined || opts.baseDir !== undefined) throw new UsageError('--live compares with the live maps: no --base/--base-dir');
  if ((opts.head === undefined) === (opts.headDir === undefined)) throw new UsageError('--live needs --head (with --repo) or --head-dir');
  if (opts.format === 'markdown') throw new UsageError('--live prints text or json');
  const files = opts.head !== undefined ? await readConfigAtRevision(opts.repo ?? '.', opts.head) : await readDirOption('--head-dir', opts.headDir!, '');
  const parsed = parseConfig(files);
  if (!parsed.model) {
    const errors = parsed.diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);
    return { code: 1, stdout: `head revision does not validate:\n${errors.join('\n')}\n` };
  }
  const desired = renderDesiredState(parsed.model, opts.node);
  const pins = join(opts.pinRoot, opts.node);
  const { readPinnedLbLive } = await import('../../bpf/dataplane/index.js');
  const { readPinnedBackendLive } = await import('../../bpf/backend/index.js');
  const live = desired.role === 'backend' ? readPinnedBackendLive(pins) : readPinnedLbLive(pins);
  const ops = planOps(live, desired);
  const stdout = opts.format === 'json'
    ? JSON.stringify(ops.map(opToJson), null, 2) + '\n'
    : `${opts.node} (${desired.role}, pins ${pins}): ${ops.length === 0 ? 'nothing to do' : `${ops.length} map operations`}\n` +
      ops.map((o, i) => `${String(i + 1).padStart(4)}. ${describeOp(o)}\n`).join('');
  return { code: ops.length && opts.exitCode ? EXIT_CHANGES : 0, stdout };
}
