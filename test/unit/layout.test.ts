// The structure issue 27 asked for, kept true by a check anyone can re-run (docs/reconciler.md, "Architecture"):
// - no file in src/ over 600 lines, except the BPF programs and their headers (*.c, *.h);
// - the data-plane planner (planOps, planResizes, planDataPlane) has one runtime caller: src/reconciler/converge.ts;
// - src/reconciler/ holds at its top only converge and the composition roots; every helper lives in a folder
//   named for its job (the loops in loops/);
// - the status policy (which conditions an event sets) lives in one module: src/reconciler/status/conditions.ts.
// Each rule is a pure function over (path, text) pairs, checked on the real tree and on a tree made to break it.
import test from 'ava';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

interface SourceFile { path: string; text: string }

function readTree(dir: string): SourceFile[] {
  const out: SourceFile[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push({ path: relative(root, p), text: readFileSync(p, 'utf8') });
    }
  };
  walk(join(root, dir));
  return out;
}

const MAX_LINES = 600;

/** Files over MAX_LINES lines, BPF C programs and headers excepted. */
function oversized(files: readonly SourceFile[]): string[] {
  return files
    .filter((f) => !/\.(c|h)$/.test(f.path))
    .map((f) => ({ path: f.path, lines: f.text.split('\n').length - (f.text.endsWith('\n') ? 1 : 0) }))
    .filter((f) => f.lines > MAX_LINES)
    .map((f) => `${f.path}: ${f.lines} lines`);
}

/**
 * The code of a TypeScript file with its comments and string contents blanked (a name in a comment or a message is
 * not a call); `${...}` inside a template literal stays code. Regular expression literals are read as code.
 */
function code(text: string): string {
  let out = '';
  const stack: ('`' | '{')[] = []; // open template literals and the braces of their ${...}
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    const inTemplate = stack[stack.length - 1] === '`';
    if (inTemplate) {
      if (c === '\\') i += 2;
      else if (c === '`') { stack.pop(); out += c; i++; }
      else if (c === '$' && text[i + 1] === '{') { stack.push('{'); out += '${'; i += 2; }
      else i++;
      continue;
    }
    if (c === '/' && text[i + 1] === '/') { while (i < text.length && text[i] !== '\n') i++; continue; }
    if (c === '/' && text[i + 1] === '*') { const end = text.indexOf('*/', i + 2); i = end < 0 ? text.length : end + 2; continue; }
    if (c === "'" || c === '"') {
      out += c + c;
      for (i++; i < text.length && text[i] !== c && text[i] !== '\n'; i++) if (text[i] === '\\') i++;
      i++;
      continue;
    }
    if (c === '`') stack.push('`');
    else if (c === '{' && stack.length) stack.push('{');
    else if (c === '}' && stack[stack.length - 1] === '{') stack.pop();
    out += c;
    i++;
  }
  return out;
}

/** Files of `files` that call `fn` (its definition is not a call). */
function callers(files: readonly SourceFile[], fn: string): string[] {
  // not a method of something else (`x.planOps(`), but a spread is a call (`...planOps(`)
  const call = new RegExp(`(?<!function\\s+)(?<![\\w$])(?<![^.]\\.)${fn}\\s*\\(`);
  return files.filter((f) => f.path.endsWith('.ts') && call.test(code(f.text))).map((f) => f.path).sort();
}

/** Plain files directly in src/reconciler/ (folders are not listed). */
function reconcilerTopFiles(files: readonly SourceFile[]): string[] {
  return files.map((f) => f.path).filter((p) => /^src\/reconciler\/[^/]+$/.test(p)).sort();
}

const RECONCILER_TOP = ['src/reconciler/converge.ts', 'src/reconciler/daemon.ts', 'src/reconciler/node-daemon.ts'];
const PLANNER = ['planOps', 'planResizes', 'planDataPlane'];
const CONVERGE = 'src/reconciler/converge.ts';
const STATUS_POLICY = 'src/reconciler/status/conditions.ts';

const src = readTree('src');

test(`no file in src/ is over ${MAX_LINES} lines (BPF programs and headers excepted)`, (t) => {
  t.true(src.length > 100, 'the tree was read');
  t.deepEqual(oversized(src), []);
});

test('the data-plane planner has one runtime caller: converge', (t) => {
  for (const fn of PLANNER) t.deepEqual(callers(src, fn), [CONVERGE], fn);
});

test('src/reconciler/ holds at its top only converge and the composition roots', (t) => {
  t.deepEqual(reconcilerTopFiles(src), RECONCILER_TOP);
});

test('the status policy is one module: only status/conditions.ts sets conditions', (t) => {
  t.deepEqual(callers(src, 'setCondition'), [STATUS_POLICY]);
});

// The checks themselves: each one finds what breaks its rule, and lets through what does not.
const lines = (n: number) => 'x\n'.repeat(n);

test('the line cap flags 601 lines, not 600, and never a BPF C file', (t) => {
  t.deepEqual(oversized([
    { path: 'src/a.ts', text: lines(600) },
    { path: 'src/b.ts', text: lines(601) },
    { path: 'src/c.ts', text: lines(600).slice(0, -1) }, // no final newline: still 600
    { path: 'src/bpf/progs/big.c', text: lines(2000) },
    { path: 'src/bpf/include/big.h', text: lines(900) },
  ]), ['src/b.ts: 601 lines']);
});

test('a second caller of the planner is found; its definition, imports, comments and other names are not calls', (t) => {
  const files: SourceFile[] = [
    { path: 'src/render/ops-plan.ts', text: 'export function planOps(live, desired) {\n  return [];\n}\n' },
    { path: CONVERGE, text: "import { planOps } from '../render/ops-plan.js';\nconst ops = planOps(live, d);\n" },
    { path: 'src/cli/commands/plan.ts', text: "// planOps(live, desired) used to be called here\n/* planOps(x) */\nconst s = 'see planOps (docs)', u = 'http://x';\nconst m = `planOps(${n}) is ${describe(n)}`;\nx.planOps(1); replanOps(2);\n" },
  ];
  t.deepEqual(callers(files, 'planOps'), [CONVERGE]);
  files.push({ path: 'src/bpf/dataplane/index.ts', text: 'const ops = [...resizes, ...planOps (live, desired)];\n' });
  files.push({ path: 'src/bpf/backend/index.ts', text: "const u = 'http://x'; // a URL is not a comment\nconst m = `${planOps(live, d).length} ops`;\n" });
  t.deepEqual(callers(files, 'planOps'), ['src/bpf/backend/index.ts', 'src/bpf/dataplane/index.ts', CONVERGE]);
});

test('a helper left at the top of src/reconciler/ is flagged; files in folders are not', (t) => {
  const files = [...RECONCILER_TOP, 'src/reconciler/loops/revision-pass.ts', 'src/reconciler/status/conditions.ts']
    .map((path) => ({ path, text: '' }));
  t.deepEqual(reconcilerTopFiles(files), RECONCILER_TOP);
  t.deepEqual(reconcilerTopFiles([...files, { path: 'src/reconciler/mutex.ts', text: '' }]), [...RECONCILER_TOP, 'src/reconciler/mutex.ts'].sort());
});
