// What the daemon found when it attached xdp_lb, kept beside the link pin so a restarted daemon that adopts the
// link reports the same: an adopted generic link cannot say by itself whether native was asked for and could not
// forward (probing native again would detach the working generic program). The record is a pinned one-entry array
// map (bpffs holds no regular files) that lives and dies with the pins; it is replaced whole (a new map pinned
// beside it and renamed over it, atomic on bpffs) and trusted only when it names the link that is pinned now.
import { existsSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, MapType } from './libbpf.js';
import type { XdpForwarding } from './xdp-forwarding.js';

export const RECORD_PIN = 'xdp_attach';
const MAGIC = 0x41584c47; // 'GLXA'
const VERSION = 1;
const VALUE_SIZE = 256;
const HEAD = 32;
const MODES = ['native', 'generic'] as const;
const REQUESTED = ['auto', 'native', 'generic'] as const;

/** The forwarding outcome of one attach, for the link it describes. */
export interface AttachRecord {
  linkId: number;
  ifindex: number;
  mode: 'native' | 'generic';
  requested: 'native' | 'generic' | 'auto';
  fellBack: boolean;
  forwards: boolean | null;
  /** What the forwarding probe said (the cause of a fallback). */
  probe: string;
  /** When it was found (ms since the epoch). */
  at: number;
}

/** Layout (little endian): magic u32, version u16, mode u8, requested u8, fellBack u8, forwards u8 (0 false, 1 true,
 * 2 unknown), probe length u16, linkId u32, ifindex u32, reserved u32, at u64 ms, probe UTF-8 (at most 224 bytes). */
function encode(r: AttachRecord): Buffer {
  const v = Buffer.alloc(VALUE_SIZE);
  let probe = Buffer.from(r.probe, 'utf8');
  if (probe.length > VALUE_SIZE - HEAD) probe = Buffer.from(new TextDecoder().decode(probe.subarray(0, VALUE_SIZE - HEAD)).replace(/\uFFFD$/, ''), 'utf8');
  v.writeUInt32LE(MAGIC, 0);
  v.writeUInt16LE(VERSION, 4);
  v.writeUInt8(MODES.indexOf(r.mode), 6);
  v.writeUInt8(REQUESTED.indexOf(r.requested), 7);
  v.writeUInt8(r.fellBack ? 1 : 0, 8);
  v.writeUInt8(r.forwards === null ? 2 : r.forwards ? 1 : 0, 9);
  v.writeUInt16LE(probe.length, 10);
  v.writeUInt32LE(r.linkId, 12);
  v.writeUInt32LE(r.ifindex, 16);
  v.writeBigUInt64LE(BigInt(r.at), 24);
  probe.copy(v, HEAD);
  return v;
}

/** The record, or why it cannot be trusted. */
function decode(v: Buffer): AttachRecord | string {
  if (v.readUInt32LE(0) !== MAGIC) return 'bad magic';
  if (v.readUInt16LE(4) !== VERSION) return `version ${v.readUInt16LE(4)}`;
  const mode = MODES[v.readUInt8(6)];
  const requested = REQUESTED[v.readUInt8(7)];
  const fellBack = v.readUInt8(8);
  const forwards = v.readUInt8(9);
  const len = v.readUInt16LE(10);
  if (!mode || !requested || fellBack > 1 || forwards > 2 || len > VALUE_SIZE - HEAD || v.readUInt32LE(20) !== 0) return 'field out of range';
  if (fellBack && (mode !== 'generic' || requested !== 'auto')) return 'fellBack without an auto request in generic mode';
  let probe: string;
  try {
    probe = new TextDecoder('utf-8', { fatal: true }).decode(v.subarray(HEAD, HEAD + len));
  } catch {
    return 'probe text is not UTF-8';
  }
  return { mode, requested, fellBack: fellBack === 1, forwards: forwards === 2 ? null : forwards === 1, probe,
    linkId: v.readUInt32LE(12), ifindex: v.readUInt32LE(16), at: Number(v.readBigUInt64LE(24)) };
}

/** Replaces the record under `pinDir` whole. */
export function writeAttachRecord(pinDir: string, r: AttachRecord): void {
  const path = join(pinDir, RECORD_PIN);
  const next = `${path}_next`;
  rmSync(next, { force: true });
  const m = BpfMap.create({ name: RECORD_PIN, type: MapType.array, keySize: 4, valueSize: VALUE_SIZE, maxEntries: 1 });
  try {
    m.update(Buffer.alloc(4), encode(r));
    m.pin(next);
    renameSync(next, path);
  } finally {
    m.close();
  }
}

export function removeAttachRecord(pinDir: string): void {
  rmSync(join(pinDir, RECORD_PIN), { force: true });
}

/**
 * The record under `pinDir` if it describes the link `linkId` on `ifindex` in `mode` (what the kernel shows now);
 * otherwise a reason it is not used (missing, not our layout, about another link).
 */
export function readAttachRecord(pinDir: string, linkId: number, ifindex: number, mode: 'native' | 'generic'): AttachRecord | string {
  const path = join(pinDir, RECORD_PIN);
  if (!existsSync(path)) return 'no record';
  let m: BpfMap;
  try {
    m = BpfMap.open(path, RECORD_PIN);
  } catch (e) {
    return `not a map (${(e as Error).message})`;
  }
  try {
    if (m.type !== MapType.array || m.keySize !== 4 || m.valueSize !== VALUE_SIZE || m.maxEntries !== 1) return 'not the record layout';
    const v = m.lookup(Buffer.alloc(4));
    const r = v ? decode(v) : 'empty';
    if (typeof r === 'string') return r;
    if (r.linkId !== linkId || r.ifindex !== ifindex || r.mode !== mode)
      return `it describes link ${r.linkId} (ifindex ${r.ifindex}, ${r.mode}), not link ${linkId} (ifindex ${ifindex}, ${mode})`;
    return r;
  } finally {
    m.close();
  }
}

/** What an adopted generic link reports: the recorded outcome when there is a valid one (a fallback stays a
 * fallback while the request is still 'auto'), else that nothing is known of how it was attached. */
export function adoptedGeneric(rec: AttachRecord | string, requested: 'native' | 'generic' | 'auto'): XdpForwarding {
  const base = { mode: 'generic' as const, requested, forwards: null };
  if (typeof rec === 'string')
    return { ...base, fellBack: false, detail: `adopted the generic attachment of an earlier run without a valid attach record (${rec}); native not tried` };
  if (rec.fellBack && requested === 'auto')
    return { ...base, fellBack: true, forwards: rec.forwards,
      detail: `native XDP could not forward, fell back to generic (found ${new Date(rec.at).toISOString()}, adopted across a restart): ${rec.probe}` };
  if (requested === rec.requested) return { ...base, fellBack: false, detail: rec.probe };
  return { ...base, fellBack: false, detail: `kept the generic attachment of an earlier run with --xdp-mode ${rec.requested}: ${rec.probe}` };
}
