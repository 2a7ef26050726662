// Diagnostics of the config stage and their one-line text form.
import { escapeControl } from '../escape.js';

/** A note is never a problem of its own: it points at the other place an error involves (as compilers do). */
export type Severity = 'error' | 'warning' | 'note';

export interface Diagnostic {
  severity: Severity;
  file: string;
  line: number; // 1-based
  col: number; // 1-based
  message: string;
}

/**
 * `path:LINE:COL: error: message` — the form editors and terminals turn into links. Path and message may quote
 * config text: control characters are escaped (one line, no terminal escapes).
 */
export function formatDiagnostic(d: Pick<Diagnostic, 'file' | 'line' | 'col' | 'message'> & { severity: string }): string {
  return `${escapeControl(d.file)}:${d.line}:${d.col}: ${d.severity}: ${escapeControl(d.message)}`;
}

const SEVERITY_ORDER: Record<Severity, number> = { error: 0, warning: 1, note: 2 };

/** Stable order: by file, then position, errors before warnings, then text. */
export function compareDiagnostics(a: Diagnostic, b: Diagnostic): number {
  if (a.file !== b.file) return a.file < b.file ? -1 : 1;
  if (a.line !== b.line) return a.line - b.line;
  if (a.col !== b.col) return a.col - b.col;
  if (a.severity !== b.severity) return SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity];
  return a.message < b.message ? -1 : a.message > b.message ? 1 : 0;
}
