// Reading and writing the SSH wire encoding (RFC 4251 §5: uint32, string, mpint) with bounds on every read,
// so a truncated or hostile blob ends in a SignatureFormatError, never an out-of-range read or a crash.
export class SignatureFormatError extends Error {
  override name = 'SignatureFormatError';
}

export class WireReader {
  private pos = 0;
  constructor(private readonly buf: Buffer, private readonly what: string) {}

  get done(): boolean {
    return this.pos === this.buf.length;
  }

  bytes(n: number): Buffer {
    if (n < 0 || this.pos + n > this.buf.length) throw new SignatureFormatError(`${this.what}: truncated`);
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  uint32(): number {
    return this.bytes(4).readUInt32BE(0);
  }

  /** A length-prefixed string; `max` bounds the declared length before anything is sliced. */
  string(max = 1 << 16): Buffer {
    const n = this.uint32();
    if (n > max) throw new SignatureFormatError(`${this.what}: field of ${n} bytes exceeds ${max}`);
    return this.bytes(n);
  }

  text(max = 256): string {
    const b = this.string(max);
    if (!/^[\x20-\x7e]*$/.test(b.toString('latin1'))) throw new SignatureFormatError(`${this.what}: non-printable name`);
    return b.toString('latin1');
  }

  /** An mpint as its unsigned big-endian magnitude (leading zero bytes removed); negative values are refused. */
  mpint(max = 2048): Buffer {
    const b = this.string(max);
    if (b.length && b[0]! & 0x80) throw new SignatureFormatError(`${this.what}: negative integer`);
    let i = 0;
    while (i < b.length && b[i] === 0) i++;
    return b.subarray(i);
  }

  end(): void {
    if (!this.done) throw new SignatureFormatError(`${this.what}: ${this.buf.length - this.pos} trailing bytes`);
  }
}

export function wireString(b: Buffer | string): Buffer {
  const body = typeof b === 'string' ? Buffer.from(b, 'latin1') : b;
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

export function wireUint32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

/** Unsigned magnitude -> mpint body (a 0x00 byte in front when the top bit is set). */
export function wireMpint(magnitude: Buffer): Buffer {
  let i = 0;
  while (i < magnitude.length && magnitude[i] === 0) i++;
  const m = magnitude.subarray(i);
  return wireString(m.length && m[0]! & 0x80 ? Buffer.concat([Buffer.from([0]), m]) : m);
}
