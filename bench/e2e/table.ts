// bench/e2e's figures: rounds of wrk samples reduced to one line per target, as ratios to direct.
//
// A lab measures in rounds: direct, then every other target once, ...; and direct once more after the last round.
// So the directs d0..dR bracket the rounds, and target sample k (round k) is compared with the mean of d_k and
// d_{k+1}, measured just before and just after its round: on a shared machine whose load changes by tens of percent
// within minutes, a ratio to a direct measured long before would mostly measure that change. The line gives the
// median over the rounds and the lowest and highest ratio (how much the rounds disagreed).
import type { WrkResult } from './wrk.js';

export interface Sample {
  rps: WrkResult;
  cps: WrkResult;
}

export interface Series {
  name: string;
  /** the lab it was measured in: its ratios are to that lab's direct series */
  lab: number;
  direct: boolean;
  /** in round order; a direct series has one more (the bracket after the last round) */
  samples: Sample[];
}

export interface Figure {
  /** median over the rounds */
  value: number;
  /** median ratio to direct, and the lowest and highest; null without a direct to compare with */
  ratio: number | null;
  low: number | null;
  high: number | null;
}

export interface Line {
  name: string;
  rps: Figure;
  cps: Figure;
  errors: number;
  /** median of wrk's keep-alive average latency, ms */
  latencyMs: number;
}

export function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** wrk's latency ("850.00us", "1.61ms", "1.02s") in ms; NaN when unreadable. */
export function latencyMs(s: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(s);
  if (!m) return NaN;
  const scale = { us: 0.001, ms: 1, s: 1000, m: 60_000 }[m[2] as 'us' | 'ms' | 's' | 'm'];
  return Number(m[1]) * scale;
}

function figure(values: number[], ratios: number[]): Figure {
  return {
    value: median(values),
    ratio: ratios.length ? median(ratios) : null,
    low: ratios.length ? Math.min(...ratios) : null,
    high: ratios.length ? Math.max(...ratios) : null,
  };
}

/** One line per series. A direct line's ratios are each direct sample to the median of them: the drift. */
export function summarize(series: Series[]): Line[] {
  return series.map((s) => {
    const d = series.find((x) => x.direct && x.lab === s.lab);
    const per = (pick: (x: Sample) => number) => {
      const values = s.samples.map(pick);
      let ratios: number[] = [];
      if (s.direct) {
        const m = median(values);
        ratios = m > 0 ? values.map((v) => v / m) : [];
      } else if (d && d.samples.length) {
        ratios = s.samples.flatMap((x, k) => {
          const around = [d.samples[k], d.samples[k + 1]].filter((y): y is Sample => !!y).map(pick);
          const ref = around.length ? around.reduce((a, b) => a + b, 0) / around.length : 0;
          return ref > 0 ? [pick(x) / ref] : [];
        });
      }
      return figure(values, ratios);
    };
    return {
      name: s.name,
      rps: per((x) => x.rps.requestsPerSec),
      cps: per((x) => x.cps.requestsPerSec),
      errors: s.samples.reduce((a, x) => a + x.rps.errors + x.cps.errors, 0),
      latencyMs: median(s.samples.map((x) => latencyMs(x.rps.latencyAvg))),
    };
  });
}

/** The table's lines: header, then one line per series. */
export function formatTable(lines: Line[]): string[] {
  const n = (x: number) => x.toFixed(0).padStart(8);
  const r = (x: number | null) => (x === null ? '-' : x.toFixed(2)).padStart(7);
  const range = (f: Figure) => (f.low === null || f.high === null ? '' : `${f.low.toFixed(2)}-${f.high.toFixed(2)}`).padStart(10);
  const width = Math.max(30, ...lines.map((l) => l.name.length + 2));
  const out = [
    `${'target'.padEnd(width)}${'req/s'.padStart(8)} ${'/direct'.padStart(7)} ${'range'.padStart(10)}  ${'conn/s'.padStart(8)} ${'/direct'.padStart(7)} ${'range'.padStart(10)}  errors  latency(ka)`,
  ];
  for (const l of lines) {
    out.push(
      `${l.name.padEnd(width)}${n(l.rps.value)} ${r(l.rps.ratio)} ${range(l.rps)}  ${n(l.cps.value)} ${r(l.cps.ratio)} ${range(l.cps)}  ` +
        `${String(l.errors).padStart(6)}  ${Number.isNaN(l.latencyMs) ? '?' : `${l.latencyMs.toFixed(2)}ms`}`,
    );
  }
  return out;
}

/** The lines a gitlb mode is judged against (issue 26): its floor (the least an XDP balancer pays on that path in
 * this lab) and the kernel's own balancer for that path on the same lb node. DSR modes: the L2 floor and the
 * stateless nftables DSR rule; snat: the floor whose replies also cross the lb node, and nftables full NAT. */
const AGAINST = {
  dsr: { floor: 'xdp l2 floor', peer: 'nftables dsr on lb-1' },
  snat: { floor: 'xdp floor, replies via the lb too', peer: 'nftables full nat on lb-1' },
} as const;
const PROXY = 'haproxy tcp mode on lb-1';

/**
 * Per gitlb mode: its ratio minus its floor's (gitlb's own share of the gap to direct; 0 = at the floor, negative =
 * below it) and minus the peers' on lb-1 (>= 0: at least level). Ratios are each to their own lab's direct, so the
 * floor's (another lab) compares as a share of direct. Lines without a counterpart in this run are left out.
 */
export function comparisons(lines: Line[]): string[] {
  const find = (prefix: string, tag?: string) => lines.find((l) => l.name.startsWith(prefix) && (tag === undefined || l.name.endsWith(`[${tag}]`)));
  const diff = (a: Figure, b: Figure | undefined) => (a.ratio === null || !b || b.ratio === null ? '    -' : `${a.ratio - b.ratio >= 0 ? '+' : ''}${(a.ratio - b.ratio).toFixed(2)}`.padStart(5));
  const out: string[] = [];
  for (const l of lines) {
    const m = /^(\w+)\s+(dsr\/\w+|snat)\b.*\[(native|generic|mixed)\]$/.exec(l.name);
    if (!m) continue;
    const against = AGAINST[m[2]!.startsWith('dsr') ? 'dsr' : 'snat'];
    const floor = find(against.floor, m[3]);
    const peer = find(against.peer);
    const proxy = find(PROXY);
    const pair = (b: Line | undefined) => (b ? `${diff(l.rps, b.rps)} / ${diff(l.cps, b.cps)}` : '    - /     -');
    out.push(`${l.name.padEnd(28)} ${pair(floor).padEnd(16)}${pair(peer).padEnd(25)}${pair(proxy)}`);
  }
  if (!out.length) return [];
  return [
    'per mode, differences of ratios to direct, keep-alive / per connection:',
    `${'mode'.padEnd(28)} ${'minus its floor'.padEnd(16)}${'minus nftables on lb-1'.padEnd(25)}minus haproxy on lb-1`,
    ...out,
    '(its floor: the xdp floor of the same path and XDP mode, 0 = no cost beyond it; nftables: the stateless',
    ' DSR rule for the dsr modes, full NAT for snat; >= 0 = at least level. Rounds disagree by up to ~0.3: read signs',
    ' of large differences only.)',
  ];
}
