// `gitlb validate [DIR]`: checks a config directory the way a node checks a revision, without applying it.
import { join } from 'node:path';
import { stat } from 'node:fs/promises';
import { defineCommand, formatOption, pathOption, UsageError } from '../command.js';
import { formatDiagnostic, parseConfig } from '../../render/config/index.js';
import { ConfigPathOutside, readConfigDir } from '../../reconciler/source/read-dir.js';
import { escapeControl } from '../../render/escape.js';

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

export const command = defineCommand<{ format: 'text' | 'json'; path: string }>({
  name: 'validate',
  summary: 'check a config directory (schema and semantic rules) without applying it',
  description: `Validates the gitlb config in DIR (default: the current directory): every YAML file outside
.git/, status/ and hidden paths, against the schemas in schemas/ and the semantic rules of
docs/config.md. Prints every problem as  FILE:LINE:COL: error|warning: MESSAGE  and a count.`,
  exitStatus: 'Exit status: 0 valid (warnings allowed), 1 invalid, 2 usage error (bad option, DIR not a directory).',
  define: (cmd) =>
    cmd
      .argument('[DIR]', 'config directory', '.')
      .addOption(formatOption(['text', 'json'], 'text', 'text, or one JSON object {valid, errors, warnings, diagnostics}'))
      .addOption(pathOption()),
  async run(opts, args) {
    const dir = join(args[0] ?? '.', opts.path);
    const info = await stat(dir).catch(() => null);
    if (!info?.isDirectory()) throw new UsageError(`${dir} is not a directory`);

    const files = await readConfigDir(args[0] ?? '.', opts.path).catch((err: Error) => {
      throw err instanceof ConfigPathOutside ? new UsageError(escapeControl(err.message)) : err;
    });
    const { model, diagnostics } = parseConfig(files);
    // Paths are shown relative to where the user stands, so terminals and editors can open them.
    const shown = diagnostics.map((d) => ({ ...d, file: join(dir, d.file) }));
    const errors = shown.filter((d) => d.severity === 'error').length;
    const warnings = shown.filter((d) => d.severity === 'warning').length;
    const valid = model !== null;
    if (opts.format === 'json') {
      // JSON escapes C0 itself; C1 and bidi controls are escaped like in the text form.
      const json = shown.map((d) => ({ ...d, file: escapeControl(d.file), message: escapeControl(d.message) }));
      process.stdout.write(JSON.stringify({ valid, errors, warnings, diagnostics: json }, null, 2) + '\n');
    } else {
      for (const d of shown) process.stdout.write(formatDiagnostic(d) + '\n');
      const summary = valid
        ? `valid: ${plural(model.services.length, 'service')}, ${plural(model.nodes.length, 'node')}, ${plural(warnings, 'warning')}`
        : `invalid: ${plural(errors, 'error')}, ${plural(warnings, 'warning')}`;
      process.stdout.write(summary + '\n');
    }
    return valid ? 0 : 1;
  },
});
