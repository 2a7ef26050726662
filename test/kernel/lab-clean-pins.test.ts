// `gitlb lab clean` removes the bpffs pins of dead runs (src/lab/stale-pins.ts): real pins (a map pinned in a pin
// root, a map pinned on its own) under /sys/fs/bpf named after a pid that has exited, in each of the three forms, go;
// the same forms named after a living process, and names that carry no pid, stay.
import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { BPFFS_ROOT, cleanStalePins } from '../../src/lab/stale-pins.js';
import { pidAlive } from '../../src/lab/netns.js';

const ROOT = join(import.meta.dirname, '..', '..');

/** A real pin: a small array map pinned at `path` (its fd closed, so only the pin keeps it). */
function pinMap(path: string): void {
  const m = BpfMap.create({ name: 'stalepin', type: 2 /* BPF_MAP_TYPE_ARRAY */, keySize: 4, valueSize: 4, maxEntries: 1 });
  try {
    m.pin(path);
  } finally {
    m.close();
  }
}

test('gitlb lab clean removes the pins of a dead pid in every form, keeps a living pid\'s and names without a pid', async (t) => {
  const dead = spawnSync(process.execPath, ['-e', '']).pid!;
  t.false(pidAlive(dead), 'the first process has exited');
  const living = spawn('sleep', ['120'], { stdio: 'ignore' });
  const alive = living.pid!;
  const tag = `stalepin${process.pid}`;
  const gone = [`glb${dead}-${tag}`, `gitlb-test-glb${dead}-${tag}`, `gitlb-test-${dead}-${tag}`];
  const kept = [`glb${alive}-${tag}`, `gitlb-test-glb${alive}-${tag}`, `gitlb-test-${alive}-${tag}`,
    `gitlb-test-${tag}-nopid`, `glb-${dead}-${tag}`, `x-glb${dead}-${tag}`];
  const all = [...gone, ...kept];
  const stateDir = mkdtempSync(join(tmpdir(), `${tag}-lab-`));
  try {
    for (const [i, name] of all.entries()) {
      // pin roots (a directory holding a pinned map) and a map pinned on its own
      if (i % 3 === 1) pinMap(join(BPFFS_ROOT, name));
      else pinMap(join(BPFFS_ROOT, name, 'lb_map'));
      t.true(existsSync(join(BPFFS_ROOT, name)), name);
    }
    t.deepEqual(cleanStalePins({ dryRun: true }).filter((n) => n.includes(tag)), [...gone].sort(), 'dry run names exactly the dead pid\'s');
    t.true(all.every((n) => existsSync(join(BPFFS_ROOT, n))), 'a dry run removes nothing');
    t.false(cleanStalePins({ dryRun: true }).includes('gitlb'), 'the daemons\' root is never a candidate');

    const r = spawnSync(join(ROOT, 'bin/gitlb'), ['lab', 'clean', '--state-dir', stateDir], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
    t.is(r.status, 0, r.stderr);
    for (const n of gone) {
      t.false(existsSync(join(BPFFS_ROOT, n)), `${n} removed`);
      t.true(r.stdout.includes(n), `${n} reported`);
    }
    for (const n of kept) t.true(existsSync(join(BPFFS_ROOT, n)), `${n} kept`);
  } finally {
    living.kill('SIGKILL');
    for (const n of all) rmSync(join(BPFFS_ROOT, n), { recursive: true, force: true });
    rmSync(stateDir, { recursive: true, force: true });
  }
});
