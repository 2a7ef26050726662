// Packets and health never wait for Git, across a restart too: in the lab, the Git server is stopped, the lb-1
// daemon (real `gitlb run`, real XDP, real health checks) gets SIGTERM and is started again with the same argv.
// From the local Git cache it adopts the revision its pinned maps serve, before any fetch: it keeps the reals'
// neighbour entries resolved (XDP drops without them), runs its health checks (log and metrics), and takes a
// backend whose server died out of new connections — all while every fetch fails. docs/reconciler.md,
// "Restart and adoption". Needs root; everything lives in the lab's own namespaces.
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { labUp, labDown, labNs, type LabState } from '../../src/lab/lab.js';
import { nsSpawn, nsExec, stopChild, pidAlive } from '../../src/lab/netns.js';
import { LineTap, logMessage } from '../health-lab.js';
import { writeConfig, startHealthClient, VIP, BE, type Flow } from '../partition-scenario.js';

const here = fileURLToPath(new URL('..', import.meta.url));

/** Waits for `child` to exit (at most `ms`); its exit code, or null when it did not exit. */
function exited(child: ChildProcess, ms: number): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), ms);
    child.once('exit', (code) => (clearTimeout(timer), resolve(code)));
  });
}

test('an lb daemon restarted while the Git server is down runs its health checks and keeps traffic through the VIP flowing', async (t) => {
  const work = mkdtempSync(join(tmpdir(), `gitlb-restart-offline-${process.pid}-`));
  const configDir = join(work, 'config');
  writeConfig(configDir);
  let state: LabState | undefined;
  const daemons: ChildProcess[] = [];
  let client: ChildProcess | undefined;
  let pinRoot = '';
  try {
    state = await labUp({ configDir, stateDir: join(work, 'lab'), daemons: false, vipsOnLo: true, clientCount: 1 });
    pinRoot = `/sys/fs/bpf/gitlb-test-${state.prefix}restart`;
    const lbNs = labNs(state, 'lb-1');
    const argv = [process.execPath, '--import', 'tsx', join(here, '..', 'src', 'cli', 'main.ts'), 'run', '--repo', state.git!.repoUrl, '--node', 'lb-1',
      '--interface', 'eth0', '--xdp-mode', 'generic', '--pin-root', pinRoot, '--cache-dir', join(work, 'cache'), '--poll', '1', '--git-timeout', '2',
      '--log-format', 'json'];
    const startLb = () => {
      const child = nsSpawn(lbNs, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
      daemons.push(child);
      const text: string[] = [];
      child.stderr!.on('data', (b: Buffer) => {
        text.push(b.toString());
        if (process.env.GITLB_TEST_LOG) process.stderr.write(b);
      });
      return { child, tap: new LineTap(child, 'stderr'), text };
    };

    const hc = startHealthClient(state);
    client = hc.client;
    const burst = hc.burst;
    /** Bursts until new connections reach every one of `backends` and nothing else; the last burst's flows. */
    const until = async (backends: string[], what: string): Promise<Flow[]> => {
      let flows: Flow[] = [];
      for (let i = 0; i < 40; i++) {
        flows = await burst(30, 10);
        const seen = new Set(flows.map((f) => f.result));
        if (backends.every((b) => seen.has(b)) && seen.size === backends.length) return flows;
        await new Promise((r) => setTimeout(r, 300));
      }
      throw new Error(`${what}: last burst reached ${[...new Set(flows.map((f) => f.result))].join(', ')}`);
    };

    // 1. A daemon with Git up: applied, every backend reachable through the VIP.
    const first = startLb();
    await first.tap.next((l) => /^applied [0-9a-f]{12}/.test(logMessage(l)), 90_000, 'first apply');
    await until(Object.keys(BE), 'before the restart');

    // 2. The Git server stops; the daemon gets SIGTERM and says what it leaves behind.
    const gitServer = state.processes.find((p) => p.role === 'git-server')!;
    process.kill(gitServer.pid, 'SIGTERM');
    for (let i = 0; i < 50 && pidAlive(gitServer.pid); i++) await new Promise((r) => setTimeout(r, 100));
    t.false(pidAlive(gitServer.pid), 'the Git server stopped');
    first.child.kill('SIGTERM');
    t.is(await exited(first.child, 20_000), 0, 'SIGTERM: exit 0');
    const stopLine = first.text.join('').split('\n').map(logMessage).find((m) => m.startsWith('stopping on SIGTERM'));
    t.is(stopLine, 'stopping on SIGTERM: data plane left pinned and forwarding');

    // 3. The same argv again, Git still down: the pinned revision is adopted from the cache before any fetch.
    const second = startLb();
    await second.tap.next((l) => logMessage(l).startsWith('fetch failed'), 90_000, 'a failing fetch (the Git server is down)');

    // 4. Neighbour entries of the reals are resolved again after a flush (XDP drops without them).
    const flush = await nsExec(lbNs, ['ip', 'neigh', 'flush', 'to', '198.51.100.0/24']);
    t.is(flush.code, 0, flush.stderr);
    await until(Object.keys(BE), 'after the neighbour flush');

    // 5. Health checks run: the metric is there, and a backend whose server dies is taken out of new connections.
    const metrics = await nsExec(lbNs, ['curl', '-s', 'http://127.0.0.1:9462/metrics']);
    t.regex(metrics.stdout, /gitlb_real_health_state\{[^}]*198\.51\.100\.22[^}]*\} 1/, 'health state per real is exported');
    const server = state.processes.find((p) => p.role === 'backend-server' && p.node === 'be-2')!;
    process.kill(server.pid, 'SIGKILL');
    await second.tap.next((l) => /^health: web real 198\.51\.100\.22 (up|unknown) -> down/.test(logMessage(l)), 30_000, 'be-2 checked down');
    await second.tap.next((l) => /^re-rendered [0-9a-f]{12} \((health change|[^)]* up -> down)\)/.test(logMessage(l)), 30_000, 'the health re-render');
    const after = await until(['be-1', 'be-3'], 'after be-2 died');
    t.false(after.some((f) => f.result === 'be-2' || f.result.startsWith('error')), 'new connections reach only the live backends');
    const log = second.text.join('').split('\n').map(logMessage);
    t.true(log.some((m) => /^adopted [0-9a-f]{12} from the local Git cache before fetching: 1 services, 3 reals/.test(m)), 'the adoption is logged');
    t.false(log.some((m) => m.startsWith('cannot adopt')));
    t.false(log.some((m) => m.startsWith('fetch recovered')), 'Git stayed down throughout');
    t.is(second.child.exitCode, null, 'the restarted daemon is still running');
  } finally {
    client?.stdin?.end();
    await Promise.all([client && stopChild(client, 2000), ...daemons.map((d) => stopChild(d, 5000))]);
    if (state) await labDown(state.stateDir);
    rmSync(work, { recursive: true, force: true });
    if (pinRoot) rmSync(pinRoot, { recursive: true, force: true });
  }
});
