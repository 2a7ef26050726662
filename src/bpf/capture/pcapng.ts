// pcapng (draft-ietf-opsawg-pcapng) for `gitlb capture --write`: a Section Header Block, one Interface Description
// Block (Ethernet, nanosecond timestamps) and an Enhanced Packet Block per frame, whose opt_comment carries the
// verdict and whose epb_flags say inbound (as received) or outbound (as it leaves). tcpdump -r reads it (libpcap
// >= 1.1), Wireshark and tshark show the comment (frame.comment). Pure: bytes out; the caller writes them.

const SHB = 0x0a0d0d0a;
const IDB = 0x00000001;
const EPB = 0x00000006;
const BYTE_ORDER_MAGIC = 0x1a2b3c4d;
const LINKTYPE_ETHERNET = 1;
const OPT_END = 0;
const OPT_COMMENT = 1;
const SHB_USERAPPL = 4;
const IF_NAME = 2;
const IF_TSRESOL = 9;
const EPB_FLAGS = 2;
/** A comment is cut to this many bytes (a verdict line is far shorter; the cap bounds a block's size). */
const MAX_COMMENT = 1024;

export type Direction = 'inbound' | 'outbound';

const pad4 = (n: number) => (4 - (n % 4)) % 4;

function option(code: number, value: Buffer): Buffer {
  const h = Buffer.alloc(4);
  h.writeUInt16LE(code, 0);
  h.writeUInt16LE(value.length, 2);
  return Buffer.concat([h, value, Buffer.alloc(pad4(value.length))]);
}

function options(list: Buffer[]): Buffer {
  return list.length ? Buffer.concat([...list, Buffer.alloc(4)]) : Buffer.alloc(0); // opt_endofopt: code 0, length 0
}

function block(type: number, body: Buffer): Buffer {
  const len = 12 + body.length;
  const b = Buffer.alloc(len);
  b.writeUInt32LE(type, 0);
  b.writeUInt32LE(len, 4);
  body.copy(b, 8);
  b.writeUInt32LE(len, len - 4);
  return b;
}

/** The file's start: a section (`application` as shb_userappl) and its one Ethernet interface. */
export function pcapngHeader(snaplen: number, interfaceName: string, application = 'gitlb capture'): Buffer {
  const shb = Buffer.alloc(16);
  shb.writeUInt32LE(BYTE_ORDER_MAGIC, 0);
  shb.writeUInt16LE(1, 4); // major
  shb.writeUInt16LE(0, 6); // minor
  shb.writeBigInt64LE(-1n, 8); // section length unknown
  const idb = Buffer.alloc(8);
  idb.writeUInt16LE(LINKTYPE_ETHERNET, 0);
  idb.writeUInt32LE(snaplen, 4);
  return Buffer.concat([
    block(SHB, Buffer.concat([shb, options([option(SHB_USERAPPL, Buffer.from(application))])])),
    block(IDB, Buffer.concat([idb, options([option(IF_NAME, Buffer.from(interfaceName)), option(IF_TSRESOL, Buffer.from([9]))])])),
  ]);
}

/** One frame: `frame` as captured (maybe cut), `length` its original length, `timeNs` nanoseconds since the epoch. */
export function pcapngPacket(frame: Buffer, length: number, timeNs: bigint, direction: Direction, comment: string): Buffer {
  const fixed = Buffer.alloc(20);
  fixed.writeUInt32LE(0, 0); // interface 0
  fixed.writeUInt32LE(Number((timeNs >> 32n) & 0xffffffffn), 4);
  fixed.writeUInt32LE(Number(timeNs & 0xffffffffn), 8);
  fixed.writeUInt32LE(frame.length, 12);
  fixed.writeUInt32LE(Math.max(length, frame.length), 16);
  const flags = Buffer.alloc(4);
  flags.writeUInt32LE(direction === 'inbound' ? 1 : 2, 0);
  let text = Buffer.from(comment, 'utf8');
  if (text.length > MAX_COMMENT) text = text.subarray(0, MAX_COMMENT);
  return block(EPB, Buffer.concat([fixed, frame, Buffer.alloc(pad4(frame.length)),
    options([option(OPT_COMMENT, text), option(EPB_FLAGS, flags)])]));
}

export interface PcapngFrame {
  interfaceId: number;
  timeNs: bigint;
  frame: Buffer;
  length: number;
  comment: string | null;
  direction: Direction | null;
}

/** Reads what pcapngHeader/pcapngPacket write (little-endian sections; other block types skipped), for tests and
 * for checking a file. Throws on a malformed block, naming its offset. */
export function readPcapng(b: Buffer): { interfaces: Array<{ linkType: number; snaplen: number; name: string | null }>; frames: PcapngFrame[] } {
  const interfaces: Array<{ linkType: number; snaplen: number; name: string | null }> = [];
  const frames: PcapngFrame[] = [];
  let o = 0;
  const opts = (start: number, end: number) => {
    const out = new Map<number, Buffer>();
    for (let p = start; p + 4 <= end;) {
      const code = b.readUInt16LE(p);
      const len = b.readUInt16LE(p + 2);
      if (code === OPT_END) break;
      if (p + 4 + len > end) throw new Error(`pcapng: option ${code} at ${p} runs past its block`);
      out.set(code, b.subarray(p + 4, p + 4 + len));
      p += 4 + len + pad4(len);
    }
    return out;
  };
  while (o + 12 <= b.length) {
    const type = b.readUInt32LE(o);
    const len = b.readUInt32LE(o + 4);
    if (len < 12 || len % 4 || o + len > b.length || b.readUInt32LE(o + len - 4) !== len) throw new Error(`pcapng: bad block at ${o}`);
    const end = o + len - 4;
    if (type === SHB && b.readUInt32LE(o + 8) !== BYTE_ORDER_MAGIC) throw new Error(`pcapng: section at ${o} is not little-endian`);
    if (type === IDB) {
      const name = opts(o + 16, end).get(IF_NAME);
      interfaces.push({ linkType: b.readUInt16LE(o + 8), snaplen: b.readUInt32LE(o + 12), name: name ? name.toString() : null });
    } else if (type === EPB) {
      const cap = b.readUInt32LE(o + 20);
      const data = o + 28;
      if (data + cap > end) throw new Error(`pcapng: packet at ${o} runs past its block`);
      const m = opts(data + cap + pad4(cap), end);
      const flags = m.get(EPB_FLAGS)?.readUInt32LE(0);
      frames.push({
        interfaceId: b.readUInt32LE(o + 8),
        timeNs: (BigInt(b.readUInt32LE(o + 12)) << 32n) | BigInt(b.readUInt32LE(o + 16)),
        frame: Buffer.from(b.subarray(data, data + cap)),
        length: b.readUInt32LE(o + 24),
        comment: m.get(OPT_COMMENT)?.toString('utf8') ?? null,
        direction: flags === undefined ? null : (flags & 3) === 1 ? 'inbound' : (flags & 3) === 2 ? 'outbound' : null,
      });
    }
    o += len;
  }
  return { interfaces, frames };
}
