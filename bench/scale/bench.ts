// See ./run. validate, render, plan/apply and readLive at 1,000 services x 100 reals on one lb node, and the
// memory of the process holding them (what the daemon holds). Cold = first revision; warm = the next revision
// changing one service (what a running daemon does per commit). Prints figures; the machine is shared, so
// quote them with the load average printed beside them.
import { loadavg } from 'node:os';
import { rmSync } from 'node:fs';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { parseConfig, type ConfigFile } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { SCALE, scaleFile, scaleFileOf, scaleFiles } from './config.js';
import { applyTo, planOf } from '../../test/lib/converge.js';

const PIN = `/sys/fs/bpf/gitlb-bench-scale-${process.pid}`;
const enc = new TextEncoder();
const asFiles = (f: Record<string, string>): ConfigFile[] => Object.entries(f).map(([path, t]) => ({ path, content: enc.encode(t) }));
const ms = (t0: number) => `${(performance.now() - t0).toFixed(0)} ms`;
const mib = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MiB`;

async function timed<T>(label: string, f: () => T | Promise<T>): Promise<T> {
  const t0 = performance.now();
  const out = await f();
  console.log(`  ${label.padEnd(44)} ${ms(t0)}`);
  return out;
}

const files = scaleFiles();
console.log(`scale: ${SCALE.services} services x ${SCALE.reals} reals, table size ${SCALE.tableSize}, one lb node ` +
  `(load average ${loadavg().map((x) => x.toFixed(1)).join(' ')} on this shared machine)`);
const dp = await openLbDataPlane({ pinRoot: PIN });
try {
  const cold = await timed('validate (cold: every file parsed)', () => parseConfig(asFiles(files)));
  if (!cold.model) throw new Error(cold.diagnostics.slice(0, 3).map((d) => d.message).join('; '));
  const desired = await timed('render (cold: every Maglev table built)', () => renderDesiredState(cold.model!, 'lb-1'));
  const ops = await timed('plan against empty maps', () => planOf(dp, desired));
  const first = await timed(`apply (cold: ${ops.length} ops)`, () => dp.execute(ops, { desired }));
  console.log(`    ${first.ringSwitches} rings created and switched, ${first.changedRingEntries} ring entries, ${first.mapWrites} map writes`);
  await timed('readLive (rings known by map id)', () => dp.readLive());
  await timed('readLive verify (every ring read back)', () => dp.readLive({ verify: true }));
  await timed('plan, nothing changed (read-back / drift check)', () => planOf(dp, desired));

  // one service's weights change: the next commit
  const i = 342;
  files[scaleFileOf(i)] = scaleFile(Math.floor(i / 100), SCALE, new Map([[i, (r: number) => (r === 7 ? 40 : 100)]]));
  const warm = await timed('validate (warm: one file changed)', () => parseConfig(asFiles(files)));
  const next = await timed('render (warm: one table rebuilt)', () => renderDesiredState(warm.model!, 'lb-1'));
  const change = await timed('plan + apply of that change', () => applyTo(dp, next));
  console.log(`    ${change.ops} ops: ${change.ringSwitches} ring switch, ${change.changedRingEntries} ring entries`);

  (globalThis as { gc?: () => void }).gc?.();
  const mem = process.memoryUsage();
  const ringKernel = SCALE.services * (SCALE.tableSize + 1) * 8; // array maps keep 8 bytes per u32 slot
  console.log(`memory of this process (holding the model, the desired state and the data plane): rss ${mib(mem.rss)}, ` +
    `heap used ${mib(mem.heapUsed)}, external ${mib(mem.external + mem.arrayBuffers)}`);
  console.log(`kernel memory of the rings (outside the daemon): about ${mib(ringKernel)} (${SCALE.services} arrays of ${SCALE.tableSize + 1} slots x 8 bytes)`);
} finally {
  dp.close();
  rmSync(PIN, { recursive: true, force: true });
}
