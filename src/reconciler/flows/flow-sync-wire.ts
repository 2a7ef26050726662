// The wire of the connection-state sync (kind 'flows.sync', docs/datapath.md "Connection-state sync", Transport): a
// message's entries and its end-of-resync mark, each field checked (BadBody names the first bad one), and their
// encoding with ages as of sending. The sync itself is flow-sync.ts.
import { MAX_AGE_MS, canonicalAddress, type CtEntry, type FlowEntries, type SnatEntry } from '../../bpf/dataplane/flow-state.js';
import { BadBody } from '../peer/index.js';

/** The end-of-resync mark (docs/datapath.md "Connection-state sync"): on every batch of a full-table send, `seq`
 * naming that send, `done` on its last batch, and `need` on its first when the sender has not yet received this
 * node's own whole table since it started (this node then resyncs to it: a restarted peer learns everything).
 * `needOwn` (with `need`): the sender rejoins with empty maps and asks for its own SNAT translations back too;
 * `ownBack` (every batch): this send carries the receiver's own translations this node kept (it answers `needOwn`). */
export interface ResyncMark { seq: number; done: boolean; need?: boolean; needOwn?: boolean; ownBack?: boolean }
export type Wire = { v: 1; ct: unknown[]; snat: unknown[]; gone?: unknown[]; resync?: ResyncMark };
/** 'gone': a translation of the sender that ended there (same fields as 'snat'; idleMs: its last packet's age). */
export type Item = { kind: 'ct'; e: CtEntry; at: number } | { kind: 'snat' | 'gone'; e: SnatEntry; at: number };

const isPort = (x: unknown): x is number => Number.isInteger(x) && (x as number) >= 1 && (x as number) <= 65535;
const isU32 = (x: unknown): x is number => Number.isInteger(x) && (x as number) >= 1 && (x as number) <= 0xffffffff;
const isProto = (x: unknown): x is number => x === 6 || x === 17;

function addr(x: unknown, where: string): string {
  const a = typeof x === 'string' && x.length <= 45 ? canonicalAddress(x) : null;
  if (!a) throw new BadBody(`${where}: not an address in canonical form`);
  return a;
}

/** An entry's age: absent or null (unknown: a sender without recency marks), or a number that importFlows checks
 * (a negative, fractional or too large age refuses that entry alone, counted as 'bad-age'). */
function age(x: unknown, where: string): number | null {
  if (x === undefined || x === null) return null;
  if (typeof x !== 'number' || !Number.isFinite(x)) throw new BadBody(`${where}: ageMs not a number`);
  return x;
}

/** The body of a 'flows.sync' message, checked field by field (BadBody names the first bad one). */
export function parseFlowSync(body: unknown, maxEntries: number): FlowEntries {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new BadBody('body: not an object');
  const b = body as Partial<Wire>;
  if (b.v !== 1) throw new BadBody('v: not 1');
  if (!Array.isArray(b.ct) || !Array.isArray(b.snat)) throw new BadBody('ct, snat: not arrays');
  if (b.gone !== undefined && !Array.isArray(b.gone)) throw new BadBody('gone: not an array');
  const goneIn = b.gone ?? [];
  if (b.ct.length + b.snat.length + goneIn.length > maxEntries) throw new BadBody(`more than ${maxEntries} entries`);
  const ct = b.ct.map((x, i): CtEntry => {
    const w = `ct[${i}]`;
    if (!Array.isArray(x) || (x.length !== 6 && x.length !== 7)) throw new BadBody(`${w}: not [src, dst, sport, dport, proto, realId, ageMs]`);
    const [src, dst, sport, dport, proto, realId, ageMs] = x;
    const e = { src: addr(src, `${w}.src`), dst: addr(dst, `${w}.dst`), sport, dport, proto, realId, ageMs: age(ageMs, w) };
    if (!isPort(sport) || !isPort(dport) || !isProto(proto) || !isU32(realId)) throw new BadBody(`${w}: bad port, protocol or real id`);
    if (e.src.includes(':') !== e.dst.includes(':')) throw new BadBody(`${w}: mixed address families`);
    return e as CtEntry;
  });
  const snatOf = (x: unknown, w: string): SnatEntry => {
    if (!Array.isArray(x) || x.length < 10 || x.length > 12) {
      throw new BadBody(`${w}: not [client, vip, cport, vport, proto, realId, realPort, snatAddress, snatPort, closing, ageMs, idleMs]`);
    }
    const [client, vip, clientPort, vipPort, proto, realId, realPort, snatAddress, snatPort, closing, ageMs, idleMs] = x;
    const e = { client: addr(client, `${w}.client`), vip: addr(vip, `${w}.vip`), clientPort, vipPort, proto, realId, realPort,
      snatAddress: addr(snatAddress, `${w}.snatAddress`), snatPort, closing, ageMs: age(ageMs, w), idleMs: age(idleMs, w) };
    if (!isPort(clientPort) || !isPort(vipPort) || !isProto(proto) || !isU32(realId) || !isPort(realPort) || !isPort(snatPort) ||
      typeof closing !== 'boolean') throw new BadBody(`${w}: bad port, protocol, real id or state`);
    const v6 = e.vip.includes(':');
    if (e.client.includes(':') !== v6 || e.snatAddress.includes(':') !== v6) throw new BadBody(`${w}: mixed address families`);
    return e as SnatEntry;
  };
  const snat = b.snat.map((x, i) => snatOf(x, `snat[${i}]`));
  const gone = goneIn.map((x, i) => snatOf(x, `gone[${i}]`));
  return gone.length ? { ct, snat, gone } : { ct, snat };
}

/** A message's end-of-resync mark: absent (a delta, or an older peer), or checked field by field. Unknown fields
 * inside it are ignored (a newer peer's). */
export function parseResyncMark(body: unknown): ResyncMark | undefined {
  const m = (body as { resync?: unknown } | null)?.resync;
  if (m === undefined) return undefined;
  if (typeof m !== 'object' || m === null || Array.isArray(m)) throw new BadBody('resync: not an object');
  const { seq, done, need, needOwn, ownBack } = m as Record<string, unknown>;
  if (!isU32(seq)) throw new BadBody('resync.seq: not an integer 1..2^32-1');
  if (typeof done !== 'boolean') throw new BadBody('resync.done: not a boolean');
  for (const [name, x] of [['need', need], ['needOwn', needOwn], ['ownBack', ownBack]] as const)
    if (x !== undefined && typeof x !== 'boolean') throw new BadBody(`resync.${name}: not a boolean`);
  return { seq, done, ...(need === true && { need: true }), ...(needOwn === true && { needOwn: true }), ...(ownBack === true && { ownBack: true }) };
}

/** An age (or unknown: null) `waitedMs` later, clamped to MAX_AGE_MS: an entry that waited (in a queue before
 * sending, or deferred at the receiver) is that much older. */
export function agedBy(ageMs: number | null, waitedMs: number): number | null {
  return ageMs === null ? null : Math.min(MAX_AGE_MS, ageMs + Math.max(0, waitedMs));
}

export function encodeFlowSync(items: Item[], now: number, resync?: ResyncMark): Wire {
  const ct: unknown[] = [];
  const snat: unknown[] = [];
  const gone: unknown[] = [];
  for (const it of items) {
    // ages as of sending, not of reading: an entry that waited in the queue is that much older
    const older = (a: number | null) => agedBy(a, now - it.at);
    if (it.kind === 'ct') ct.push([it.e.src, it.e.dst, it.e.sport, it.e.dport, it.e.proto, it.e.realId, older(it.e.ageMs)]);
    else {
      const e = it.e;
      (it.kind === 'snat' ? snat : gone).push([e.client, e.vip, e.clientPort, e.vipPort, e.proto, e.realId, e.realPort, e.snatAddress,
        e.snatPort, e.closing, older(e.ageMs), older(e.idleMs)]);
    }
  }
  return { v: 1, ct, snat, ...(gone.length && { gone }), ...(resync && { resync }) };
}
