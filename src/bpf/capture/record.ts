// The record xdp_lb_capture.o (and a backend's tc_backend_capture.o) hands to user space per captured frame (struct
// lb_cap_record in lb_capture.h, then the frame as it leaves), and the names of what it carries. Pure: bytes in, a
// record out.
import { COUNTER_NAMES } from '../dataplane/codec.js';
import { SNAT_COUNTER_NAMES } from '../dataplane/snat.js';
import { STAT_NAMES as BACKEND_STAT_NAMES } from '../backend/codec.js';

export const CAPTURE_MAGIC = 0x676c6263;
export const CAPTURE_VERSION = 2;
/** LB_CAP_SNAPLEN: the bytes of each frame a record carries, as received and as it leaves. */
export const CAPTURE_SNAPLEN = 192;
/** offsetof(struct lb_cap_record, entry): the fixed header. */
export const CAPTURE_HEADER_SIZE = 48;
/** sizeof(struct lb_cap_record): the header and the entry bytes; the exit bytes follow. */
export const CAPTURE_RECORD_SIZE = CAPTURE_HEADER_SIZE + CAPTURE_SNAPLEN;
/** LB_CAP_SNAT_BASE: lb_snat_stats counter i is bit 32 + i of a record's counters. */
export const SNAT_COUNTER_BIT = 32;

/** struct lb_cap_record as checked against the object's BTF at load. */
export const CAPTURE_RECORD_LAYOUT = {
  size: CAPTURE_RECORD_SIZE,
  members: { magic: 0, version: 4, hook: 6, verdict: 8, real_id: 12, counters: 16, entry_len: 24, entry_cap: 28, exit_len: 32, exit_cap: 36, ts_ns: 40, entry: 48 },
};

export const XDP_ACTIONS = ['ABORTED', 'DROP', 'PASS', 'TX', 'REDIRECT'] as const;
/** TC actions (TC_ACT_*, from -1: UNSPEC) of a backend's programs. */
const TC_ACTIONS = ['UNSPEC', 'OK', 'RECLASSIFY', 'SHOT', 'PIPE', 'STOLEN', 'QUEUED', 'REPEAT', 'REDIRECT'] as const;

/** The TC verdicts a backend capture can select (--action), from TC_ACT_OK (0) on. */
export const TC_VERDICTS: readonly string[] = TC_ACTIONS.slice(1);

/** LB_CAP_HOOK_*: which program took the record. */
export const CAPTURE_HOOKS = ['xdp', 'tc-ingress', 'tc-egress'] as const;
export type CaptureHook = (typeof CAPTURE_HOOKS)[number];

export function actionName(code: number, hook: CaptureHook = 'xdp'): string {
  return (hook === 'xdp' ? XDP_ACTIONS[code] : TC_ACTIONS[code + 1]) ?? String(code);
}

/** Every counter a record can name, by its bit: the lb counters, then the SNAT ones from bit 32. */
export const CAPTURE_COUNTER_BITS: ReadonlyMap<string, number> = new Map([
  ...COUNTER_NAMES.map((n, i) => [n, i] as const),
  ...SNAT_COUNTER_NAMES.map((n, i) => [n, SNAT_COUNTER_BIT + i] as const),
]);

/** A backend's counters (be_stats), by their bit. */
export const BACKEND_COUNTER_BITS: ReadonlyMap<string, number> = new Map(BACKEND_STAT_NAMES.map((n, i) => [n, i] as const));

/** The counter names of a record's bit set, in bit order (a backend's be_stats names for its TC hooks). */
export function counterNames(bits: bigint, hook: CaptureHook = 'xdp'): string[] {
  const out: string[] = [];
  for (const [name, bit] of hook === 'xdp' ? CAPTURE_COUNTER_BITS : BACKEND_COUNTER_BITS) if ((bits >> BigInt(bit)) & 1n) out.push(name);
  return out;
}

export interface CaptureRecord {
  /** Which program: xdp_lb, or a backend's TC ingress / egress program. */
  hook: CaptureHook;
  /** The XDP action ('ABORTED' .. 'REDIRECT'; for the TC hooks 'OK', 'SHOT', ...; the number when unknown). */
  action: string;
  /** The real the packet path chose (0: none). */
  realId: number;
  /** Every counter the packet path moved for this frame. */
  counters: string[];
  /** The frame as received (its first bytes), null when entry frames were not asked for. */
  entry: Buffer | null;
  entryLength: number;
  /** The frame as it leaves (its first bytes: for a dropped or passed frame, as it was at the verdict). */
  exit: Buffer;
  exitLength: number;
  /** CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) at the verdict. */
  monotonicNs: bigint;
  cpu: number;
}

/** One record, or null for one that is not ours or is cut short (never trusted blindly: the perf array could in
 * principle carry another writer's records). */
export function decodeRecord(data: Buffer, cpu: number): CaptureRecord | null {
  if (data.length < CAPTURE_RECORD_SIZE || data.readUInt32LE(0) !== CAPTURE_MAGIC || data.readUInt16LE(4) !== CAPTURE_VERSION) return null;
  const entryCap = data.readUInt32LE(28);
  const exitCap = data.readUInt32LE(36);
  const hook = CAPTURE_HOOKS[data.readUInt16LE(6)];
  if (!hook || entryCap > CAPTURE_SNAPLEN || exitCap > CAPTURE_SNAPLEN || CAPTURE_RECORD_SIZE + exitCap > data.length) return null;
  return {
    hook,
    action: actionName(data.readInt32LE(8), hook),
    realId: data.readUInt32LE(12),
    counters: counterNames(data.readBigUInt64LE(16), hook),
    entry: entryCap ? Buffer.from(data.subarray(CAPTURE_HEADER_SIZE, CAPTURE_HEADER_SIZE + entryCap)) : null,
    entryLength: data.readUInt32LE(24),
    exit: Buffer.from(data.subarray(CAPTURE_RECORD_SIZE, CAPTURE_RECORD_SIZE + exitCap)),
    exitLength: data.readUInt32LE(32),
    monotonicNs: data.readBigUInt64LE(40),
    cpu,
  };
}

/** The verdict as words: `TX to real 198.51.100.11 (id 1)`, `DROP drop_martian`, `PASS pass_not_vip`, then the
 * counters the frame moved in brackets. `realName` gives a real id's address (undefined: unknown). */
export function verdictText(r: Pick<CaptureRecord, 'action' | 'realId' | 'counters'> & { hook?: CaptureHook }, realName: (id: number) => string | undefined): string {
  const counters = r.counters.length ? ` [${r.counters.join(' ')}]` : '';
  // a backend's programs: the TC verdict and what they did (decap_ipip4, reply4_rewrite, decap_not_allowed, ...)
  if (r.hook && r.hook !== 'xdp') return `${r.hook} ${r.action}${counters}`;
  const real = () => `real ${realName(r.realId) ?? '?'} (id ${r.realId})`;
  const sent = r.action === 'TX' || r.action === 'REDIRECT';
  // a SNAT reply (or an ICMP error about a SNAT flow) goes back to the client; the real is where it came from
  if (sent && r.realId && (r.counters.includes('snat_reply') || r.counters.includes('snat_icmp')))
    return `${r.action} to the client, from ${real()}${counters}`;
  if (sent && r.realId) return `${r.action} to ${real()}${counters}`;
  const why = r.counters.filter((c) => /^(snat_)?(drop|pass)_/.test(c));
  return `${r.action}${why.length ? ` ${why.join(' ')}` : ''}${counters}`;
}
