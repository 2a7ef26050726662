// `gitlb status`, connection-state part: per lb node with `--flow-sync`, the sync's health per peer (in sync, entries
// sent / received / applied / refused / dropped, lag), the SNAT addresses it serves for lost peers, those it still holds
// for an owner that answers again (the handover: what it waits for, until when), and for a drained node whether it
// still carries traffic or can be stopped (docs/datapath.md "Connection-state sync", docs/bgp.md
// "Graceful drain"). Read from the status files' `flows` mapping: status files are input, so every field is checked,
// numbers bounded and texts capped; what does not fit is left out.
import type { NodeStatus } from './status-doc.js';
import { escapeControl } from '../../render/escape.js';
import { formatTable } from '../format/text-table.js';
import type { HandBackWait } from '../flows/snat-takeover.js';

export interface PeerSyncLine {
  peer: string; inSync: boolean; sent: number; received: number; applied: number; refused: number; dropped: number;
  queued: number; lagMs: number | null; lastError?: string;
}

export interface NodeFlowsVerdict {
  sync: PeerSyncLine[];
  /** SNAT address -> the lost node it belonged to. */
  serving: { address: string; owner: string }[];
  /** Of serving: held for an owner that answers again until it has its own translations (flows/snat-takeover.ts). */
  handback: HandbackLine[];
  drain?: { packetsPerSecond: number; activeTranslations: number; activeConnections: number; lastPacketAt: string | null; since: string;
    canStop: boolean };
}

export interface HandbackLine {
  address: string; owner: string; since: string; waitingFor: HandBackWait[]; limitSeconds: number; giveBackBy: string;
}

const WAITS: readonly HandBackWait[] = ['sync-spoke', 'own-translations'];

const obj = (x: unknown): Record<string, unknown> | null => (x && typeof x === 'object' && !Array.isArray(x) ? (x as Record<string, unknown>) : null);
const count = (x: unknown): number => (typeof x === 'number' && Number.isFinite(x) && x >= 0 ? Math.min(Math.floor(x), Number.MAX_SAFE_INTEGER) : 0);
const text = (x: unknown, max: number): string | undefined => (typeof x === 'string' ? x.replace(/\s+/g, ' ').slice(0, max) : undefined);

export function flowsOfStatus(s: NodeStatus): NodeFlowsVerdict | undefined {
  const f = obj(s.flows);
  if (!f) return undefined;
  const sync: PeerSyncLine[] = [];
  for (const [peer, raw] of Object.entries(obj(f.sync) ?? {}).slice(0, 64)) {
    const r = obj(raw);
    if (!r) continue;
    const refused = Object.values(obj(r.refused) ?? {}).reduce((n: number, v) => n + count(v), 0);
    const err = text(r.lastError, 120);
    sync.push({ peer: peer.slice(0, 63), inSync: r.inSync === true, sent: count(r.sent), received: count(r.received), applied: count(r.applied),
      refused, dropped: count(r.dropped), queued: count(r.queued), lagMs: typeof r.lagMs === 'number' ? count(r.lagMs) : null, ...(err ? { lastError: err } : {}) });
  }
  const serving = Object.entries(obj(obj(f.snatTakeover)?.serving) ?? {}).slice(0, 64)
    .filter(([, owner]) => typeof owner === 'string').map(([address, owner]) => ({ address: address.slice(0, 45), owner: (owner as string).slice(0, 63) }));
  const handback: HandbackLine[] = [];
  for (const [address, raw] of Object.entries(obj(obj(f.snatTakeover)?.handback) ?? {}).slice(0, 64)) {
    const h = obj(raw);
    const owner = text(h?.owner, 63);
    if (!h || !owner) continue;
    const waitingFor = Array.isArray(h.waitingFor) ? WAITS.filter((w) => (h.waitingFor as unknown[]).includes(w)) : [];
    handback.push({ address: address.slice(0, 45), owner, since: text(h.since, 40) ?? '?', waitingFor, limitSeconds: Math.min(count(h.limitSeconds), 1e6),
      giveBackBy: text(h.giveBackBy, 40) ?? '?' });
  }
  const d = obj(f.drain);
  const drain = d ? { packetsPerSecond: typeof d.packetsPerSecond === 'number' && d.packetsPerSecond >= 0 ? Math.min(d.packetsPerSecond, 1e12) : 0,
    activeTranslations: count(d.activeTranslations), activeConnections: count(d.activeConnections), lastPacketAt: text(d.lastPacketAt, 40) ?? null, since: text(d.since, 40) ?? '?', canStop: d.canStop === true } : undefined;
  return { sync, serving, handback, ...(drain ? { drain } : {}) };
}

const lag = (ms: number | null) => (ms === null ? '-' : ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`);

const WAIT_TEXT: Record<HandBackWait, string> = {
  'sync-spoke': 'its sync to speak since it answered again',
  'own-translations': 'the copies of its own translations it asked for to reach it',
};

/** The line of an address held for its returned owner: whose, since when, waiting for what, given back when at the latest. */
export function handbackLine(node: string, h: HandbackLine): string {
  const waiting = h.waitingFor.length ? h.waitingFor.map((w) => WAIT_TEXT[w]).join(' and ') : 'its own translations';
  return `${node}: holds ${h.owner}'s SNAT address ${h.address} for ${h.owner}, which answers again since ${h.since}: waiting for ${waiting}; ` +
    `given back by ${h.giveBackBy} at the latest (--snat-handback-limit ${h.limitSeconds})`;
}

/** The drained node's line: still carrying traffic, or stoppable. */
export function drainLine(node: string, d: NonNullable<NodeFlowsVerdict['drain']>): string {
  return d.canStop
    ? `${node}: drained since ${d.since}; carries no more traffic (no VIP packet${d.lastPacketAt ? ` since ${d.lastPacketAt}` : ''}, no active connection or SNAT translation): it can be stopped`
    : `${node}: drained since ${d.since}; still carries traffic: ${d.packetsPerSecond} VIP packets/s, ${d.activeConnections} connection(s) seen in the last 30 s, ${d.activeTranslations} active SNAT translation(s); do not stop it yet`;
}

/** The "Flow sync" table and the drain / takeover lines below the status table; empty when no node reports them. */
export function formatFlowsSection(nodes: { node: string; flows?: NodeFlowsVerdict }[]): string {
  const rows: string[][] = [];
  const lines: string[] = [];
  for (const n of nodes) {
    if (!n.flows) continue;
    for (const p of n.flows.sync) {
      rows.push([n.node, p.peer, p.inSync ? 'yes' : 'no', String(p.sent), String(p.received), String(p.applied), String(p.refused), String(p.dropped),
        String(p.queued), lag(p.lagMs), p.lastError ?? '']);
    }
    const held = new Map(n.flows.handback.map((h) => [h.address, h]));
    for (const s of n.flows.serving) if (!held.has(s.address)) lines.push(`${n.node}: serves ${s.owner}'s SNAT address ${s.address} (${s.owner} lost)`);
    for (const h of n.flows.handback) lines.push(handbackLine(n.node, h));
    if (n.flows.drain) lines.push(drainLine(n.node, n.flows.drain));
  }
  const out: string[] = [];
  if (rows.length) out.push('Flow sync:\n' + formatTable(['NODE', 'PEER', 'IN SYNC', 'SENT', 'RECEIVED', 'APPLIED', 'REFUSED', 'DROPPED', 'QUEUED', 'LAG', 'ERROR'],
    rows.map((r) => r.map(escapeControl))));
  for (const l of lines) out.push(escapeControl(l) + '\n');
  return out.join('');
}
