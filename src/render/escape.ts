// The one escaping function for text that came from a config (or any other untrusted input) and is printed where a
// terminal, an editor or a log viewer interprets characters: validate's diagnostics, the daemon's reasons and log
// lines. Control characters (C0 with tab and newline, DEL, C1: ESC sequences that move the cursor, retitle the
// window or fake lines) and the bidirectional overrides ("Trojan Source": text that reads differently from what
// it is) are written as visible escapes, so a message is one line that shows what the file holds. Pure.

// C0, DEL, C1; U+061C, U+200E/U+200F and U+202A..U+202E, U+2066..U+2069: bidi marks, embeddings, overrides, isolates;
// U+2028/U+2029: line and paragraph separators, which editors, log viewers and some terminals break lines at.
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

export function escapeControl(text: string): string {
  return text.replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    return NAMED[c] ?? (code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`);
  });
}
