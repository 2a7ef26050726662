// YAML text -> plain data per document, keeping a map back to source positions.
// Hostile input is refused here, before anything expands it: flow nesting is measured on the raw
// token stream and block nesting and document count on the CST, both iteratively, before the
// (recursive) composer runs — very deep flow nesting otherwise exhausts memory inside yaml; aliases
// are refused outright (no alias bombs to budget for); duplicate keys are found with a Set (yaml's
// own uniqueKeys check is quadratic in the number of keys of a map).
import { CST, Composer, Lexer, LineCounter, Parser, isAlias, isMap, isScalar, isSeq } from 'yaml';
import type { Document, Node as YamlNode, Pair } from 'yaml';
import { LIMITS } from './limits.js';

export type PathSegment = string | number;

export interface Position {
  line: number;
  col: number;
}

export interface Problem extends Position {
  severity: 'error' | 'warning';
  message: string;
}

/** One YAML document that parsed cleanly, as plain data plus a way back to source positions. */
export interface YamlDocument {
  file: string;
  /** 0-based index of the document in its file. */
  index: number;
  data: unknown;
  /** Position of the node at `path` (its key with part='key'); the deepest existing ancestor if absent. */
  locate(path: readonly PathSegment[], part?: 'key' | 'value'): Position;
}

export interface YamlFileResult {
  documents: YamlDocument[];
  problems: Problem[];
}

function positionAt(text: string, offset: number): Position {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text.charCodeAt(i) === 10) {
      line++;
      lineStart = i + 1;
    }
  }
  return { line, col: offset - lineStart + 1 };
}

/** Offset of the first flow bracket nested deeper than maxDepth, or -1. Linear, no recursion. */
function excessiveFlowNesting(lexemes: readonly string[], maxDepth: number): number {
  let offset = 0;
  let depth = 0;
  for (const token of lexemes) {
    const type = CST.tokenType(token);
    if (type === 'flow-seq-start' || type === 'flow-map-start') {
      if (++depth > maxDepth) return offset;
    } else if (type === 'flow-seq-end' || type === 'flow-map-end') {
      depth = Math.max(0, depth - 1);
    } else if (type === 'doc-start' || type === 'doc-mode') {
      depth = 0;
    }
    // The lexer's zero-width markers (document, scalar, flow-error-end) do not consume source text.
    if (token !== CST.DOCUMENT && token !== CST.SCALAR && token !== CST.FLOW_END) offset += token.length;
  }
  return -1;
}

/** Offset of the first collection nested deeper than maxDepth in a CST document, or -1. Iterative. */
function excessiveCstNesting(doc: CST.Document, maxDepth: number): number {
  const stack: { token: CST.Token | null | undefined; depth: number }[] = [{ token: doc.value, depth: 0 }];
  while (stack.length > 0) {
    const { token, depth } = stack.pop()!;
    if (!token) continue;
    if (token.type === 'block-map' || token.type === 'block-seq' || token.type === 'flow-collection') {
      if (depth + 1 > maxDepth) return token.offset;
      for (const item of token.items as CST.CollectionItem[]) {
        stack.push({ token: item.key, depth: depth + 1 }, { token: item.value, depth: depth + 1 });
      }
    }
  }
  return -1;
}

/** What Parser.parse(text) yields, from lexemes of the whole text (yaml's Parser.parse does the same per lexeme). */
function parseLexemes(lexemes: readonly string[], lines: LineCounter): CST.Token[] {
  const parser = new Parser(lines.addNewLine);
  lines.addNewLine(0);
  const tokens: CST.Token[] = [];
  for (const lexeme of lexemes) for (const token of parser.next(lexeme)) tokens.push(token);
  for (const token of parser.end()) tokens.push(token);
  return tokens;
}

function nodeStart(node: YamlNode | null | undefined): number | undefined {
  return node?.range?.[0];
}

export function parseYamlFile(file: string, text: string): YamlFileResult {
  const problems: Problem[] = [];
  const documents: YamlDocument[] = [];

  // Lexed once: the same lexemes feed the nesting check and then the parser (lexing is a third of parsing).
  const lexemes = [...new Lexer().lex(text)];
  const deepAt = excessiveFlowNesting(lexemes, LIMITS.maxDepth);
  if (deepAt >= 0) {
    problems.push({
      severity: 'error',
      ...positionAt(text, deepAt),
      message: `YAML nesting deeper than ${LIMITS.maxDepth} levels; refused`,
    });
    return { documents, problems };
  }

  const lines = new LineCounter();
  const at = (offset: number | undefined): Position => (offset === undefined ? { line: 1, col: 1 } : lines.linePos(offset));
  // The parser (text -> CST) is iterative; the composer (CST -> nodes) recurses. So the CST is
  // measured first: document count and block nesting such as `- - - - ...`.
  const tokens = parseLexemes(lexemes, lines);
  const docTokens = tokens.filter((t) => t.type === 'document');
  if (docTokens.length > LIMITS.maxDocumentsPerFile) {
    problems.push({
      severity: 'error',
      ...at(docTokens[LIMITS.maxDocumentsPerFile]!.offset),
      message: `more than ${LIMITS.maxDocumentsPerFile} YAML documents in one file; refused`,
    });
    return { documents, problems };
  }
  for (const token of docTokens) {
    const tooDeep = excessiveCstNesting(token, LIMITS.maxDepth);
    if (tooDeep >= 0) {
      problems.push({ severity: 'error', ...at(tooDeep), message: `YAML nesting deeper than ${LIMITS.maxDepth} levels; refused` });
      return { documents, problems };
    }
  }

  const tabs = tabIndentedLines(text);
  const trees = lazyTrees(text);
  let index = -1;
  let sawDocument = false;
  for (const doc of compose(tokens, text.length)) {
    index++;
    const docProblems: Problem[] = [];
    const [start, , end] = doc.range;
    const docTabs = tabs.filter((offset) => offset >= start && offset <= end);
    // A tab in the indentation derails the parser: its own errors then land on neighbouring lines (often the
    // next one). The tab is the cause, so it is what is reported, at its exact line and column.
    if (doc.errors.length > 0 && docTabs.length > 0) {
      for (const offset of docTabs) docProblems.push({ severity: 'error', ...at(offset), message: 'invalid YAML: a tab in the indentation; YAML indents with spaces only' });
    } else {
      for (const e of doc.errors) docProblems.push({ severity: 'error', ...at(pastIndent(text, e.pos[0])), message: `invalid YAML: ${firstLine(e.message)}` });
    }
    for (const w of doc.warnings) problems.push({ severity: 'warning', ...at(w.pos[0]), message: `YAML: ${firstLine(w.message)}` });
    if (docProblems.length === 0) checkStructure(doc, at, docProblems);
    problems.push(...docProblems);
    if (docProblems.length > 0) continue;
    const data: unknown = doc.toJS({ maxAliasCount: 0 });
    if (data === null || data === undefined) continue; // empty documents (`---` alone, or only comments) are ignored
    sawDocument = true;
    // The node tree is not kept (at 100,000 reals it was half of the heap after validate): the positions of the
    // root and of its keys are taken now (every model item records the root; notes such as a service without a
    // health check name a top-level key), any other is found in a tree parsed again from the same text when a
    // message needs it (lazyTrees).
    const top = topLevel(doc.contents);
    const docIndex = index;
    documents.push({
      file, index, data,
      locate: (path, part) => {
        if (path.length === 0) return at(top.start);
        if (path.length === 1 && top.keys) return at(topLevelOffset(top, path[0]!, part ?? 'value'));
        return at(locateOffset(trees()[docIndex] ?? null, path, part ?? 'value'));
      },
    });
  }
  // An emptied file silently removes whatever it declared (a service, a node): say so.
  if (!sawDocument && !problems.some((p) => p.severity === 'error')) {
    problems.push({ severity: 'warning', line: 1, col: 1, message: 'no YAML document in this file (empty, or only comments): it declares nothing' });
  }
  return { documents, problems };
}

function compose(tokens: CST.Token[], end: number): Generator<Document.Parsed> {
  return new Composer({ uniqueKeys: false, prettyErrors: false }).compose(tokens, true, end);
}

/**
 * The node trees of `text`'s documents (by index), composed on the first call and kept from then on: the same text
 * composes to the same trees, so positions found in them are those of the first parse. Called only for messages
 * about a document that parsed cleanly (its text is then known to lex and parse within the limits).
 */
function lazyTrees(text: string): () => (YamlNode | null)[] {
  let trees: (YamlNode | null)[] | null = null;
  return () => {
    if (trees === null) {
      const lines = new LineCounter();
      trees = [...compose(parseLexemes([...new Lexer().lex(text)], lines), text.length)].map((d) => d.contents);
    }
    return trees;
  };
}

/**
 * The parser places indentation errors ("All mapping items must start at the same column") at the start of the
 * line's whitespace; the operator has to move the key, so point at the key: an offset inside a line's leading
 * spaces moves to its first other character. Any other offset is kept.
 */
function pastIndent(text: string, offset: number): number {
  const lineStart = text.lastIndexOf('\n', offset - 1) + 1;
  if (!/^ *$/.test(text.slice(lineStart, offset))) return offset;
  let o = offset;
  while (text[o] === ' ') o++;
  return o < text.length && text[o] !== '\n' && text[o] !== '\r' ? o : offset;
}

/** Offsets of the tabs in the leading whitespace of lines that hold content (not blank, not a comment). */
function tabIndentedLines(text: string): number[] {
  const out: number[] = [];
  for (const m of text.matchAll(/^([ \t]*)(?=[^ \t\r\n#])/gm)) {
    const tab = m[1]!.indexOf('\t');
    if (tab >= 0) out.push(m.index! + tab);
  }
  return out;
}

function firstLine(s: string): string {
  return s.split('\n')[0]!.trim();
}

/** Depth cap, aliases, duplicate and non-scalar keys, walked iteratively (the tree may be deep). */
function checkStructure(doc: Document.Parsed, at: (offset: number | undefined) => Position, out: Problem[]): void {
  const stack: { node: unknown; depth: number }[] = [{ node: doc.contents, depth: 0 }];
  const aliases: number[] = [];
  while (stack.length > 0) {
    const { node, depth } = stack.pop()!;
    if (isAlias(node)) {
      aliases.push(nodeStart(node) ?? 0);
    } else if (isMap(node) || isSeq(node)) {
      if (depth + 1 > LIMITS.maxDepth) {
        out.push({ severity: 'error', ...at(nodeStart(node)), message: `YAML nesting deeper than ${LIMITS.maxDepth} levels; refused` });
        return;
      }
      if (isSeq(node)) {
        for (const item of node.items) stack.push({ node: item, depth: depth + 1 });
        continue;
      }
      const seen = new Map<string, number | undefined>();
      for (const pair of node.items as Pair<unknown, unknown>[]) {
        const key = pair.key;
        if (isScalar(key)) {
          const name = String(key.value);
          if (seen.has(name)) {
            const first = at(seen.get(name));
            out.push({
              severity: 'error',
              ...at(nodeStart(key)),
              message: `duplicate key '${name}' (first at line ${first.line}, column ${first.col})`,
            });
          } else {
            seen.set(name, nodeStart(key));
          }
        } else if (isAlias(key)) {
          stack.push({ node: key, depth: depth + 1 });
        } else {
          out.push({ severity: 'error', ...at(nodeStart(key as YamlNode) ?? nodeStart(node)), message: 'mapping keys must be plain scalars' });
        }
        stack.push({ node: pair.value, depth: depth + 1 });
      }
    }
  }
  if (aliases.length > 0) {
    // One message per document: an alias bomb has thousands of them.
    const first = Math.min(...aliases);
    const more = aliases.length > 1 ? ` (${aliases.length} aliases in this document)` : '';
    out.push({
      severity: 'error',
      ...at(first),
      message: `YAML aliases are not allowed in gitlb config (refused to rule out alias bombs); write the value out${more}`,
    });
  }
}

/** The root's start and, for a mapping, each key's first pair: key start and the start locateOffset gives its value. */
interface TopLevel { start: number | undefined; keys: Map<string, { key: number | undefined; value: number | undefined }> | null }

function topLevel(root: YamlNode | null): TopLevel {
  if (!isMap(root)) return { start: nodeStart(root), keys: null };
  const keys = new Map<string, { key: number | undefined; value: number | undefined }>();
  for (const pair of root.items as Pair<unknown, unknown>[]) {
    if (!isScalar(pair.key)) continue;
    const name = String(pair.key.value);
    if (keys.has(name)) continue; // the first pair of a name, as locateOffset's find
    const value = pair.value;
    keys.set(name, { key: nodeStart(pair.key), value: isScalar(value) && value.value === null ? undefined : nodeStart(value as YamlNode) });
  }
  return { start: nodeStart(root), keys };
}

/** locateOffset(root, [segment], part) for a mapping root, from its TopLevel. */
function topLevelOffset(top: TopLevel, segment: PathSegment, part: 'key' | 'value'): number | undefined {
  const entry = top.keys!.get(String(segment));
  if (!entry) return top.start;
  const best = entry.value ?? entry.key ?? top.start;
  return part === 'key' ? entry.key ?? best : best;
}

/** Walks `path` through the document tree; returns the source offset of the value (or key). */
function locateOffset(root: YamlNode | null, path: readonly PathSegment[], part: 'key' | 'value'): number | undefined {
  let node: unknown = root;
  let lastKey: unknown = undefined;
  let best = nodeStart(root);
  for (const segment of path) {
    if (isMap(node)) {
      const pair = (node.items as Pair<unknown, unknown>[]).find((p) => isScalar(p.key) && String(p.key.value) === String(segment));
      if (!pair) return best;
      lastKey = pair.key;
      node = pair.value;
      const valueStart = isScalar(node) && node.value === null ? undefined : nodeStart(node as YamlNode);
      best = valueStart ?? nodeStart(lastKey as YamlNode) ?? best;
    } else if (isSeq(node) && typeof segment === 'number' && segment < node.items.length) {
      lastKey = undefined;
      node = node.items[segment];
      best = nodeStart(node as YamlNode) ?? best;
    } else {
      return best;
    }
  }
  if (part === 'key' && lastKey !== undefined) return nodeStart(lastKey as YamlNode) ?? best;
  return best;
}
