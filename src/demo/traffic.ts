// Sends bounded traffic from the lab's client namespace (traffic-client.ts runs there) and summarises it:
// how many requests each backend got, and failures.
import { fileURLToPath } from 'node:url';
import { exec, nsArgv } from '../lab/netns.js';
import { nodeModuleArgv } from '../lab/compiled.js';
import type { TrafficJob, TrafficResult, FlowRecord, BurstResult, FlowsResult, UdpResult } from './traffic-client.js';

export type { TrafficJob, TrafficResult, FlowRecord, FlowsResult, FlowResult } from './traffic-client.js';

/** argv running the client script the way this module runs: compiled .js, or from source its compiled twin when
 * dist/ is up to date, else .ts through tsx (src/lab/compiled.ts). */
function clientArgv(job: TrafficJob): string[] {
  const ext = fileURLToPath(import.meta.url).endsWith('.ts') ? '.ts' : '.js';
  return [...nodeModuleArgv(fileURLToPath(new URL(`./traffic-client${ext}`, import.meta.url))), JSON.stringify(job)];
}

/** Runs one traffic job inside namespace `ns` and returns its result. */
export async function runTraffic<J extends TrafficJob>(
  ns: string,
  job: J,
): Promise<J extends { kind: 'burst' } ? BurstResult : J extends { kind: 'flows' } ? FlowsResult : UdpResult> {
  const r = await exec(nsArgv(ns, clientArgv(job)), { timeoutMs: 130_000 });
  if (r.code !== 0) throw new Error(`traffic client failed (exit ${r.code}): ${r.stderr.trim().slice(-400)}`);
  return JSON.parse(r.stdout) as never;
}

export interface Tally {
  total: number;
  failed: number;
  byBackend: Record<string, number>;
  errors: Record<string, number>;
}

export function tally(records: FlowRecord[]): Tally {
  const t: Tally = { total: records.length, failed: 0, byBackend: {}, errors: {} };
  for (const r of records) {
    if (r.backend) t.byBackend[r.backend] = (t.byBackend[r.backend] ?? 0) + 1;
    else {
      t.failed++;
      const e = r.error ?? 'no reply';
      t.errors[e] = (t.errors[e] ?? 0) + 1;
    }
  }
  return t;
}

/** Lines like `  be-1  ########################  41%  (123)` for a newcomer to read at a glance. */
export function formatSpread(t: Tally, expected?: Record<string, number>, width = 40): string[] {
  const names = [...new Set([...Object.keys(t.byBackend), ...Object.keys(expected ?? {})])].sort();
  const ok = t.total - t.failed;
  const lines = names.map((name) => {
    const n = t.byBackend[name] ?? 0;
    const share = ok ? n / ok : 0;
    const bar = '#'.repeat(Math.round(share * width)).padEnd(width);
    const exp = expected?.[name] !== undefined ? `   (weight share ${pct(expected[name]!)})` : '';
    return `  ${name.padEnd(6)} ${bar} ${pct(share).padStart(4)}  ${String(n).padStart(4)} requests${exp}`;
  });
  if (t.failed) lines.push(`  failed: ${t.failed} (${Object.entries(t.errors).map(([e, n]) => `${e} x${n}`).join(', ')})`);
  return lines;
}

export function pct(x: number): string {
  return `${Math.round(x * 100)}%`;
}
