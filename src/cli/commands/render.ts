// `gitlb render`: the desired data-plane state of one node, computed from a config directory.
import { join } from 'node:path';
import { defineCommand, formatOption, pathOption } from '../command.js';
import { readConfigDir } from '../../reconciler/source/read-dir.js';
import { parseConfig, formatDiagnostic } from '../../render/config/index.js';
import { renderDesiredState, desiredStateToJson } from '../../render/desired.js';
import { formatDesiredStateText } from '../../render/desired-format.js';
import { decideAnnouncements } from '../../render/bgp/announce.js';
import { renderBirdConfig } from '../../render/bgp/bird.js';

interface RenderOptions {
  node: string;
  format: 'json' | 'text';
  tables: boolean;
  bird: boolean;
  path: string;
}

export const command = defineCommand<RenderOptions>({
  name: 'render',
  summary: 'print the desired data-plane state of a node (services, reals, Maglev tables and digests)',
  description: `Validates the config in DIR (default: the current directory) and prints what node NAME's data plane must hold:
listeners (VIP:port/protocol with resolved forwarding), services with their reals, ids, weights and table shares,
each service's Maglev table digest, and for backend nodes the VIPs to own locally.

Every node renders the same digest for the same service and revision; compare them across nodes and machines.`,
  exitStatus: 'Exit status: 0 rendered, 1 the config has errors (printed as file:line:col) or cannot be read, 2 usage error.',
  define: (cmd) =>
    cmd
      .argument('[DIR]', 'config directory', '.')
      .requiredOption('--node <name>', 'the node to render')
      .addOption(formatOption(['json', 'text'], 'text', 'json (stable: sorted keys, see docs/render.md) or text'))
      .option('--tables', 'include the Maglev tables (JSON: number arrays; text: run-length encoded)', false)
      .option(
        '--bird',
        "print the node's generated BIRD configuration instead (docs/bgp.md): every VIP announced as with the revision applied, the data plane up and every real healthy; session passwords redacted",
        false,
      )
      .addOption(pathOption()),
  async run(opts, args) {
    const result = await renderCore(opts, args[0] ?? '.');
    process.stderr.write(result.stderr);
    process.stdout.write(result.stdout);
    return result.code;
  },
});

/** The whole command minus the process: returns what to print and the exit code. Usage errors throw UsageError;
 * I/O errors and an unknown node throw as they are (exit status 1 from the dispatcher). */
export async function runRender(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { opts, args } = command.parse(argv);
  return renderCore(opts as unknown as RenderOptions, args[0] ?? '.');
}

async function renderCore(opts: RenderOptions, dir: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const { model, diagnostics } = parseConfig(await readConfigDir(dir, opts.path));
  const stderr = diagnostics.map((d) => formatDiagnostic(d) + '\n').join('');
  if (!model) return { code: 1, stdout: '', stderr };
  const state = renderDesiredState(model, opts.node);
  if (opts.bird) {
    const facts = { node: opts.node, model, desired: state, dataPlaneUp: true, stopping: false };
    const bird = renderBirdConfig(model, opts.node, decideAnnouncements(facts), { redactPasswords: true });
    if (bird === null) return { code: 1, stdout: '', stderr: stderr + `node '${opts.node}' announces nothing by BGP: it needs role lb, spec.bgp, and Cluster.spec.bgp\n` };
    return { code: 0, stdout: bird, stderr };
  }
  const stdout = opts.format === 'json' ? desiredStateToJson(state, { tables: opts.tables }) : formatDesiredStateText(state, { tables: opts.tables });
  return { code: 0, stdout, stderr };
}
