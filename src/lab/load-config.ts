// Reads and validates a config directory for the lab; errors are the config stage's own diagnostics.
import { parseConfig, formatDiagnostic } from '../render/config/index.js';
import type { ConfigModel } from '../render/model.js';
import { readConfigDir } from '../reconciler/source/read-dir.js';

export async function loadConfigModel(dir: string): Promise<ConfigModel> {
  const files = await readConfigDir(dir);
  if (files.length === 0) throw new Error(`lab: no config files in ${dir}`);
  const result = parseConfig(files);
  if (!result.model) {
    const errors = result.diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);
    throw new Error(`lab: the config in ${dir} is invalid:\n${errors.join('\n')}`);
  }
  return result.model;
}
