// `gitlb plan`: what a change (e.g. a pull request) does to traffic, from two revisions or two directories.
import { parseArgs } from 'node:util';
import { type CliCommand, UsageError } from '../command.js';
import { readConfigDir } from '../../reconciler/source/read-dir.js';
import { readConfigAtRevision } from '../../reconciler/source/git-tree.js';
import { parseConfig, type ConfigFile } from '../../render/config/index.js';
import { planChanges, invalidHeadPlan, type Plan } from '../../render/plan.js';
import { formatPlanMarkdown, formatPlanText, planToJson } from '../../render/plan-format.js';

const FORMATS = ['text', 'markdown', 'json'] as const;
type Format = (typeof FORMATS)[number];

export const command: CliCommand = {
  name: 'plan',
  summary: 'show what a config change does to traffic (per service: reals, weights, modes, moved connections)',
  help: `usage: gitlb plan --base REV --head REV [--repo DIR] [--format text|markdown|json]
       gitlb plan --base-dir A --head-dir B [--format text|markdown|json]

Compares two revisions of the config: read straight from Git objects (no checkout; REV is a branch, tag, commit
id, optionally with ~N / ^N, e.g. --base origin/main --head HEAD) in the repository DIR (default: .), or two
plain directories. Per service it lists added, removed and changed reals, weight and state changes, mode and
other field changes, the share of Maglev table entries that change backend (= the share of new connections that
will land on a different real) and the reals that gain or lose share; plus node and cluster changes, and the
validation errors of the head revision. All reals count as healthy.

  --format FORMAT   text (default), markdown (ready to post as a pull-request comment) or json (sorted keys)

Exit status (like flux diff): 0 no change, 1 changes, 2 error (including a head revision that does not validate).
`,
  async run(argv) {
    const result = await runPlan(argv);
    process.stdout.write(result.stdout);
    return result.code;
  },
};

/** The whole command minus the process: parses argv, reads both revisions, returns the output and exit code.
 * Usage errors and unreadable revisions throw (the dispatcher turns them into exit status 2). */
export async function runPlan(argv: string[]): Promise<{ code: number; stdout: string }> {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      base: { type: 'string' },
      head: { type: 'string' },
      repo: { type: 'string' },
      'base-dir': { type: 'string' },
      'head-dir': { type: 'string' },
      format: { type: 'string', default: 'text' },
    },
  });
  const format = values.format as Format;
  if (!FORMATS.includes(format)) throw new UsageError(`--format must be one of ${FORMATS.join(', ')}, not '${values.format}'`);
  const byRev = values.base !== undefined || values.head !== undefined;
  const byDir = values['base-dir'] !== undefined || values['head-dir'] !== undefined;
  if (byRev === byDir) throw new UsageError('give either --base and --head, or --base-dir and --head-dir');
  if (byRev && (!values.base || !values.head)) throw new UsageError('--base and --head are both required');
  if (byDir && (!values['base-dir'] || !values['head-dir'])) throw new UsageError('--base-dir and --head-dir are both required');
  if (byDir && values.repo) throw new UsageError('--repo goes with --base/--head');

  let baseFiles: ConfigFile[];
  let headFiles: ConfigFile[];
  if (byRev) {
    const repo = values.repo ?? '.';
    baseFiles = await readConfigAtRevision(repo, values.base!);
    headFiles = await readConfigAtRevision(repo, values.head!);
  } else {
    baseFiles = await readConfigDir(values['base-dir']!);
    headFiles = await readConfigDir(values['head-dir']!);
  }

  const base = parseConfig(baseFiles);
  const head = parseConfig(headFiles);
  const plan: Plan = head.model
    ? planChanges(base.model, head.model, head.diagnostics)
    : invalidHeadPlan(head.diagnostics, base.model !== null);
  const stdout = format === 'json' ? planToJson(plan) : format === 'markdown' ? formatPlanMarkdown(plan) : formatPlanText(plan);
  return { code: !plan.headValid ? 2 : plan.changed ? 1 : 0, stdout };
}
