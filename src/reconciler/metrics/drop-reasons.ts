// The lb data plane's drops by reason, as `gitlb_drops_total{reason}` and `gitlb top` name them: every `drop_*`
// kernel counter without its prefix, and the SNAT drops under their own names. One list for both, so the metric's
// label values and top's rows never differ. Pure.
import type { LbStats } from '../../bpf/dataplane/pinned-stats.js';

const DROP_PREFIX = 'drop_';
/** SNAT counters that are drops, with the reason they get beside the lb drops. */
export const SNAT_DROPS: Record<string, string> = {
  snat_drop_ports_exhausted: 'snat_ports_exhausted',
  snat_drop_table_full: 'snat_table_full',
  snat_drop_family: 'snat_family',
};

/** reason -> packets dropped since the counters exist (every reason, zeros included), in counter order. */
export function dropsByReason(s: Pick<LbStats, 'counters' | 'snat'>): Map<string, number> {
  const out = new Map<string, number>();
  for (const [name, v] of Object.entries(s.counters)) if (name.startsWith(DROP_PREFIX)) out.set(name.slice(DROP_PREFIX.length), v);
  for (const [name, reason] of Object.entries(SNAT_DROPS)) out.set(reason, s.snat.counters[name] ?? 0);
  return out;
}
