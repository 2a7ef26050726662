// `gitlb lab status` reports liveness from /proc, not the report `lab up` wrote when it started the daemons: a
// daemon that has died since is DEAD and the exit status is 1. Real processes (sleep) this test starts, recorded
// in a lab state file the way `lab up` records them; no namespace is made (the state lists none).
import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { formatLabStatus, labStatus, statePath } from '../../src/lab/lab.js';
import { procStartTime } from '../../src/lab/processes.js';
import { gitlbInProcess as gitlb } from '../helpers/cli-repo.js';

function started(): ChildProcess {
  return spawn('sleep', ['600'], { stdio: 'ignore' });
}

test('lab status: a daemon dead since start is reported DEAD (not "running") and the exit status is 1', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-labst-'));
  const anchor = started();
  const d1 = started();
  const d2 = started();
  try {
    await sleep(200); // /proc/<pid>/stat exists once spawn returned; the start time is read below
    const rec = (p: ChildProcess, role: string, node?: string) => ({
      pid: p.pid!, startTime: procStartTime(p.pid!)!, role, ns: role === 'anchor' ? null : `glb${process.pid}x-${node}`, ...(node ? { node } : {}), argv: ['sleep', '600'], log: join(dir, `${node ?? role}.log`),
    });
    const state = {
      version: 1, prefix: `glb${process.pid}x-`, stateDir: dir, configDir: dir, createdAt: new Date().toISOString(), complete: true,
      plan: { namespaces: [], multipath: [], router: { ns: 'router' }, bird: null },
      namespaces: [], git: null, pinRoots: [],
      processes: [rec(anchor, 'anchor'), rec(d1, 'daemon', 'lb-1'), rec(d2, 'daemon', 'lb-2')],
      daemons: [{ node: 'lb-1', started: true, pid: d1.pid, reason: 'running' }, { node: 'lb-2', started: true, pid: d2.pid, reason: 'running' }],
    };
    writeFileSync(statePath(dir), JSON.stringify(state));

    // Everything runs: UP, exit 0.
    const ok = (await labStatus(dir))!;
    t.deepEqual(ok.dead, []);
    t.deepEqual(ok.daemons.map((d) => d.alive), [true, true]);
    t.is((await gitlb(['lab', 'status', '--state-dir', dir])).code, 0);

    // lb-2's daemon dies: the anchor still runs, but the lab is not what `up` left.
    const gone = new Promise((resolve) => d2.once('exit', resolve));
    d2.kill('SIGKILL');
    await gone;
    const s = (await labStatus(dir))!;
    t.true(s.up);
    t.deepEqual(s.daemons.map((d) => [d.node, d.alive]), [['lb-1', true], ['lb-2', false]]);
    t.deepEqual(s.dead, [`daemon lb-2 (pid ${d2.pid}, log ${join(dir, 'lb-2.log')})`]);
    const text = formatLabStatus(s);
    t.regex(text, /^lab UP, 1 process\(es\) DEAD/);
    t.regex(text, new RegExp(`lb-2 +DEAD \\(pid ${d2.pid} ran at start`));
    t.regex(text, new RegExp(`lb-1 +running pid ${d1.pid}`));
    const cli = await gitlb(['lab', 'status', '--state-dir', dir]);
    t.is(cli.code, 1, cli.stdout);
    t.regex(cli.stdout, /lab UP, 1 process\(es\) DEAD/);
    t.notRegex(cli.stdout, /lb-2 +running/);
  } finally {
    for (const p of [anchor, d1, d2]) p.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});
