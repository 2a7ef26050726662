// Death to zero new flows, connected vs partitioned: an lb node running `gitlb run` (real XDP data plane, lab Git
// server over HTTP), a backend killed while new connections arrive every 5 ms. For each round the node is either
// connected to the Git server or cut off from it by an nftables drop rule (fetches hang until --git-timeout).
// Prints medians side by side. Usage: bench/health/run partition [rounds]   (root; its own lab namespaces)
import { partitionScenario, HEALTH, type PartitionResult } from '../../test/partition-scenario.js';

const rounds = Number(process.argv[2] ?? 2);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

const results: PartitionResult[] = [];
for (let i = 0; i < rounds; i++) {
  for (const partitioned of [false, true]) {
    const r = await partitionScenario({ partitioned });
    console.error(`round ${i + 1} ${partitioned ? 'partitioned' : 'connected  '}: death->zero new flows ${r.deathToZeroMs} ms, ` +
      `failed flows ${r.failedFlows}, back->first flow ${r.reviveToFlowMs} ms, fetch failures ${r.fetchFailures}`);
    results.push(r);
  }
}
const col = (partitioned: boolean, f: (r: PartitionResult) => number) => median(results.filter((r) => r.partitioned === partitioned).map(f));
console.log(`health: interval ${HEALTH.intervalMs} ms, fall ${HEALTH.fall}, rise ${HEALTH.rise}; new connection every 5 ms; ${rounds} rounds each, medians`);
console.log(`${''.padEnd(34)}${'connected'.padStart(12)}${'partitioned'.padStart(14)}`);
const row = (label: string, f: (r: PartitionResult) => number) => console.log(`${label.padEnd(34)}${`${col(false, f)} ms`.padStart(12)}${`${col(true, f)} ms`.padStart(14)}`);
row('backend death -> zero new flows', (r) => r.deathToZeroMs);
row('backend back -> first new flow', (r) => r.reviveToFlowMs);
console.log(`${'failed new connections'.padEnd(34)}${String(col(false, (r) => r.failedFlows)).padStart(12)}${String(col(true, (r) => r.failedFlows)).padStart(14)}`);
