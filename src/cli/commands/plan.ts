// `gitlb plan`: what a change (e.g. a pull request, or uncommitted edits) does to traffic, between two revisions or
// directories in any mix.
import { defineCommand, formatOption, pathOption, UsageError } from '../command.js';
import { readConfigDir } from '../../reconciler/source/read-dir.js';
import { gitdirOf, readConfigAtRevision } from '../../reconciler/source/git-tree.js';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { formatDiagnostic, parseConfig, type ConfigFile } from '../../render/config/index.js';
import { renderDesiredState } from '../../render/desired.js';
import { describeOp, opToJson } from '../../render/ops-text.js';
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
  /** --live with nothing pinned: plan against an empty data plane instead of failing. */
  emptyLive: boolean;
}

/** Exit status of `--exit-code` when the plan changes something (0 and 1 keep their meaning). */
export const EXIT_CHANGES = 3;

/** The config under a directory option; a missing directory is named by its option and path, not by realpath's ENOENT. */
async function readDirOption(option: string, dir: string, path: string) {
  try {
    return await readConfigDir(dir, path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new Error(`${option} ${join(dir, path)}: no such directory`);
    throw err;
  }
}

export const command = defineCommand<PlanOptions>({
  name: 'plan',
  summary: 'show what a config change does to traffic (per service: reals, weights, modes, moved connections)',
  description: `Compares two revisions of the config. Each side is a revision read straight from Git objects (--base /
--head REV: no checkout; REV is a branch, tag, commit id, optionally with ~N / ^N) in the repository --repo
(default: .), or a directory as it is on disk (--base-dir / --head-dir DIR: every config file there, committed
or not), in any mix: --base origin/main --head HEAD, --base-dir A --head-dir B, or --base HEAD --head-dir . (what
the uncommitted edits of the working tree change). Per service it lists added, removed and changed reals, weight and
state changes, mode and other field changes, the share of Maglev table entries that change backend (= the share of
new connections that will land on a different real) and the reals that gain or lose share; plus node and cluster
changes, and the validation errors of the head revision. All reals count as healthy.`,
  exitStatus: `Exit status: 0 planned (changes or not), 1 runtime failure (unreadable revision, head revision does not
validate, --live with nothing pinned under --pin-root/<node> and no --empty-live), 2 usage error; with --exit-code, ${EXIT_CHANGES} when the plan changes something.`,
  define: (cmd) =>
    cmd
      .option('--base <rev>', 'base revision (or --base-dir)')
      .option('--head <rev>', 'head revision (or --head-dir)')
      .option('--repo <dir>', 'repository holding --base and/or --head (default: .)')
      .option('--base-dir <dir>', 'base config directory, as it is on disk (or --base)')
      .option('--head-dir <dir>', 'head config directory, as it is on disk (or --head)')
      .addOption(formatOption(FORMATS, 'text', 'text, markdown (ready to post as a pull-request comment) or json (sorted keys)'))
      .addOption(pathOption())
      .option('--exit-code', `exit ${EXIT_CHANGES} when the plan changes something (like git diff --exit-code)`, false)
      .option('--live', 'print the exact map operations node --node would perform to reach --head (or --head-dir), read from its pinned maps', false)
      .option('--node <name>', 'the node whose pinned maps --live reads')
      .option('--pin-root <dir>', 'bpffs root of pinned maps (node dir below it), for --live', '/sys/fs/bpf/gitlb')
      .option('--empty-live', "--live when nothing is pinned under --pin-root/<node>: plan against an empty data plane (a node's first apply) instead of failing", false),
  async run(opts) {
    const result = await planCore(opts);
    process.stdout.write(result.stdout);
    return result.code;
  },
});

/** The whole command minus the process: parses argv, reads both sides, returns the output and exit code.
 * Usage errors throw UsageError, unreadable revisions throw as they are (exit status 1 from the dispatcher). */
export async function runPlan(argv: string[]): Promise<{ code: number; stdout: string }> {
  return planCore(command.parse(argv).opts as unknown as PlanOptions);
}

/** One side of the comparison: a revision of --repo, or a directory as it is on disk. */
type Side = { option: '--base' | '--head'; rev: string } | { option: '--base-dir' | '--head-dir'; dir: string };

/** The side given by `revOption` or `dirOption` (exactly one of them), or a usage error naming both. */
function sideOf(what: 'base' | 'head', rev: string | undefined, dir: string | undefined): Side {
  const [revOption, dirOption] = what === 'base' ? (['--base', '--base-dir'] as const) : (['--head', '--head-dir'] as const);
  if (rev !== undefined && dir !== undefined) throw new UsageError(`${revOption} and ${dirOption} both give the ${what}: give one of them`);
  if (rev !== undefined) {
    if (!rev) throw new UsageError(`${revOption}: empty revision`);
    return { option: revOption, rev };
  }
  if (dir !== undefined) {
    if (!dir) throw new UsageError(`${dirOption}: empty directory`);
    return { option: dirOption, dir };
  }
  throw new UsageError(`no ${what}: give ${revOption} REV or ${dirOption} DIR`);
}

/** The config of one side; a revision that cannot be read is named by its option (`--base: unknown revision 'x'`). */
async function readSide(side: Side, repo: string, path: string): Promise<ConfigFile[]> {
  if (!('rev' in side)) return readDirOption(side.option, side.dir, path);
  try {
    return await readConfigAtRevision(repo, side.rev, path);
  } catch (err) {
    throw new Error(`${side.option}: ${(err as Error).message}`);
  }
}

async function planCore(opts: PlanOptions): Promise<{ code: number; stdout: string }> {
  if (opts.live) return livePlan(opts);
  // Each side is a revision or a directory, in any mix: --base HEAD --head-dir . plans the uncommitted edits.
  if ([opts.base, opts.baseDir, opts.head, opts.headDir].every((o) => o === undefined)) {
    throw new UsageError('give the base (--base REV or --base-dir DIR) and the head (--head REV or --head-dir DIR)');
  }
  const baseSide = sideOf('base', opts.base, opts.baseDir);
  const headSide = sideOf('head', opts.head, opts.headDir);
  if (opts.repo !== undefined && !('rev' in baseSide) && !('rev' in headSide)) {
    throw new UsageError('--repo holds the revisions of --base/--head: with --base-dir and --head-dir there is none');
  }
  const repo = opts.repo ?? '.';
  if ('rev' in baseSide || 'rev' in headSide) {
    try {
      gitdirOf(repo);
    } catch (err) {
      throw new Error(`--repo${opts.repo === undefined ? ' (default .)' : ''}: ${(err as Error).message}`);
    }
  }
  const baseFiles = await readSide(baseSide, repo, opts.path);
  const headFiles = await readSide(headSide, repo, opts.path);

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
  const files = await readSide(sideOf('head', opts.head, opts.headDir), opts.repo ?? '.', opts.path);
  const parsed = parseConfig(files);
  if (!parsed.model) {
    const errors = parsed.diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);
    return { code: 1, stdout: `head revision does not validate:\n${errors.join('\n')}\n` };
  }
  const desired = renderDesiredState(parsed.model, opts.node);
  const pins = join(opts.pinRoot, opts.node);
  // No pins is what a wrong --pin-root looks like: planning against it would list the whole config as if the node
  // were empty. That is an error unless asked for (--empty-live), and then said plainly.
  const nothingPinned = !existsSync(pins) || readdirSync(pins).length === 0;
  if (nothingPinned && !opts.emptyLive)
    throw new Error(`nothing is pinned under ${pins}: no live data plane of ${opts.node} to compare with (wrong --pin-root? the node's daemon uses its own); --empty-live plans against an empty data plane`);
  const { readPinnedLbLive } = await import('../../bpf/dataplane/index.js');
  const { readPinnedBackendLive } = await import('../../bpf/backend/index.js');
  const { pinnedTableSizes } = await import('../../bpf/dataplane/resize.js');
  const { diff } = await import('../../reconciler/converge.js');
  // the pins as a read-only data plane: converge's diff plans against them as the node's daemon would (table
  // resizes first, from the pinned map sizes) and validates the head's state for the node's role
  const role = desired.role === 'backend' ? 'backend' : 'lb';
  const { ops } = await diff({
    readLive: async () => (role === 'backend' ? readPinnedBackendLive(pins) : readPinnedLbLive(pins)),
    tableSizes: () => (role === 'lb' ? pinnedTableSizes(pins) : {}),
    target: { role },
  }, desired);
  const stdout = opts.format === 'json'
    ? JSON.stringify(ops.map(opToJson), null, 2) + '\n'
    : (nothingPinned ? `nothing is pinned under ${pins}: the live side is empty (--empty-live)\n` : '') +
      `${opts.node} (${desired.role}, pins ${pins}): ${ops.length === 0 ? 'nothing to do' : `${ops.length} map operations`}\n` +
      ops.map((o, i) => `${String(i + 1).padStart(4)}. ${describeOp(o)}\n`).join('');
  return { code: ops.length && opts.exitCode ? EXIT_CHANGES : 0, stdout };
}
