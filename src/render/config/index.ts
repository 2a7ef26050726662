// The config stage: YAML files of one revision -> validated ConfigModel, or every problem found.
// Pure (no I/O, no clock): the same files give the same result and the same messages everywhere.
// Validation is all-or-nothing: any error and the model is null, so nothing of a bad revision is applied.
import { GitlbError } from '../../errors.js';
import type { ConfigModel } from '../model.js';
import { buildModel } from './build-model.js';
import { decodeUtf8 } from './decode.js';
import { type Diagnostic, type Severity, compareDiagnostics } from './diagnostics.js';
import { LIMITS } from './limits.js';
import type { Located, RawCluster, RawNode, RawService } from './raw.js';
import { KINDS, type Kind, describeValue, validateDocument } from './schema.js';
import { checkSemantics, noteMissingHealthCheck, warnMissingHealthChecks, type Emit } from './semantic.js';
import { scanYamlShape, type YamlShape } from './prescan.js';
import { TextMemo } from './text-memo.js';
import { type PathSegment, type YamlDocument, parseYamlFile } from './yaml-source.js';

export { formatDiagnostic, type Diagnostic, type Severity } from './diagnostics.js';
export { LIMITS, DEFAULTS, WEIGHT_MIN, WEIGHT_MAX } from './limits.js';

export interface ConfigFile {
  path: string; // repo-relative, '/' separators
  content: Uint8Array;
  /** Set when the entry is a symbolic link (its target as written); such a file is refused, never read. */
  symlinkTarget?: string;
}

export interface ParseResult {
  model: ConfigModel | null; // null iff any error
  diagnostics: Diagnostic[];
}

/**
 * The `--path` of a config inside its repository (like Flux's spec.path): '' for the root, else a relative path
 * with '/' separators and no '.', '..' or empty parts. Throws with the reason otherwise.
 */
export function normalizeConfigPath(path: string): string {
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (path.startsWith('/')) throw new GitlbError('InvalidOption', `'${path}' must be relative to the repository root`, { field: '--path' });
  if (parts.some((p) => p === '..')) throw new GitlbError('InvalidOption', `'${path}' must stay inside the repository (no '..')`, { field: '--path' });
  return parts.join('/');
}

/** Which repository paths hold config: YAML files outside status/ and outside hidden files and folders. */
export function isConfigPath(path: string): boolean {
  const parts = path.split('/');
  if (parts[0] === 'status' && parts.length > 1) return false;
  if (parts.some((p) => p.startsWith('.') || p === '')) return false;
  return /\.ya?ml$/.test(path);
}

export function parseConfig(files: ConfigFile[]): ParseResult {
  const configFiles = files.filter((f) => isConfigPath(f.path)).sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  try {
    return judge(configFiles);
  } finally {
    // Only this revision's files stay remembered: the paths of earlier revisions would keep their texts forever.
    const current = new Set(configFiles.map((f) => f.path));
    shapeMemo.retainOnly(current);
    yamlMemo.retainOnly(current);
  }
}

function judge(configFiles: ConfigFile[]): ParseResult {
  const diagnostics: Diagnostic[] = [];
  const at = (file: string, line: number, col: number, message: string, severity: Severity = 'error'): void => {
    diagnostics.push({ severity, file, line, col, message });
  };
  const emit: Emit = (severity, doc, path, message, part) => {
    const pos = doc.locate(path, part);
    at(doc.file, pos.line, pos.col, message, severity);
  };

  const documents: YamlDocument[] = [];
  const texts = sizeUp(configFiles, at);
  if (texts === null) return { model: null, diagnostics: capPerFile(diagnostics.sort(compareDiagnostics)) };
  for (const { path, text, bytes } of texts) {
    const parsed = yamlMemo.get(path, text, bytes, (t) => parseYamlFile(path, t));
    for (const p of parsed.problems) at(path, p.line, p.col, p.message, p.severity);
    documents.push(...parsed.documents);
    if (documents.length > LIMITS.maxDocuments) {
      at(path, 1, 1, `more than ${LIMITS.maxDocuments} YAML documents in the repository; refused`);
      break;
    }
  }

  // Schema: each document against the schema of its kind.
  const clusterDocs: YamlDocument[] = [];
  const valid = { Cluster: [] as Located<RawCluster>[], Node: [] as Located<RawNode>[], Service: [] as Located<RawService>[] };
  for (const doc of documents) {
    const kind = kindOf(doc, emit);
    if (!kind) continue;
    if (kind === 'Cluster') clusterDocs.push(doc);
    noteMissingHealthCheck(kind, doc.data); // before the schema fills in its defaults
    const issues = validateCached(kind, doc.data);
    for (const issue of issues) emit('error', doc, issue.path, issue.message, issue.part);
    if (issues.length === 0) (valid[kind] as Located<unknown>[]).push({ doc, data: doc.data });
  }

  // Exactly one Cluster, counting documents that failed their schema too (they were reported already).
  if (clusterDocs.length === 0 && !diagnostics.some((d) => d.severity === 'error')) {
    at(configFiles[0]?.path ?? '.', 1, 1, 'no Cluster document: a config repository needs exactly one (kind: Cluster)');
  }
  for (const extra of clusterDocs.slice(1)) {
    const first = clusterDocs[0]!.locate(['kind']);
    emit('error', extra, ['kind'], `more than one Cluster document (the first is at ${clusterDocs[0]!.file}:${first.line}:${first.col})`);
  }
  const cluster = clusterDocs.length === 1 && valid.Cluster.length === 1 ? valid.Cluster[0]! : null;

  checkSemantics({ cluster, nodes: valid.Node, services: valid.Service }, emit);
  checkTotalReals(valid.Service, emit);
  // Advice for a config that is otherwise valid (the errors come first): services nobody health-checks.
  if (!diagnostics.some((d) => d.severity === 'error')) warnMissingHealthChecks(valid.Service, emit);

  const sorted = capPerFile(diagnostics.sort(compareDiagnostics));
  const failed = sorted.some((d) => d.severity === 'error');
  const model = failed || !cluster ? null : buildModel(cluster, valid.Node, valid.Service);
  return { model, diagnostics: sorted };
}

/**
 * Reads the files' sizes, text and shape (prescan.ts) before any of them is parsed: the byte, file, document,
 * reals and entry limits are all checked here, so a revision over one of them costs one linear pass over its
 * text, never the parser's time and memory. Returns the decoded texts to parse, or null when the revision is
 * refused as a whole (the reasons are in `at`). A file that is refused alone (a link, too big, not UTF-8, too many
 * documents or reals) is left out, with its error, and the others are parsed.
 */
function sizeUp(files: ConfigFile[], at: (file: string, line: number, col: number, message: string) => void): { path: string; text: string; bytes: number }[] | null {
  const out: { path: string; text: string; bytes: number }[] = [];
  const total = { bytes: 0, documents: 0, reals: 0, entries: 0 };
  for (const [i, file] of files.entries()) {
    if (i >= LIMITS.maxFiles) {
      at(file.path, 1, 1, `more than ${LIMITS.maxFiles} YAML files in the repository; refused`);
      return null;
    }
    if (file.symlinkTarget !== undefined) {
      // Git stores a link as its target's name, a checkout as a link the OS follows: refusing links is the one
      // rule that reads the same from a directory (validate) and from Git objects (the daemon).
      at(file.path, 1, 1, `a symbolic link (to '${file.symlinkTarget}'): config files must be regular files; replace the link with the file`);
      continue;
    }
    total.bytes += file.content.length;
    if (file.content.length > LIMITS.maxFileBytes) {
      at(file.path, 1, 1, `file is larger than the ${LIMITS.maxFileBytes / 1024 / 1024} MiB limit; refused`);
      continue;
    }
    if (total.bytes > LIMITS.maxTotalBytes) {
      at(file.path, 1, 1, `the YAML files of the repository exceed ${LIMITS.maxTotalBytes / 1024 / 1024} MiB in total; refused`);
      return null;
    }
    const decoded = decodeUtf8(file.content);
    if (!decoded.ok) {
      at(file.path, decoded.line, decoded.col, decoded.message);
      continue;
    }
    const shape = shapeMemo.get(file.path, decoded.text, file.content.length, (t) => scanYamlShape(t, LIMITS.maxDocumentsPerFile));
    if (shape.documentsOverAt !== undefined) {
      at(file.path, shape.documentsOverAt, 1, `more than ${LIMITS.maxDocumentsPerFile} YAML documents in one file; refused before parsing`);
      continue;
    }
    if (shape.mostRealsInDocument.count > LIMITS.maxRealsPerService) {
      at(file.path, shape.mostRealsInDocument.line, 1, `a document with ${shape.mostRealsInDocument.count} 'address' keys: more than the ${LIMITS.maxRealsPerService} reals a service may have; refused before parsing`);
      continue;
    }
    total.documents += shape.documents;
    total.reals += shape.reals;
    total.entries += shape.entries;
    const over = [
      total.documents > LIMITS.maxDocuments && `${LIMITS.maxDocuments} YAML documents`,
      total.reals > LIMITS.maxTotalReals && `${LIMITS.maxTotalReals} reals ('address' keys)`,
      total.entries > LIMITS.maxYamlEntries && `${LIMITS.maxYamlEntries} YAML entries`,
    ].filter((x): x is string => typeof x === 'string');
    if (over.length > 0) {
      at(file.path, 1, 1, `with this file the repository holds more than ${over.join(' and more than ')} in total; refused before parsing`);
      return null;
    }
    out.push({ path: file.path, text: decoded.text, bytes: file.content.length });
  }
  return out;
}

/** The exact count after parsing (the prescan's is an upper bound that a key written as an escape evades). */
function checkTotalReals(services: Located<RawService>[], emit: Emit): void {
  let total = 0;
  for (const s of services) {
    total += s.data.spec.reals.length;
    if (total > LIMITS.maxTotalReals) {
      emit('error', s.doc, ['spec', 'reals'], `spec.reals: with this service the revision has more than ${LIMITS.maxTotalReals} reals in total; refused`);
      return;
    }
  }
}

/**
 * Results remembered per path while the text stays the same (text-memo.ts): a revision usually changes a few files
 * of many, and YAML parsing is most of validate's time at scale. Pure functions' results (the output is the same
 * with or without them). The parsed documents are shared between calls: schema validation fills in defaults (only
 * where a field is absent, so a second pass finds them and changes nothing) and nothing else writes to them. Each
 * memo holds at most one revision's worth of text (LIMITS.maxTotalBytes) and, after each parseConfig, only the
 * paths of that revision.
 */
const shapeMemo = new TextMemo<YamlShape>(LIMITS.maxTotalBytes);
const yamlMemo = new TextMemo<ReturnType<typeof parseYamlFile>>(LIMITS.maxTotalBytes);

/**
 * What the config memos hold now, in bytes of file text, and how many files were parsed since the process started
 * (for tests: the bytes stay bounded over any series of revisions, and an unchanged file is not parsed again).
 */
export function configMemoStats(): { shapeBytes: number; yamlBytes: number; files: number; parses: number } {
  return { shapeBytes: shapeMemo.bytes, yamlBytes: yamlMemo.bytes, files: yamlMemo.size, parses: yamlMemo.computations };
}

/** Schema verdicts of documents remembered from an unchanged file (same objects: see parseYamlCached). */
const schemaMemo = new WeakMap<object, { kind: Kind; issues: ReturnType<typeof validateDocument> }>();

function validateCached(kind: Kind, data: unknown): ReturnType<typeof validateDocument> {
  const key = data as object;
  const hit = schemaMemo.get(key);
  if (hit && hit.kind === kind) return hit.issues;
  const issues = validateDocument(kind, data);
  schemaMemo.set(key, { kind, issues });
  return issues;
}

function kindOf(doc: YamlDocument, emit: Emit): Kind | null {
  const data = doc.data;
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    emit('error', doc, [], `a gitlb document must be a mapping with apiVersion, kind, metadata and spec (got ${describeValue(data)})`);
    return null;
  }
  const kind = (data as Record<string, unknown>).kind;
  if (kind === undefined) {
    emit('error', doc, [], `missing required field 'kind' (one of ${KINDS.join(', ')})`);
    return null;
  }
  if (typeof kind !== 'string' || !(KINDS as readonly string[]).includes(kind)) {
    const hint = KINDS.find((k) => typeof kind === 'string' && k.toLowerCase() === kind.toLowerCase());
    const path: PathSegment[] = ['kind'];
    emit('error', doc, path, `kind: unknown kind ${describeValue(kind)}; expected one of ${KINDS.join(', ')}${hint ? ` (did you mean '${hint}'?)` : ''}`);
    return null;
  }
  return kind as Kind;
}

/** Keeps at most LIMITS.maxDiagnosticsPerFile per file, so one broken file cannot flood the output. */
function capPerFile(diags: Diagnostic[]): Diagnostic[] {
  const out: Diagnostic[] = [];
  const counts = new Map<string, number>();
  for (const d of diags) {
    const n = (counts.get(d.file) ?? 0) + 1;
    counts.set(d.file, n);
    if (n <= LIMITS.maxDiagnosticsPerFile) out.push(d);
    else if (n === LIMITS.maxDiagnosticsPerFile + 1) {
      const total = diags.filter((x) => x.file === d.file).length;
      out.push({ ...d, severity: 'error', message: `too many problems in this file; ${total - LIMITS.maxDiagnosticsPerFile} more not shown` });
    }
  }
  return out;
}
