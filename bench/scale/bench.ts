// See ./run. Cold start at scale: 1,000 services x 100 reals on one lb node, through the same functions the daemon
// runs (parseConfig, renderDesiredState, converge) against a real LB data plane (maps pinned under
// /sys/fs/bpf/glb<pid>-scale, attached to no interface, removed at the end).
//
// Each column is measured in fresh processes, so "cold" is a new node (empty maps) or a restart (maps pinned, empty
// caches in the process):
//   cold     validate, render (every Maglev table), plan against empty maps, apply, read back;
//   warm     the same revision again in that process (what the daemon's next poll sees), then the next commit
//            (one service's weights changed: one file, one table);
//   restart  a new process over the maps the first one left: validate, render, plan (nothing to write).
// Wall and CPU milliseconds per stage (CPU is steadier on this shared machine), and the peak RSS of each process.
// BASELINE=<git revision> adds a column for that revision (a detached worktree under build/bench/ with its own BPF
// objects and dist/, this tree's addon), measured in the same run.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { SCALE, scaleFile, scaleFileOf, scaleFiles } from './config.js';

type Figures = Record<string, { wallMs: number; cpuMs: number; rssMiB: number; note?: string }>;
interface ChildReport { figures: Figures; peakRssMiB: number; rssMiB: number; heapMiB: number }

const here = resolve(import.meta.dirname, '..', '..');

/** The node flags `root`'s bin/gitlb runs with (its `#!/usr/bin/env -S node ...` line), so the measured process is
 * configured as the daemon is. */
function gitlbNodeFlags(root: string): string[] {
  const first = readFileSync(join(root, 'bin', 'gitlb'), 'utf8').split('\n', 1)[0]!;
  const m = /^#!\/usr\/bin\/env(?: -S)? node((?: --?[a-z][a-z0-9-]*(?:=\S+)?)*)\s*$/.exec(first);
  if (!m) throw new Error(`${root}/bin/gitlb: unexpected first line ${JSON.stringify(first)}`);
  return m[1]!.trim().split(/\s+/).filter(Boolean);
}

/** child.mjs in a fresh node (no tsx: the process holds what the daemon would) over `root`'s dist/. */
function runChild(mode: 'first' | 'restart', root: string, pin: string, revisions: string): ChildReport {
  const r = spawnSync(process.execPath, [...gitlbNodeFlags(root), '--expose-gc', join(here, 'bench/scale/child.mjs'), mode, root, pin, revisions],
    { cwd: here, encoding: 'utf8', maxBuffer: 16 * 2 ** 20, timeout: 600_000 });
  if (r.status !== 0) throw new Error(`${mode} child for ${root} failed (${r.status ?? r.signal}): ${r.stderr.slice(-2000)}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as ChildReport;
}

/** A detached worktree of `rev` with this tree's node_modules and addon, its own BPF objects and dist/. */
function baselineTree(rev: string): string {
  const dir = join(here, 'build/bench/scale-baseline');
  if (existsSync(dir)) execFileSync('git', ['-C', here, 'worktree', 'remove', '--force', dir]);
  mkdirSync(join(here, 'build/bench'), { recursive: true });
  execFileSync('git', ['-C', here, 'worktree', 'add', '--detach', '--quiet', dir, rev]);
  symlinkSync(join(here, 'node_modules'), join(dir, 'node_modules'));
  execFileSync('make', ['-s', 'bpf'], { cwd: dir, stdio: 'inherit' }); // the codecs of `rev` check its own objects' BTF
  mkdirSync(join(dir, 'src/bpf/napi/build'), { recursive: true });
  symlinkSync(join(here, 'src/bpf/napi/build/Release'), join(dir, 'src/bpf/napi/build/Release'), 'dir');
  execFileSync(join(here, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], { cwd: dir, stdio: 'inherit' });
  return dir;
}

async function main(): Promise<void> {
  const columns: { name: string; root: string }[] = [{ name: 'this tree', root: here }];
  const baseline = process.env.BASELINE;
  if (baseline) {
    const rev = execFileSync('git', ['-C', here, 'rev-parse', '--short', baseline], { encoding: 'utf8' }).trim();
    columns.push({ name: `BASELINE ${rev}`, root: baselineTree(rev) });
  }
  console.log(`scale: ${SCALE.services} services x ${SCALE.reals} reals, table size ${SCALE.tableSize}, one lb node, real maps ` +
    `(load average ${loadavg().map((x) => x.toFixed(1)).join(' ')} on this shared machine); node flags of bin/gitlb: ` +
    `${gitlbNodeFlags(here).join(' ') || '(none)'}`);
  // the revision and the next commit (one service's weights changed), as files for the children
  const files = scaleFiles();
  const i = 342;
  const next = { ...files, [scaleFileOf(i)]: scaleFile(Math.floor(i / 100), SCALE, new Map([[i, (r: number) => (r === 7 ? 40 : 100)]])) };
  const revisions = `/tmp/glb${process.pid}-scale.json`;
  writeFileSync(revisions, JSON.stringify({ files, next }));
  const reports: { first: ChildReport; restart: ChildReport }[] = [];
  try {
    // one column after the other: quote CPU figures, which the load changes least
    for (const [n, c] of columns.entries()) {
      const pin = `/sys/fs/bpf/glb${process.pid}-scale${n}`;
      try {
        const first = runChild('first', c.root, pin, revisions);
        const restart = runChild('restart', c.root, pin, revisions);
        reports.push({ first, restart });
      } finally {
        rmSync(pin, { recursive: true, force: true });
      }
    }
  } finally {
    rmSync(revisions, { force: true });
    if (baseline) execFileSync('git', ['-C', here, 'worktree', 'remove', '--force', join(here, 'build/bench/scale-baseline')]);
  }
  const cell = (f?: Figures[string]) =>
    f ? `${f.wallMs.toFixed(0).padStart(6)} /${f.cpuMs.toFixed(0).padStart(5)} /${f.rssMiB.toFixed(0).padStart(4)}${f.note ? ` (${f.note})` : ''}` : '';
  const width = 34;
  console.log(`${'stage (wall ms / CPU ms / RSS MiB after)'.padEnd(40)}${columns.map((c) => c.name.padEnd(width)).join('')}`);
  const stages = [...new Set(reports.flatMap((r) => [...Object.keys(r.first.figures), ...Object.keys(r.restart.figures)]))];
  for (const s of stages) console.log(`${s.padEnd(40)}${reports.map((r) => cell(r.first.figures[s] ?? r.restart.figures[s]).padEnd(width)).join('')}`);
  const mem = (r: ChildReport) => `${r.peakRssMiB.toFixed(0)} MiB`.padEnd(width);
  console.log(`${'peak RSS, first process'.padEnd(40)}${reports.map((r) => mem(r.first)).join('')}`);
  console.log(`${'peak RSS, restart process'.padEnd(40)}${reports.map((r) => mem(r.restart)).join('')}`);
  console.log(`${'RSS / heap held at the end (first)'.padEnd(40)}${reports.map((r) => `${r.first.rssMiB.toFixed(0)} / ${r.first.heapMiB.toFixed(0)} MiB`.padEnd(width)).join('')}`);
  const sum = (r: ChildReport, stages: string[]) => stages.reduce((n, s) => ({
    wall: n.wall + (r.figures[s]?.wallMs ?? 0), cpu: n.cpu + (r.figures[s]?.cpuMs ?? 0) }), { wall: 0, cpu: 0 });
  const total = (name: string, stages: string[]) => console.log(`${name.padEnd(40)}${reports.map((r) => {
    const t = sum(r.first, stages);
    return `${(t.wall / 1000).toFixed(2)} s / ${(t.cpu / 1000).toFixed(2)} s CPU`.padEnd(width);
  }).join('')}`);
  total('cold validate + render', ['cold validate', 'cold render']);
  total('cold plan + apply + read back', ['cold plan', 'cold apply', 'cold readback']);
  const ringKernel = SCALE.services * (SCALE.tableSize + 1) * 8;
  console.log(`kernel memory of the rings (outside the process): about ${(ringKernel / 2 ** 20).toFixed(0)} MiB`);
}

await main();
