// The records xdp_monitor.c's fentry/fexit programs write (struct monitor_meta, then the frame's first bytes).
// Pure: bytes in, a sample out.

export const MONITOR_MAGIC = 0x676c626d;
/** sizeof(struct monitor_meta): 28 bytes of fields, padded to 8-byte alignment. */
export const MONITOR_META_SIZE = 32;

export type MonitorPoint = 'entry' | 'exit';

export const XDP_ACTIONS = ['ABORTED', 'DROP', 'PASS', 'TX', 'REDIRECT'] as const;

export interface MonitorSample {
  point: MonitorPoint;
  /** The XDP verdict at exit ('ABORTED' .. 'REDIRECT', or the number when unknown); null at entry. */
  action: string | null;
  /** The frame's whole length; `frame` holds its first `frame.length` bytes (the snap length). */
  length: number;
  frame: Buffer;
  /** CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns). */
  monotonicNs: bigint;
  cpu: number;
}

export function actionName(code: number): string {
  return XDP_ACTIONS[code] ?? String(code);
}

/** One sample, or null for a record that is not ours or is cut short (never trusted blindly: it is kernel memory
 * we read, but the perf array could in principle carry another writer's records). */
export function decodeSample(data: Buffer, cpu: number): MonitorSample | null {
  if (data.length < MONITOR_META_SIZE || data.readUInt32LE(0) !== MONITOR_MAGIC) return null;
  const point = data[4] === 0 ? 'entry' : data[4] === 1 ? 'exit' : null;
  if (!point) return null;
  const capLen = data.readUInt32LE(16);
  if (MONITOR_META_SIZE + capLen > data.length) return null;
  return {
    point,
    action: point === 'exit' ? actionName(data.readInt32LE(8)) : null,
    length: data.readUInt32LE(12),
    frame: Buffer.from(data.subarray(MONITOR_META_SIZE, MONITOR_META_SIZE + capLen)),
    monotonicNs: data.readBigUInt64LE(24),
    cpu,
  };
}
