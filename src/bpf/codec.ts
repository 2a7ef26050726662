// Struct codecs: one declaration per C struct gives encode/decode for map keys and
// values and the expected layout, which checkBtfLayout() compares with the BPF
// object's BTF at load so a C/TS mismatch fails at startup instead of corrupting maps.
import type { BpfMap, BpfObject } from './libbpf.js';

export type FieldKind = 'u8' | 'u16' | 'u32' | 'u64' | 'be16' | 'be32' | 'bytes';

export interface FieldSpec { offset: number; kind: FieldKind; /** for 'bytes' */ length?: number }

type FieldValue<K extends FieldKind> = K extends 'u64' ? bigint : K extends 'bytes' ? Buffer : number;

export type StructValue<F extends Record<string, FieldSpec>> = { [N in keyof F]: FieldValue<F[N]['kind']> };

const WIDTH: Record<Exclude<FieldKind, 'bytes'>, number> = { u8: 1, u16: 2, u32: 4, u64: 8, be16: 2, be32: 4 };

export function fieldWidth(f: FieldSpec): number {
  return f.kind === 'bytes' ? (f.length ?? 0) : WIDTH[f.kind];
}

function codedError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

export interface StructCodec<F extends Record<string, FieldSpec>> {
  /** C struct name (without `struct `), as in BTF. */
  readonly name: string;
  readonly size: number;
  readonly fields: F;
  encode(v: StructValue<F>, into?: Buffer, offset?: number): Buffer;
  decode(b: Buffer, offset?: number): StructValue<F>;
  /** The layout to check against BTF: total size and member byte offsets. */
  layout(): { size: number; members: Record<string, number> };
}

/**
 * Declares a C struct. Fields must not overlap or overrun `size`; unlisted bytes
 * (padding) encode as zero.
 */
export function defineStruct<F extends Record<string, FieldSpec>>(name: string, size: number, fields: F): StructCodec<F> {
  const spans = Object.entries(fields).map(([n, f]) => ({ n, start: f.offset, end: f.offset + fieldWidth(f) }));
  spans.sort((a, b) => a.start - b.start);
  for (let i = 0; i < spans.length; i++) {
    const s = spans[i]!;
    if (s.start < 0 || s.end > size || s.end === s.start)
      throw codedError('EINVAL', `struct ${name}: field ${s.n} [${s.start}, ${s.end}) outside the ${size}-byte struct`);
    if (i > 0 && spans[i - 1]!.end > s.start)
      throw codedError('EINVAL', `struct ${name}: fields ${spans[i - 1]!.n} and ${s.n} overlap`);
  }
  const entries = Object.entries(fields) as Array<[keyof F & string, FieldSpec]>;
  return {
    name, size, fields,
    encode(v, into, offset = 0) {
      const b = into ?? Buffer.alloc(size);
      if (into) b.fill(0, offset, offset + size);
      for (const [n, f] of entries) {
        const x = v[n] as unknown;
        if (x === undefined) throw codedError('EINVAL', `struct ${name}: field ${n} missing`);
        const o = offset + f.offset;
        switch (f.kind) {
          case 'u8': b.writeUInt8(x as number, o); break;
          case 'u16': b.writeUInt16LE(x as number, o); break;
          case 'u32': b.writeUInt32LE(x as number, o); break;
          case 'be16': b.writeUInt16BE(x as number, o); break;
          case 'be32': b.writeUInt32BE(x as number, o); break;
          case 'u64': b.writeBigUInt64LE(BigInt(x as bigint), o); break;
          case 'bytes': {
            const src = x as Buffer;
            if (src.length !== f.length) throw codedError('EINVAL', `struct ${name}: field ${n} needs ${f.length} bytes, got ${src.length}`);
            src.copy(b, o);
            break;
          }
        }
      }
      return b;
    },
    decode(b, offset = 0) {
      if (b.length - offset < size) throw codedError('EINVAL', `struct ${name}: ${b.length - offset} bytes, need ${size}`);
      const out: Record<string, unknown> = {};
      for (const [n, f] of entries) {
        const o = offset + f.offset;
        switch (f.kind) {
          case 'u8': out[n] = b.readUInt8(o); break;
          case 'u16': out[n] = b.readUInt16LE(o); break;
          case 'u32': out[n] = b.readUInt32LE(o); break;
          case 'be16': out[n] = b.readUInt16BE(o); break;
          case 'be32': out[n] = b.readUInt32BE(o); break;
          case 'u64': out[n] = b.readBigUInt64LE(o); break;
          case 'bytes': out[n] = Buffer.from(b.subarray(o, o + (f.length ?? 0))); break;
        }
      }
      return out as StructValue<F>;
    },
    layout() {
      return { size, members: Object.fromEntries(entries.map(([n, f]) => [n, f.offset])) };
    },
  };
}

/** Scalar key/value helpers for the common u32/u64 maps. */
export const u32 = {
  size: 4,
  encode(n: number): Buffer { const b = Buffer.alloc(4); b.writeUInt32LE(n >>> 0); return b; },
  decode(b: Buffer, offset = 0): number { return b.readUInt32LE(offset); },
};
export const u64 = {
  size: 8,
  encode(n: bigint | number): Buffer { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(n)); return b; },
  decode(b: Buffer, offset = 0): bigint { return b.readBigUInt64LE(offset); },
};

/** Packs many values with one codec into a single buffer (for batch updates). */
export function packMany<T>(codec: { size: number; encode(v: T, into?: Buffer, offset?: number): Buffer }, values: T[]): Buffer {
  const out = Buffer.alloc(codec.size * values.length);
  values.forEach((v, i) => {
    const enc = codec.encode(v);
    enc.copy(out, i * codec.size);
  });
  return out;
}

/**
 * Compares a TS layout with the object's BTF for `struct <structName>`: size and
 * each listed member's byte offset. Members present in C but not listed are errors
 * too (a new C field the codec ignores would be silently zeroed on write).
 * Throws Error with code 'EPROTO' listing every difference.
 */
export function checkBtfLayout(obj: Pick<BpfObject, 'btfStruct' | 'path'>, structName: string,
  expected: { size: number; members: Record<string, number> }): void {
  const bare = structName.replace(/^struct\s+/, '');
  const btf = obj.btfStruct(bare);
  if (!btf) throw codedError('ENOENT', `struct ${bare}: not in the BTF of ${obj.path} (compiled without -g, or renamed)`);
  const problems: string[] = [];
  if (btf.size !== expected.size) problems.push(`size is ${btf.size} in C, ${expected.size} in TS`);
  const inC = new Map(btf.members.map((m) => [m.name, m]));
  for (const [name, off] of Object.entries(expected.members)) {
    const m = inC.get(name);
    if (!m) problems.push(`member ${name} missing in C`);
    else if (m.offset !== off) problems.push(`member ${name} at offset ${m.offset} in C, ${off} in TS`);
    else if (m.bitSize) problems.push(`member ${name} is a bitfield in C (not supported by codecs)`);
  }
  for (const m of btf.members) if (!(m.name in expected.members)) problems.push(`member ${m.name} (offset ${m.offset}) missing in TS`);
  if (problems.length)
    throw codedError('EPROTO', `BTF layout mismatch for struct ${bare} in ${obj.path}: ${problems.join('; ')}`);
}

/** Checks a map's key and value sizes (and BTF value type name when known) against codecs. */
export function checkMapCodec(map: BpfMap, key: { size: number; name?: string }, value: { size: number; name?: string }): void {
  const problems: string[] = [];
  if (map.keySize !== key.size) problems.push(`key is ${map.keySize} bytes in C, ${key.size} in TS`);
  if (map.valueSize !== value.size) problems.push(`value is ${map.valueSize} bytes in C, ${value.size} in TS`);
  if (value.name && map.btfValueType && map.btfValueType !== `struct ${value.name}`)
    problems.push(`value type is ${map.btfValueType} in C, struct ${value.name} in TS`);
  if (key.name && map.btfKeyType && map.btfKeyType !== `struct ${key.name}`)
    problems.push(`key type is ${map.btfKeyType} in C, struct ${key.name} in TS`);
  if (problems.length) throw codedError('EPROTO', `map '${map.name}': ${problems.join('; ')}`);
}
