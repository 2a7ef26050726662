// One measured process of bench/scale (see bench.ts): plain JavaScript over ROOT/dist/, as the daemon runs, so its
// memory is the daemon's (no TypeScript loader). Prints one JSON line: figures per stage, peak RSS, what it holds.
// node --expose-gc child.mjs first|restart ROOT PIN_ROOT REVISIONS.json
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [mode, root, pin, revisionsFile] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(join(root, 'dist', p)).href);
const { parseConfig } = await load('render/config/index.js');
const { renderDesiredState } = await load('render/desired.js');
const { openLbDataPlane } = await load('bpf/dataplane/index.js');
const { Converger } = await load('reconciler/converge.js');
const { files, next } = JSON.parse(readFileSync(revisionsFile, 'utf8'));

const figures = {};
let mark;
const restart = () => { mark = { wall: performance.now(), cpu: process.cpuUsage() }; };
const stop = (stage, note) => {
  const cpu = process.cpuUsage(mark.cpu);
  figures[stage] = { wallMs: performance.now() - mark.wall, cpuMs: (cpu.user + cpu.system) / 1000, rssMiB: process.memoryUsage.rss() / 2 ** 20,
    ...(note && { note }) };
  restart();
};
const enc = new TextEncoder();
const validate = (revision) => {
  const r = parseConfig(Object.entries(revision).map(([path, t]) => ({ path, content: enc.encode(t) })));
  if (!r.model) throw new Error(r.diagnostics.slice(0, 3).map((d) => d.message).join('; '));
  return r.model;
};
const conv = new Converger();
/** converge (the daemon's path: read live, plan, validate, execute, read back) with its stages timed. */
const converge = async (dp, desired, prefix) => {
  let planned = 0;
  restart();
  const done = await conv.converge(dp, desired, {
    onPlanned: (ops) => { planned = ops.length; },
    onStage: (s) => stop(`${prefix} ${s}`, s === 'apply' ? `${planned} ops` : undefined),
  });
  if (done.left.length) throw new Error(`not converged: ${done.left.length} ops left`);
};
/** validate, render and converge one revision, timed under `prefix`. */
const revision = async (dp, revisionFiles, prefix) => {
  restart();
  const model = validate(revisionFiles);
  stop(`${prefix} validate`);
  const desired = renderDesiredState(model, 'lb-1');
  stop(`${prefix} render`);
  await converge(dp, desired, prefix);
};

const dp = await openLbDataPlane({ pinRoot: pin });
try {
  if (mode === 'first') {
    await revision(dp, files, 'cold');
    await revision(dp, files, 'warm, same revision:');
    await revision(dp, next, 'warm, one service changed:');
  } else {
    await revision(dp, next, 'restart'); // the revision the first process left applied: nothing to write
  }
} finally {
  dp.close();
}
globalThis.gc?.();
const mem = process.memoryUsage();
process.stdout.write(`${JSON.stringify({ figures, peakRssMiB: process.resourceUsage().maxRSS / 1024, rssMiB: mem.rss / 2 ** 20, heapMiB: mem.heapUsed / 2 ** 20 })}\n`);
