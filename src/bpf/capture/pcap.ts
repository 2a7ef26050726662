// Classic pcap (libpcap 2.4, microsecond timestamps, Ethernet link type) for `gitlb monitor --write`: the file
// tcpdump, Wireshark and tshark read. Pure: bytes out; the caller writes them.

const PCAP_MAGIC = 0xa1b2c3d4;
const LINKTYPE_ETHERNET = 1;

export function pcapHeader(snaplen: number): Buffer {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(PCAP_MAGIC, 0);
  b.writeUInt16LE(2, 4);
  b.writeUInt16LE(4, 6);
  b.writeInt32LE(0, 8); // thiszone
  b.writeUInt32LE(0, 12); // sigfigs
  b.writeUInt32LE(snaplen, 16);
  b.writeUInt32LE(LINKTYPE_ETHERNET, 20);
  return b;
}

/** One record: `frame` as captured (maybe cut to the snap length), `length` the frame's original length. */
export function pcapRecord(frame: Buffer, length: number, wallMs: number): Buffer {
  const h = Buffer.alloc(16);
  const sec = Math.floor(wallMs / 1000);
  h.writeUInt32LE(sec, 0);
  h.writeUInt32LE(Math.floor((wallMs - sec * 1000) * 1000), 4);
  h.writeUInt32LE(frame.length, 8);
  h.writeUInt32LE(Math.max(length, frame.length), 12);
  return Buffer.concat([h, frame]);
}
