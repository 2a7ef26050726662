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
