// Reads the Prometheus text exposition format back into samples: `gitlb top` enriches its kernel numbers with a
// running daemon's names and health this way, and tests read a live /metrics with it. Pure.
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/gy;

function unescape(v: string): string {
  return v.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
}

function parseValue(v: string): number {
  if (v === '+Inf') return Infinity;
  if (v === '-Inf') return -Infinity;
  return Number(v);
}

export function parsePromText(text: string): Sample[] {
  const out: Sample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = LINE.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    if (m[2]) {
      LABEL.lastIndex = 0;
      let l: RegExpExecArray | null;
      while (LABEL.lastIndex < m[2].length && (l = LABEL.exec(m[2]))) labels[l[1]!] = unescape(l[2]!);
    }
    out.push({ name: m[1]!, labels, value: parseValue(m[3]!) });
  }
  return out;
}

/** Samples of `name` whose labels include every pair of `match`. */
export function samples(all: Sample[], name: string, match: Record<string, string> = {}): Sample[] {
  return all.filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v));
}

/** Sum of the values of `name` matching `match` (0 when there are none). */
export function sumOf(all: Sample[], name: string, match: Record<string, string> = {}): number {
  return samples(all, name, match).reduce((n, s) => n + s.value, 0);
}
