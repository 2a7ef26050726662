// Text for `gitlb status`: counts of every checked real, then one line per listed real that is not up with its
// state, since when, and the last check result. Pure.
import type { HealthStatus } from './status.js';
import { formatTable } from '../format/text-table.js';

export function formatHealthStatus(node: string, h: HealthStatus, now: number): string {
  const rows: string[][] = [];
  for (const service of Object.keys(h.services).sort()) {
    const reals = h.services[service]!.reals;
    for (const address of Object.keys(reals).sort()) {
      const r = reals[address]!;
      const last = r.lastCheck
        ? `${r.lastCheck.ok ? 'ok' : 'FAIL'} ${r.lastCheck.detail} (${r.lastCheck.durationMs} ms, ${ago(now, r.lastCheck.at)} ago)`
        : 'not checked yet';
      rows.push([service, address, r.state, `${r.since} (${ago(now, r.since)} ago)`, last]);
    }
  }
  const counts = Object.values(h.services).reduce((a, s) => ({ total: a.total + s.counts.total, up: a.up + s.counts.up, down: a.down + s.counts.down, unknown: a.unknown + s.counts.unknown }),
    { total: 0, up: 0, down: 0, unknown: 0 });
  const lines = [`health on ${node} (mode ${h.mode}, published ${h.publishedAt})`];
  const services = Object.keys(h.services).length;
  if (services === 0) lines.push('(no health checks configured)');
  else {
    // The document lists only reals that are not up (status.ts); the counts cover every checked real.
    lines.push(`${counts.total} reals checked in ${services} services: ${counts.up} up, ${counts.down} down, ${counts.unknown} unknown`);
    if (rows.length) lines.push(formatTable(['SERVICE', 'REAL', 'STATE', 'SINCE', 'LAST CHECK'], rows).slice(0, -1)); // drop the final newline: lines are joined below
    if (h.omittedReals > 0) lines.push(`... and ${h.omittedReals} more reals not up, not listed (the status caps the list)`);
  }
  for (const s of h.failOpen) lines.push(`WARNING: ${s}: every active real is down; failing OPEN (all kept in the table)`);
  for (const s of h.failClosed) lines.push(`WARNING: ${s}: every active real is down; failing CLOSED (new flows dropped)`);
  return lines.join('\n') + '\n';
}

function ago(now: number, iso: string): string {
  const ms = Math.max(0, now - Date.parse(iso));
  if (Number.isNaN(ms)) return '?';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  const h = Math.floor(m / 60);
  return h < 48 ? `${h}h${String(m % 60).padStart(2, '0')}m` : `${Math.floor(h / 24)}d`;
}
