// `gitlb render`: the desired data-plane state of one node, computed from a config directory.
import { parseArgs } from 'node:util';
import { type CliCommand, UsageError } from '../command.js';
import { readConfigDir } from '../../reconciler/source/read-dir.js';
import { parseConfig, formatDiagnostic } from '../../render/config/index.js';
import { renderDesiredState, desiredStateToJson } from '../../render/desired.js';
import { formatDesiredStateText } from '../../render/desired-format.js';

export const command: CliCommand = {
  name: 'render',
  summary: 'print the desired data-plane state of a node (services, reals, Maglev tables and digests)',
  help: `usage: gitlb render [DIR] --node NAME [--format json|text] [--tables]

Validates the config in DIR (default: the current directory) and prints what node NAME's data plane must hold:
listeners (VIP:port/protocol with resolved forwarding), services with their reals, ids, weights and table shares,
each service's Maglev table digest, and for backend nodes the VIPs to own locally.

  --node NAME       the node to render (required)
  --format FORMAT   json (stable: sorted keys, see docs/render.md) or text (default)
  --tables          include the Maglev tables (JSON: number arrays; text: run-length encoded)

Every node renders the same digest for the same service and revision; compare them across nodes and machines.
Exit status: 0 rendered, 1 the config has errors (printed as file:line:col), 2 usage or I/O error.
`,
  async run(argv) {
    const result = await runRender(argv);
    process.stderr.write(result.stderr);
    process.stdout.write(result.stdout);
    return result.code;
  },
};

/** The whole command minus the process: returns what to print and the exit code. Usage errors, I/O errors and
 * an unknown node throw (the dispatcher turns them into exit status 2). */
export async function runRender(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { values, positionals } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: true,
    options: {
      node: { type: 'string' },
      format: { type: 'string', default: 'text' },
      tables: { type: 'boolean', default: false },
    },
  });
  if (!values.node) throw new UsageError('--node is required');
  if (values.format !== 'json' && values.format !== 'text') throw new UsageError(`--format must be json or text, not '${values.format}'`);
  if (positionals.length > 1) throw new UsageError('at most one config directory');
  const dir = positionals[0] ?? '.';

  const { model, diagnostics } = parseConfig(await readConfigDir(dir));
  const stderr = diagnostics.map((d) => formatDiagnostic(d) + '\n').join('');
  if (!model) return { code: 1, stdout: '', stderr };
  const state = renderDesiredState(model, values.node);
  const tables = values.tables ?? false;
  const stdout = values.format === 'json' ? desiredStateToJson(state, { tables }) : formatDesiredStateText(state, { tables });
  return { code: 0, stdout, stderr };
}
