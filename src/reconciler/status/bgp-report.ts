// `gitlb status`, BGP part: per lb node and VIP, announced or withdrawn with the reason, and BIRD's last error,
// read from the status files' `bgp` mapping (docs/bgp.md). Status files are input: malformed entries are skipped
// and texts are capped.
import type { NodeStatus } from './status-doc.js';
import { escapeControl } from '../../render/escape.js';
import { formatTable } from '../format/text-table.js';

export interface NodeBgpVerdict {
  vips: { vip: string; state: string }[];
  birdError?: string;
}

export function bgpOfStatus(s: NodeStatus): NodeBgpVerdict | undefined {
  const b = s.bgp;
  if (!b || typeof b !== 'object') return undefined;
  const vips = (Array.isArray(b.vips) ? b.vips.slice(0, 4096) : [])
    .filter((v) => typeof v?.vip === 'string' && typeof v.state === 'string')
    .map((v) => ({ vip: v.vip.slice(0, 45), state: v.state.slice(0, 60) }));
  const err = typeof b.bird?.error === 'string' ? b.bird.error.replace(/\s+/g, ' ').slice(0, 200) : undefined;
  return { vips, ...(err ? { birdError: err } : {}) };
}

/** The "BGP announcements" table below the status table; empty when no node reports BGP. */
export function formatBgpSection(nodes: { node: string; bgp?: NodeBgpVerdict }[]): string {
  const rows: string[][] = [];
  for (const n of nodes) {
    for (const v of n.bgp?.vips ?? []) rows.push([n.node, v.vip, v.state]);
    if (n.bgp?.birdError) rows.push([n.node, '(BIRD)', `error: ${n.bgp.birdError}`]);
  }
  return rows.length === 0 ? '' : 'BGP announcements:\n' + formatTable(['NODE', 'VIP', 'BGP'], rows.map((r) => r.map(escapeControl)));
}
