// QUIC-shaped packets for the connection-ID routing tests: connection IDs that carry a server id in Katran's layout
// (docs/datapath.md "QUIC connection IDs"), short and long headers. Written from the layout's description, not from
// the program, so the tests compare two independent readings. Only the headers the lb reads are real QUIC; the rest
// of a packet is opaque bytes.

export const QUIC_V1 = 0x00000001;
export const QUIC_V2 = 0x6b3343cf;

/** Long-header packet types as they sit in the first byte (bits 4-5), per version. */
export const LONG_TYPE = {
  v1: { initial: 0x00, zeroRtt: 0x10, handshake: 0x20, retry: 0x30 },
  v2: { retry: 0x00, initial: 0x10, zeroRtt: 0x20, handshake: 0x30 },
} as const;

/**
 * A connection ID of `length` bytes whose first bytes carry `serverId` in CID version `version` (its two top bits):
 * 1: 16 bits after the version bits; 2: 24 bits in bytes 1-3; 3: 32 bits in bytes 1-4; 0: no server id. The other
 * bits are `fill` (a connection's own random part).
 */
export function cidWithServerId(version: 0 | 1 | 2 | 3, serverId: number, length = 8, fill = 0x5a): Buffer {
  const b = Buffer.alloc(length, fill);
  if (version === 1) {
    if (serverId > 0xffff) throw new Error(`server id ${serverId} does not fit CID version 1 (16 bits)`);
    b[0] = 0x40 | (serverId >> 10);
    b[1] = (serverId >> 2) & 0xff;
    b[2] = ((serverId & 3) << 6) | (fill & 0x3f);
  } else if (version === 2) {
    if (serverId > 0xffffff) throw new Error(`server id ${serverId} does not fit CID version 2 (24 bits)`);
    b[0] = 0x80 | (fill & 0x3f);
    b.writeUIntBE(serverId, 1, 3);
  } else if (version === 3) {
    b[0] = 0xc0 | (fill & 0x3f);
    b.writeUInt32BE(serverId >>> 0, 1);
  } else {
    b[0] = fill & 0x3f;
  }
  return b;
}

/** The server id a connection ID carries, read by the same layout (0: none): what a server checks it chose. */
export function serverIdOf(cid: Buffer): number {
  if (cid.length < 5) return 0;
  switch (cid[0]! >> 6) {
    case 1: return ((cid[0]! & 0x3f) << 10) | (cid[1]! << 2) | (cid[2]! >> 6);
    case 2: return cid.readUIntBE(1, 3);
    case 3: return cid.readUInt32BE(1);
    default: return 0;
  }
}

/** A 1-RTT (short header) packet: first byte 0x40 | bits, the destination CID, then `rest` (packet number, payload). */
export function quicShort(dcid: Buffer, rest: Buffer = Buffer.alloc(24, 0xab), first = 0x41): Buffer {
  return Buffer.concat([Buffer.from([first & 0x7f]), dcid, rest]);
}

/** A long-header packet: first byte 0xc0 | type | low bits, version, DCID length + DCID, SCID length + SCID, `rest`. */
export function quicLong(opts: { type: number; version: number; dcid: Buffer; scid?: Buffer; dcidLength?: number; rest?: Buffer; low?: number }): Buffer {
  const scid = opts.scid ?? Buffer.alloc(8, 0x33);
  const head = Buffer.alloc(6);
  head[0] = 0xc0 | (opts.type & 0x30) | ((opts.low ?? 1) & 0x0f);
  head.writeUInt32BE(opts.version >>> 0, 1);
  head[5] = opts.dcidLength ?? opts.dcid.length;
  return Buffer.concat([head, opts.dcid, Buffer.from([scid.length]), scid, opts.rest ?? Buffer.alloc(32, 0xcd)]);
}

/** A version negotiation packet (version 0), as a server sends it. */
export function quicVersionNegotiation(dcid: Buffer, scid: Buffer): Buffer {
  const head = Buffer.alloc(6);
  head[0] = 0x80 | 0x2a;
  head[5] = dcid.length;
  const versions = Buffer.alloc(8);
  versions.writeUInt32BE(QUIC_V1, 0);
  versions.writeUInt32BE(QUIC_V2, 4);
  return Buffer.concat([head, dcid, Buffer.from([scid.length]), scid, versions]);
}
