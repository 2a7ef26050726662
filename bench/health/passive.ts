// Death -> zero new flows with the default check timings (interval 2 s, timeout 1 s, rise 2, fall 3), passive
// signals on (the default) beside active checks alone (--no-passive-health), in the same run: an lb node running
// `gitlb run` (real XDP data plane, L2 DSR, http checks through the VIP path) in front of three backends, a client
// opening a new connection every `gap` ms (the issue's operator probe: 20/s = 50 ms), be-2 dies 400 ms in by
// kill (SIGKILL of its server), close (its port answers resets: nftables reject) or blackhole (every packet to its
// port dropped: a silent host). Rounds interleave the cases and modes so the machine's load hits them alike.
// Modes: passive signals with a TCP-only service; passive signals with the service serving UDP too (a mixed service:
// the client also sends a one-packet UDP flow every gap ms, so be-2 is a real that serves TCP and UDP); active
// the same TCP+UDP service dispatched by SNAT (the sample config's dns); active checks alone on the TCP+UDP service
// in DSR (what such a real got before the per-real TCP counters).
// Prints per case and mode the median of `rounds` (min-max), failed new connections, and which probe took it down.
// Usage: bench/health/run passive [rounds=5] [gapMs=50]   (root; its own lab namespaces)
import { partitionScenario, DEFAULT_HEALTH, type PartitionResult } from '../../test/partition-scenario.js';

const rounds = Number(process.argv[2] ?? 5);
const gapMs = Number(process.argv[3] ?? 50);
const deaths = ['kill', 'close', 'blackhole'] as const;
const modes = [
  { name: 'passive (TCP real)', passive: true, udp: false },
  { name: 'passive (TCP+UDP real)', passive: true, udp: true },
  { name: 'passive (TCP+UDP, SNAT)', passive: true, udp: true, mode: 'snat' },
  { name: 'active only (TCP+UDP)', passive: false, udp: true },
] as const;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

const results = new Map<string, PartitionResult[]>();
for (let i = 0; i < rounds; i++) {
  for (const death of deaths) {
    for (const m of modes) {
      const r = await partitionScenario({ partitioned: false, checks: 'defaults', passive: m.passive, udp: m.udp, mode: 'mode' in m ? m.mode : 'dsr', death, gapMs });
      console.error(`round ${i + 1} ${death.padEnd(9)} ${m.name.padEnd(26)}: death -> zero new flows ${r.deathToZeroMs} ms, ` +
        `failed ${r.failedFlows}, suspect ${r.suspectMs ?? '-'} ms, down ${r.downMs ?? '-'} ms by ${r.downDetail ?? '-'}`);
      const key = `${death}|${m.name}`;
      results.set(key, [...(results.get(key) ?? []), r]);
    }
  }
}

console.log(`death -> zero new flows, default checks (interval ${DEFAULT_HEALTH.intervalMs} ms, timeout 1000 ms, fall ${DEFAULT_HEALTH.fall}), ` +
  `a new connection every ${gapMs} ms, median of ${rounds} (min-max)`);
console.log(`${'case'.padEnd(11)}${modes.map((m) => m.name.padStart(34)).join('')}`);
for (const death of deaths) {
  const cells = modes.map((m) => {
    const rs = results.get(`${death}|${m.name}`)!;
    const ms = rs.map((r) => r.deathToZeroMs);
    return `${median(ms)} ms (${Math.min(...ms)}-${Math.max(...ms)}), ${median(rs.map((r) => r.failedFlows))} failed`.padStart(34);
  });
  console.log(`${death.padEnd(11)}${cells.join('')}`);
}
for (const death of deaths) {
  for (const m of modes) {
    const rs = results.get(`${death}|${m.name}`)!;
    const by = new Map<string, number>();
    for (const r of rs) by.set(r.downDetail ?? '(not down)', (by.get(r.downDetail ?? '(not down)') ?? 0) + 1);
    const at = (f: (r: PartitionResult) => number | undefined) => {
      const xs = rs.map(f).filter((x): x is number => x !== undefined);
      return xs.length ? `${median(xs)} ms` : '-';
    };
    console.log(`  ${death} / ${m.name}: death -> suspect ${at((r) => r.suspectMs)}, -> down ${at((r) => r.downMs)} (medians, daemon log times); ` +
      `down by ${[...by].map(([d, n]) => `${d} x${n}`).join(', ')}; suspect in ${rs.filter((r) => r.suspected).length}/${rs.length}`);
  }
}
