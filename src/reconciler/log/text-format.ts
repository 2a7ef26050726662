// The one-line-per-event rendering of a log record for people at a terminal: local time, level, the message, then
// the structured fields as key=value. Pure; the JSON form (pino's own) stays the machine format.
import { escapeControl } from '../../render/escape.js';

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
/** Fields every record carries or that the line already shows in another form. */
const HIDDEN = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'node']);

function clock(t: number): string {
  const d = new Date(t);
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

function value(v: unknown): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return escapeControl(/[\s"=]/.test(s) ? JSON.stringify(s) : s);
}

/** One pino record (parsed JSON) as a text line, without the trailing newline. */
export function formatRecord(rec: Record<string, unknown>): string {
  const level = LEVELS[rec.level as number] ?? String(rec.level);
  // A message may quote config or peer text: escaped, so a line stays one line without terminal escapes.
  const parts = [typeof rec.time === 'number' ? clock(rec.time) : '', level.padEnd(5), escapeControl(String(rec.msg ?? ''))];
  for (const [k, v] of Object.entries(rec)) {
    if (HIDDEN.has(k) || v === undefined || v === null) continue;
    if (k === 'revision' && typeof v === 'string') parts.push(`revision=${v.slice(0, 12)}`);
    else parts.push(`${k}=${value(v)}`);
  }
  return parts.filter(Boolean).join(' ');
}

/** A pino destination that rewrites each JSON line as text before writing it to `out`. */
export function textDestination(out: { write(s: string): unknown }): { write(line: string): void } {
  return {
    write(line: string) {
      for (const l of line.split('\n')) {
        if (!l) continue;
        try {
          out.write(formatRecord(JSON.parse(l) as Record<string, unknown>) + '\n');
        } catch {
          out.write(l + '\n');
        }
      }
    },
  };
}
