// Diagnostics of the config stage and their one-line text form.

export interface Diagnostic {
  severity: 'error' | 'warning';
  file: string;
  line: number; // 1-based
  col: number; // 1-based
  message: string;
}

/** `path:LINE:COL: error: message` — the form editors and terminals turn into links. */
export function formatDiagnostic(d: Diagnostic): string {
  return `${d.file}:${d.line}:${d.col}: ${d.severity}: ${d.message}`;
}

/** Stable order: by file, then position, errors before warnings, then text. */
export function compareDiagnostics(a: Diagnostic, b: Diagnostic): number {
  if (a.file !== b.file) return a.file < b.file ? -1 : 1;
  if (a.line !== b.line) return a.line - b.line;
  if (a.col !== b.col) return a.col - b.col;
  if (a.severity !== b.severity) return a.severity === 'error' ? -1 : 1;
  return a.message < b.message ? -1 : a.message > b.message ? 1 : 0;
}
