// Counting before parsing: the yaml library spends about 2-3 s and a few hundred MiB per MiB of dense YAML (lexer,
// CST, composed nodes), so a revision is sized up by one linear pass over its text first and refused when a count
// is over its limit, before any file is lexed. The counts are upper bounds that need no tokenizer:
//   documents  lines that start a document (`---`, or `...` not followed by one), plus the bare document before
//              the first marker when there is content there;
//   entries    YAML indicators that open a value: `- `, `: `, `? ` (each followed by a blank or the line end), and
//              the flow characters `,` `[` `{`. Every collection entry needs one, so the nodes a file can compose
//              are bounded by them (characters inside quotes and comments count too: an over-count, never under);
//   reals      keys named `address` (plain or quoted), per document: every real of a Service has one (the schema
//              requires it), so a document with more of them than a service may hold reals is refused unparsed.
// A real written with an escaped key ("\x61ddress") escapes the reals count but not the entries count, and the
// exact counts are checked again after parsing (schema maxItems, LIMITS.maxTotalReals in index.ts).

export interface YamlShape {
  /** Upper bound of the documents in the text. */
  documents: number;
  /** 1-based line where the document count passes `maxDocuments` (when given and passed). */
  documentsOverAt?: number;
  /** Upper bound of the collection entries in the text. */
  entries: number;
  /** `address` keys in the whole text. */
  reals: number;
  /** The document with the most `address` keys: their count and the 1-based line where that document starts. */
  mostRealsInDocument: { count: number; line: number };
}

// A document start (`---`), a document end not followed by a start (`...`), or an `address` key: plain (its colon
// followed by a blank, a flow character or the line end) or quoted (any colon).
const MARKER_OR_ADDRESS = /^---(?=[ \t\r\n]|$)|^\.\.\.(?=[ \t]*\r?\n(?!---(?:[ \t\r\n]|$)))|(?:^|(?<=[\s{,[?-]))(?:address[ \t]*:(?=[\s,}\]]|$)|(["'])address\1[ \t]*:)/gm;
const ENTRY = /[-:?](?=[ \t\r\n]|$)|[,[{]/g;
/** Text before the first document marker that holds content (not only blanks, comments and directives). */
const CONTENT_LINE = /^[ \t]*[^\s#%]/m;

function countMatches(re: RegExp, text: string): number {
  re.lastIndex = 0;
  let n = 0;
  while (re.exec(text) !== null) n++;
  return n;
}

/** Three linear passes over `text` (regular expressions); no tokens, no allocation per match. */
export function scanYamlShape(text: string, maxDocuments = Infinity): YamlShape {
  let documents = 0;
  let documentsOverAt: number | undefined;
  let reals = 0;
  let inDocument = 0;
  let documentLine = 1;
  let line = 1;
  let lineCountedTo = 0;
  const most = { count: 0, line: 1 };
  const lineOf = (offset: number): number => {
    for (let i = text.indexOf('\n', lineCountedTo); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) line++;
    lineCountedTo = offset;
    return line;
  };
  const startDocument = (at: number): void => {
    documents++;
    if (documents > maxDocuments && documentsOverAt === undefined) documentsOverAt = lineOf(at);
    inDocument = 0;
    documentLine = lineOf(at);
  };
  MARKER_OR_ADDRESS.lastIndex = 0;
  let first = true;
  for (let m = MARKER_OR_ADDRESS.exec(text); m !== null; m = MARKER_OR_ADDRESS.exec(text)) {
    const marker = m[0].startsWith('---') || m[0].startsWith('...');
    // The bare document before the first marker (or of a file without markers).
    if (first && (!marker || CONTENT_LINE.test(text.slice(0, m.index)))) startDocument(0);
    first = false;
    if (marker) {
      startDocument(m.index);
      continue;
    }
    reals++;
    if (++inDocument > most.count) Object.assign(most, { count: inDocument, line: documentLine });
  }
  if (first && CONTENT_LINE.test(text)) documents = 1;
  return { documents, ...(documentsOverAt !== undefined && { documentsOverAt }), entries: countMatches(ENTRY, text), reals, mostRealsInDocument: most };
}
