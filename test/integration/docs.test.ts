// docs/ are code: every YAML example in them validates, every field of every config schema is documented in
// docs/config.md, every file they name exists, and every `gitlb` command line they show is one the CLI accepts.
// Examples are checked with `gitlb validate` inside a copy of sample-config-repo/.
import test from 'ava';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseDocument } from 'yaml';
import { tempDir, writeTree } from '../helpers/cli-repo.js';
import { runCli } from '../../src/cli/main.js';
import { cliTree, codeSpans, docCommands, docFiles } from '../lib/docs-cli.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const KINDS = ['Cluster', 'Node', 'Service'];

interface Example {
  where: string; // docs/x.md:LINE
  text: string;
}

function yamlExamples(): Example[] {
  const files = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  const out: Example[] = [];
  for (const file of files) {
    const lines = readFileSync(join(root, file), 'utf8').split('\n');
    for (let i = 0; i < lines.length; i++) {
      if (!/^```ya?ml\s*$/.test(lines[i]!)) continue;
      const start = i + 1;
      while (++i < lines.length && !lines[i]!.startsWith('```'));
      out.push({ where: `${file}:${start}`, text: lines.slice(start, i).join('\n') + '\n' });
    }
  }
  return out;
}

/** The sample repository as path -> parsed document (one document per file there). */
function sampleDocs(): Map<string, Record<string, unknown>> {
  const docs = new Map<string, Record<string, unknown>>();
  const walk = (rel: string) => {
    for (const e of readdirSync(join(root, 'sample-config-repo', rel), { withFileTypes: true })) {
      const path = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(path);
      else if (e.name.endsWith('.yaml')) docs.set(path, parse(readFileSync(join(root, 'sample-config-repo', path), 'utf8')));
    }
  };
  walk('');
  return docs;
}

function merge(base: unknown, part: unknown): unknown {
  if (base && part && typeof base === 'object' && typeof part === 'object' && !Array.isArray(base) && !Array.isArray(part)) {
    const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
    for (const [k, v] of Object.entries(part)) out[k] = merge(out[k], v);
    return out;
  }
  return part;
}

/** The sample repository with the example in it: a whole Node replaces its namesake, a whole Service every sample
 * service (whose VIPs it might reuse), a Cluster is merged over the sample's; a `# part of a KIND` fragment is merged
 * into a document of that kind. */
function repoWith(example: Record<string, unknown>, fragmentOf: string | null): Record<string, string> {
  const docs = sampleDocs();
  const kind = fragmentOf ?? (example.kind as string);
  const sameKind = [...docs].filter(([, d]) => d.kind === kind);
  if (fragmentOf) {
    const [path, doc] = sameKind.find(([, d]) => (d.metadata as { name: string }).name === 'web') ?? sameKind[0]!;
    docs.set(path, merge(doc, example) as Record<string, unknown>);
  } else if (kind === 'Cluster') {
    // The one Cluster: the example's fields over the sample's, whose nodes may rely on others (e.g. spec.bgp).
    const [path, doc] = sameKind[0]!;
    docs.set(path, merge(doc, example) as Record<string, unknown>);
  } else {
    const name = (example.metadata as { name?: string } | undefined)?.name;
    for (const [path, d] of sameKind) if (kind === 'Service' || (d.metadata as { name: string }).name === name) docs.delete(path);
    docs.set(`example/${kind.toLowerCase()}.yaml`, example);
  }
  return Object.fromEntries([...docs].map(([p, d]) => [p, JSON.stringify(d)]));
}

async function validate(dir: string): Promise<{ code: number; out: { valid: boolean; diagnostics: { message: string; line: number }[] } }> {
  const write = process.stdout.write;
  let stdout = '';
  process.stdout.write = ((s: string) => ((stdout += s), true)) as typeof process.stdout.write;
  try {
    const code = await runCli(['validate', dir, '--format', 'json']);
    return { code, out: JSON.parse(stdout) };
  } finally {
    process.stdout.write = write;
  }
}

test('every YAML example in docs/ and README is valid YAML and, with the sample repository around it, valid config', async (t) => {
  const examples = yamlExamples();
  t.true(examples.length >= 6, `found ${examples.length}`);
  const dir = await tempDir('docs-examples');
  try {
    let checked = 0;
    for (const [i, ex] of examples.entries()) {
      const doc = parseDocument(ex.text);
      t.deepEqual(doc.errors.map((e) => e.message), [], `${ex.where}: YAML`);
      const data = doc.toJS() as Record<string, unknown> | null;
      if (data === null) continue; // a comment-only block, e.g. the schema modeline
      const fragmentOf = /^# part of a (\w+)/.exec(ex.text)?.[1] ?? null;
      if (fragmentOf === 'NodeStatus') continue; // status, not config: valid YAML is what can be checked here
      t.true(fragmentOf !== null || KINDS.includes(data.kind as string), `${ex.where}: neither a whole document nor marked '# part of a KIND'`);
      const exDir = join(dir.path, String(i));
      await writeTree(exDir, repoWith(data, fragmentOf));
      const r = await validate(exDir);
      t.is(r.code, 0, `${ex.where}: ${JSON.stringify(r.out.diagnostics)}`);
      checked++;
    }
    t.true(checked >= 5, `${checked} examples validated`);
  } finally {
    await dir.remove();
  }
});

/** Leaf fields of a schema as dotted paths, `[]` for list items (`spec.ports[].port`). */
function schemaLeaves(schema: Record<string, unknown>): string[] {
  const defs = (schema.$defs ?? {}) as Record<string, Record<string, unknown>>;
  const out: string[] = [];
  const walk = (node: Record<string, unknown> | undefined, path: string) => {
    if (!node) return;
    if (typeof node.$ref === 'string') return walk(defs[node.$ref.split('/').pop()!], path);
    const props = node.properties as Record<string, Record<string, unknown>> | undefined;
    const items = node.items as Record<string, unknown> | undefined;
    if (props) for (const [k, v] of Object.entries(props)) walk(v, path ? `${path}.${k}` : k);
    else if (items) walk(items, `${path}[]`);
    else out.push(path.replace(/\[\]$/, '')); // a list of scalars is documented as the list
  };
  walk(schema, '');
  return out;
}

test('every field of every config schema is documented in docs/config.md', (t) => {
  const doc = readFileSync(join(root, 'docs/config.md'), 'utf8');
  for (const kind of ['cluster', 'node', 'service']) {
    const schema = JSON.parse(readFileSync(join(root, 'schemas', `${kind}.schema.json`), 'utf8'));
    const leaves = schemaLeaves(schema);
    t.true(leaves.length > 5, kind);
    const missing = leaves.filter((f) => !doc.includes('`' + f + '`'));
    t.deepEqual(missing, [], `${kind}: fields without a row in docs/config.md`);
  }
});

/** Files of other projects the docs name. */
const FOREIGN = new Set(['bpf/lib/nodeport.h']); // Cilium's

/** Repository files the docs name: `src/...` and the like (a .js import path names its .ts source), and bare
 * `name.ts`/`.c`/`.h` names (`loops/revision-pass.ts` too), which must be the end of some file's path. Globs, placeholders and build outputs are not files. */
function namedPaths(): { where: string; path: string; bare: boolean }[] {
  const out: { where: string; path: string; bare: boolean }[] = [];
  for (const file of docFiles(root)) {
    for (const [i, line] of readFileSync(join(root, file), 'utf8').split('\n').entries()) {
      const where = `${file}:${i + 1}`;
      for (const m of line.matchAll(/(?<![\w./-])((?:src|test|bench|schemas|bin|sample-config-repo)\/[\w./-]*[\w])(?![\w*<{-])/g)) {
        out.push({ where, path: m[1]!.replace(/^(src\/.*)\.js$/, '$1.ts'), bare: false });
      }
      // `rings.ts`, or `loops/revision-pass.ts` relative to the folder the text is about: the end of some file's path
      for (const m of line.matchAll(/`((?:[\w-]+\/)*[\w-]+\.(?:ts|c|h))`/g)) {
        if (!/^(?:src|test|bench|schemas|bin|sample-config-repo)\//.test(m[1]!) && !FOREIGN.has(m[1]!)) out.push({ where, path: m[1]!, bare: true });
      }
    }
  }
  return out;
}

test('every repository path and source file name in README and docs/ exists (src/reconciler/reconcile.ts is gone)', (t) => {
  const tracked = execFileSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' }).split('\n');
  const isEndOfTracked = (end: string) => tracked.some((p) => p === end || p.endsWith(`/${end}`));
  const named = namedPaths();
  t.true(named.length > 100, `${named.length} paths named`);
  const missing = named.filter((n) => (n.bare ? !isEndOfTracked(n.path) : !existsSync(join(root, n.path)))).map((n) => `${n.where} ${n.path}`);
  t.deepEqual(missing, []);
});

test('every `gitlb <command>` in README and docs/ is a command, and each --option after it is one that command accepts', async (t) => {
  const tree = await cliTree();
  for (const c of ['run', 'capture', 'monitor', 'lab up', 'plan', 'status', 'top']) t.true(tree.has(c), `the CLI tree has ${c}`);
  const used = docCommands(codeSpans(root), tree);
  t.true(used.length > 150, `${used.length} command lines found`);
  t.deepEqual(used.filter((c) => !c.known).map((c) => `${c.where} gitlb ${c.command}`), [], 'no such command');
  const refused = used.flatMap((c) => (c.known ? c.flags.filter((f) => !tree.get(c.command)!.has(f)).map((f) => `${c.where} gitlb ${c.command} ${f}`) : []));
  t.deepEqual(refused, [], 'options the command does not accept');
  const readmeCommands = new Set(used.filter((c) => c.where.startsWith('README.md')).map((c) => c.command.split(' ')[0]));
  const cliCommands = [...tree.keys()].filter((k) => !k.includes(' ') && k !== 'help' && k !== 'monitor');
  t.deepEqual(cliCommands.filter((c) => !readmeCommands.has(c)), [], 'commands the README does not show');
});

test('every --option named on its own in README and docs/ belongs to a gitlb command or to a script that takes it', async (t) => {
  const tree = await cliTree();
  const accepted = new Set([...tree.values()].flatMap((s) => [...s]));
  // Options of other programs the docs run: the bench scripts and bin/gitlb's node flags.
  const scripts = execFileSync('git', ['grep', '-hoE', '--', "--[a-z][a-z0-9-]+", 'bench', 'bin'], { cwd: root, encoding: 'utf8' });
  for (const o of scripts.split('\n')) accepted.add(o);
  const unknown = codeSpans(root).flatMap((s) => {
    const m = /^(--[a-z][a-z0-9-]*)(?:[ =]|$)/.exec(s.text);
    return m && !accepted.has(m[1]!) ? [`${s.where} ${s.text}`] : [];
  });
  t.deepEqual(unknown, []);
});

test('README names every page of docs/', (t) => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const pages = readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md'));
  t.true(pages.length > 10);
  t.deepEqual(pages.filter((p) => !readme.includes('`' + p + '`') && !readme.includes(`docs/${p}`)), []);
});

/** Schema defaults of leaf fields as dotted paths (objects defaulting to {} are containers, not values). */
function schemaDefaults(schema: Record<string, unknown>): [string, unknown][] {
  const defs = (schema.$defs ?? {}) as Record<string, Record<string, unknown>>;
  const out: [string, unknown][] = [];
  const walk = (node: Record<string, unknown> | undefined, path: string) => {
    if (!node) return;
    if (typeof node.$ref === 'string') return walk(defs[node.$ref.split('/').pop()!], path);
    const props = node.properties as Record<string, Record<string, unknown>> | undefined;
    if ('default' in node && !props) out.push([path.replace(/\[\]$/, ''), node.default]);
    if (props) for (const [k, v] of Object.entries(props)) walk(v, path ? `${path}.${k}` : k);
    else if (node.items) walk(node.items as Record<string, unknown>, `${path}[]`);
  };
  walk(schema, '');
  return out;
}

test("docs/config.md's default column states each field's schema default (in that kind's section)", (t) => {
  const doc = readFileSync(join(root, 'docs/config.md'), 'utf8');
  let checked = 0;
  for (const [kind, file] of [['Cluster', 'cluster'], ['Node', 'node'], ['Service', 'service']] as const) {
    const section = doc.split(/^## /m).find((s) => s.startsWith(`${kind}\n`))!;
    t.truthy(section, kind);
    const defaultCell = new Map<string, string>();
    for (const line of section.split('\n').filter((l) => l.startsWith('| `'))) {
      const cells = line.split(/(?<!\\)\|/).slice(1, -1).map((c) => c.trim());
      for (const m of cells[0]!.matchAll(/`([^`]+)`/g)) defaultCell.set(m[1]!, cells[2] ?? '');
    }
    const schema = JSON.parse(readFileSync(join(root, 'schemas', `${file}.schema.json`), 'utf8'));
    for (const [field, value] of schemaDefaults(schema)) {
      const cell = defaultCell.get(field);
      t.true(cell !== undefined && cell.includes(String(value)), `${kind} ${field}: schema default ${String(value)}, docs/config.md says ${cell}`);
      checked++;
    }
  }
  t.true(checked > 20, `${checked} defaults`);
});

test('every `make TARGET` in the code of README and docs/ is a target of the Makefile', (t) => {
  const targets = new Set([...readFileSync(join(root, 'Makefile'), 'utf8').matchAll(/^([a-z][\w-]*):/gm)].map((m) => m[1]!));
  const used = codeSpans(root).flatMap((s) => [...s.text.matchAll(/(?<![\w-])make ([a-z][\w-]*)/g)].map((m) => ({ where: s.where, target: m[1]! })));
  t.true(used.length > 5, `${used.length} make lines`);
  t.deepEqual(used.filter((u) => !targets.has(u.target)).map((u) => `${u.where} make ${u.target}`), []);
});

test('cross-references between pages name sections that exist: [x](page.md#anchor) a heading, page.md "Section" a heading or bold lead', (t) => {
  const slug = (h: string) => h.toLowerCase().replace(/[^\w\- ]/g, '').replace(/ /g, '-');
  const pages = new Map(docFiles(root).map((f) => {
    const text = readFileSync(join(root, f), 'utf8');
    const headings = [...text.matchAll(/^#+ (.+)$/gm)].map((m) => m[1]!.trim());
    const leads = [...text.matchAll(/\*\*([^*]+)\*\*/g)].map((m) => m[1]!);
    return [f.replace(/^docs\//, ''), { headings, named: [...headings, ...leads].map((h) => h.replace(/`/g, '')) }] as const;
  }));
  const broken: string[] = [];
  let checked = 0;
  for (const f of docFiles(root)) {
    for (const [i, line] of readFileSync(join(root, f), 'utf8').split('\n').entries()) {
      const where = `${f}:${i + 1}`;
      for (const m of line.matchAll(/\]\(([\w-]+\.md)?#([\w-]+)\)/g)) {
        const page = pages.get(m[1] ?? f.replace(/^docs\//, ''));
        checked++;
        if (!page?.headings.some((h) => slug(h) === m[2])) broken.push(`${where} ${m[1] ?? ''}#${m[2]}`);
      }
      for (const m of line.matchAll(/(?:docs\/)?([\w-]+\.md)[,:]? "([^"]+)"/g)) {
        const page = pages.get(m[1]!);
        checked++;
        if (!page?.named.some((h) => h.includes(m[2]!.replace(/`/g, '')))) broken.push(`${where} ${m[1]} "${m[2]}"`);
      }
    }
  }
  t.true(checked > 20, `${checked} references`);
  t.deepEqual(broken, []);
});

test("docs/config.md's type column lists every value of each field's schema enum (in that kind's section)", (t) => {
  const doc = readFileSync(join(root, 'docs/config.md'), 'utf8');
  let checked = 0;
  for (const [kind, file] of [['Cluster', 'cluster'], ['Node', 'node'], ['Service', 'service']] as const) {
    const section = doc.split(/^## /m).find((s) => s.startsWith(`${kind}\n`))!;
    const typeCell = new Map<string, string>();
    for (const line of section.split('\n').filter((l) => l.startsWith('| `'))) {
      const cells = line.split(/(?<!\\)\|/).slice(1, -1).map((c) => c.trim());
      for (const m of cells[0]!.matchAll(/`([^`]+)`/g)) typeCell.set(m[1]!, cells[1] ?? '');
    }
    const schema = JSON.parse(readFileSync(join(root, 'schemas', `${file}.schema.json`), 'utf8'));
    const defs = (schema.$defs ?? {}) as Record<string, Record<string, unknown>>;
    const walk = (node: Record<string, unknown> | undefined, path: string) => {
      if (!node) return;
      if (typeof node.$ref === 'string') return walk(defs[node.$ref.split('/').pop()!], path);
      if (Array.isArray(node.enum)) {
        const field = path.replace(/\[\]$/, '');
        const cell = typeCell.get(field) ?? '';
        const missing = (node.enum as unknown[]).filter((v) => !cell.includes('`' + String(v) + '`'));
        t.deepEqual(missing, [], `${kind} ${field}: type column "${cell}"`);
        checked++;
      }
      const props = node.properties as Record<string, Record<string, unknown>> | undefined;
      if (props) for (const [k, v] of Object.entries(props)) walk(v, path ? `${path}.${k}` : k);
      else if (node.items) walk(node.items as Record<string, unknown>, `${path}[]`);
    };
    walk(schema, '');
  }
  t.true(checked >= 10, `${checked} enums`);
});

test("docs/config.md states each schema bound (minimum, maximum, maxItems, maxLength) in the field's row", (t) => {
  const doc = readFileSync(join(root, 'docs/config.md'), 'utf8');
  let checked = 0;
  for (const [kind, file] of [['Cluster', 'cluster'], ['Node', 'node'], ['Service', 'service']] as const) {
    const section = doc.split(/^## /m).find((s) => s.startsWith(`${kind}\n`))!;
    const rowOf = new Map<string, string>();
    for (const line of section.split('\n').filter((l) => l.startsWith('| `'))) {
      for (const m of line.split(/(?<!\\)\|/)[1]!.matchAll(/`([^`]+)`/g)) rowOf.set(m[1]!, line);
    }
    const schema = JSON.parse(readFileSync(join(root, 'schemas', `${file}.schema.json`), 'utf8'));
    const defs = (schema.$defs ?? {}) as Record<string, Record<string, unknown>>;
    const walk = (node: Record<string, unknown> | undefined, path: string) => {
      if (!node) return;
      if (typeof node.$ref === 'string') return walk(defs[node.$ref.split('/').pop()!], path);
      for (const bound of ['minimum', 'maximum', 'maxItems', 'maxLength']) {
        const n = node[bound];
        if (typeof n !== 'number') continue;
        const row = rowOf.get(path) ?? rowOf.get(path.replace(/\[\]$/, '')) ?? rowOf.get(`${path}[]`) ?? '';
        t.true([String(n), n.toLocaleString('en-US')].some((s) => row.includes(s)), `${kind} ${path} ${bound} ${n}: ${row.slice(0, 120)}`);
        checked++;
      }
      const props = node.properties as Record<string, Record<string, unknown>> | undefined;
      if (props) for (const [k, v] of Object.entries(props)) walk(v, path ? `${path}.${k}` : k);
      else if (node.items) walk(node.items as Record<string, unknown>, `${path}[]`);
    };
    walk(schema, '');
  }
  t.true(checked > 20, `${checked} bounds`);
});
