// What BIRD (birdc) says goes into the log and the status document, which many people and tools read. BIRD may
// echo parts of the file it refused, and that file holds the sessions' TCP-MD5 passwords; its replies may also
// carry terminal escapes and run to many lines. So the text is reduced to one bounded line that cannot carry a
// password of the config (this revision's, or an older file's) nor drive a terminal. Pure.

/** Longest text kept, in characters (an error line, not a log dump). */
export const MAX_ERROR_CHARS = 300;
export const REDACTED = '(redacted)';

/** The session passwords in a generated BIRD file (`password "..."`; they never contain a '"', docs/bgp.md). */
export function birdPasswords(birdConfigText: string | null | undefined): string[] {
  if (!birdConfigText) return [];
  return [...birdConfigText.matchAll(/\bpassword\s+"([^"]*)"/g)].map((m) => m[1]!).filter((p) => p.length > 0);
}

/** One line of at most `max` characters: no control characters or escape sequences, every known secret and any
 * `password "..."` clause replaced by (redacted). A secret that is also an ordinary word is redacted there too:
 * a mangled message is the price of never printing a password. */
export function scrubToolText(text: string, secrets: readonly string[], max = MAX_ERROR_CHARS): string {
  let s = text
    .replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, '') // ANSI CSI sequences (colours, cursor moves)
    .replace(/\x1b[@-_]/g, '') // other two-byte escapes
    .replace(/[\x00-\x1f\x7f-\x9f\u2028\u2029]+/g, ' '); // the rest of C0/C1, DEL, line separators: one space
  s = s.replace(/\bpassword\s+"[^"]*"?/gi, `password "${REDACTED}"`);
  // Longest first, so a password that contains another is replaced whole.
  for (const secret of [...new Set(secrets)].filter((x) => x.length > 0).sort((a, b) => b.length - a.length)) {
    s = s.split(secret).join(REDACTED);
  }
  s = s.replace(/ {2,}/g, ' ').trim();
  // Capped after redaction, so the cut never leaves the start of a password behind.
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
