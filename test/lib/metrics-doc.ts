// docs/metrics.md's metric tables, read back for test/netns/metrics-netns.test.ts (the docs against a live
// /metrics) and test/unit/metrics-doc.test.ts. Not a test file itself.
import { readFileSync } from 'node:fs';

export interface DocMetric {
  name: string;
  type: string;
  labels: string[];
  /** The `## ` section the table is in. */
  section: string;
  /** Label values the meaning lists (after its first colon, if any: `drops: `a`, `b``): lower-case backticked words. */
  values: string[];
}

/**
 * Every row of a table whose first cell names metrics (`gitlb_...`; a cell may list several, and a name given as
 * `_suffix` replaces the last `_word` of the full name before it: `gitlb_x_voters`, `_quorum` -> gitlb_x_quorum).
 */
export function docMetrics(markdown: string): DocMetric[] {
  const out: DocMetric[] = [];
  let section = '';
  for (const line of markdown.split('\n')) {
    if (line.startsWith('## ')) section = line.slice(3).trim();
    if (!line.startsWith('| `gitlb_')) continue;
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    const [names, type, labels, meaning] = [cells[0]!, cells[1]!, cells[2] ?? '', cells.slice(3).join('|')];
    const colon = topLevelColon(meaning);
    const values = [...meaning.slice(colon + 1).matchAll(/`([a-z0-9_]+)`/g)].map((m) => m[1]!);
    let base = '';
    for (const m of names.matchAll(/`([a-z0-9_]+)`/g)) {
      if (!m[1]!.startsWith('_')) base = m[1]!.replace(/_[a-z0-9]+$/, '');
      const name = m[1]!.startsWith('_') ? base + m[1]! : m[1]!;
      out.push({ name, type, labels: [...labels.matchAll(/[a-z_]+/g)].map((l) => l[0]), section, values });
    }
  }
  return out;
}

/** The first ':' outside parentheses (a remark in parentheses may hold one), or -1. */
function topLevelColon(text: string): number {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')') depth = Math.max(0, depth - 1);
    else if (text[i] === ':' && depth === 0) return i;
  }
  return -1;
}

export const readDocMetrics = (path: string): DocMetric[] => docMetrics(readFileSync(path, 'utf8'));

/** name -> type from the `# TYPE` lines of a Prometheus text exposition (every registered metric, with samples or not). */
export function exposedTypes(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1]!, m[2]!);
  return out;
}
