// Bytes -> text for one config file: strict UTF-8 (a stray Latin-1 byte is an error, not a U+FFFD
// that would silently change a name), with the position of the first bad byte for the message.

export type DecodeResult = { ok: true; text: string } | { ok: false; line: number; col: number; message: string };

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

export function decodeUtf8(content: Uint8Array): DecodeResult {
  try {
    return { ok: true, text: strictUtf8.decode(content) };
  } catch {
    const offset = firstInvalidUtf8Offset(content);
    const prefix = strictUtf8.decode(content.subarray(0, offset));
    const lastNewline = prefix.lastIndexOf('\n');
    const line = prefix.split('\n').length;
    const col = [...prefix.slice(lastNewline + 1)].length + 1;
    const byte = content[offset]!.toString(16).padStart(2, '0');
    return { ok: false, line, col, message: `file is not valid UTF-8 (byte 0x${byte} at offset ${offset})` };
  }
}

/** Offset of the first byte that does not start or continue a well-formed UTF-8 sequence. */
export function firstInvalidUtf8Offset(b: Uint8Array): number {
  let i = 0;
  while (i < b.length) {
    const c = b[i]!;
    let need: number;
    let min: number; // smallest code point the sequence may encode (rejects overlong forms)
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      need = 1;
      min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      need = 2;
      min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3;
      min = 0x10000;
    } else {
      return i;
    }
    let cp = c & (0x3f >> need);
    for (let k = 1; k <= need; k++) {
      const cc = b[i + k];
      if (cc === undefined || (cc & 0xc0) !== 0x80) return i;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += need + 1;
  }
  return b.length;
}
