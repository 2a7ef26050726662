// `gitlb demo`: builds the lab, tells the story chapter by chapter, and always tears the lab down again —
// on success, on failure and on Ctrl-C / SIGTERM.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { labDown, labUp, labNs, readLabState, startDaemons, type LabState } from '../lab/lab.js';
import { isAlive } from '../lab/processes.js';
import { sleep } from '../lab/netns.js';
import { createNarrator, type Narrator } from './narrator.js';
import { Shell } from './shell.js';
import { labView } from './lab-view.js';
import { cpSync } from 'node:fs';
import {
  chapterAddBackend,
  chapterConfig,
  chapterDigests,
  chapterHealth,
  chapterRevert,
  chapterSpread,
  chapterStatusLog,
  type DemoContext,
} from './chapters.js';
import { chapterDrain } from './chapter-drain.js';
import { chapterMetrics } from './chapter-metrics.js';

export const DEFAULT_DEMO_STATE_DIR = '/run/gitlb-demo';

export interface DemoOptions {
  stateDir?: string;
  configDir?: string;
  /** HTTP requests per spread measurement. */
  requests?: number;
  write?: (s: string) => void;
  /**
   * XDP attach mode of the lb daemons. Default auto: native, which each daemon checks really transmits on the lab's
   * veth links (the switch ports run an XDP_PASS program), else generic (docs/datapath.md, "Native XDP").
   */
  xdpMode?: 'native' | 'generic' | 'auto';
}

export async function runDemo(o: DemoOptions = {}): Promise<number> {
  const write = o.write ?? ((s: string) => void process.stdout.write(s));
  const started = Date.now();
  const n = createNarrator(write, started);
  const stateDir = o.stateDir ?? DEFAULT_DEMO_STATE_DIR;
  const scratch = mkdtempSync(join(tmpdir(), 'gitlb-demo-'));
  let tornDown: Promise<void> | null = null;
  const teardown = (): Promise<void> =>
    (tornDown ??= (async () => {
      n.chapter('Tear down');
      if (failures.length) keepLogs();
      const r = await labDown(stateDir).catch((e: Error) => (write(`   teardown error: ${e.message}\n`), null));
      // Interrupted during `lab up`, the build may have recorded more after the first pass: remove that too.
      await sleep(300);
      if (readLabState(stateDir)) await labDown(stateDir).catch(() => {});
      rmSync(scratch, { recursive: true, force: true });
      if (r) n.ok(`lab removed: ${r.stopped} processes stopped, ${r.namespaces.length} namespaces deleted`);
    })());
  // Set while `lab up` runs: an interrupted build must finish (or fail and clean up after itself) before the
  // teardown, or processes it starts afterwards would outlive the demo. labUp's own steps are time-bounded.
  let building: Promise<unknown> | null = null;
  let interrupted = false;
  const onSignal = (sig: NodeJS.Signals) => {
    interrupted = true;
    write(`\n   ${sig}: stopping the demo and removing the lab ...\n`);
    void (async () => {
      if (building) await Promise.race([building.catch(() => {}), sleep(90_000)]);
      await teardown();
    })().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  const failures: string[] = [];
  const keepLogs = () => {
    const dest = join(tmpdir(), `gitlb-demo-logs-${started}`);
    try {
      cpSync(join(stateDir, 'logs'), dest, { recursive: true });
      write(`   the lab's logs (daemons, servers) are kept in ${dest}\n`);
    } catch {
      /* no logs yet */
    }
  };
  try {
    intro(n);
    n.chapter('Build the lab');
    n.say('Network namespaces: clients, a router with an ECMP route to the VIPs over lb-1 and lb-2, three backends\n' +
      'running an HTTP server that names itself, and a Git server with a copy of sample-config-repo/.\n' +
      'A `gitlb run` daemon starts on every lb and backend node. (Same as `gitlb lab up`.)');
    const xdpMode = o.xdpMode ?? 'auto';
    // The daemons are started here rather than by labUp, to pass the XDP mode (see DemoOptions.xdpMode).
    // The whole build (lab up, then the daemons) is one promise, so an interrupt can wait for it to settle.
    const build = (async () => {
      const built = await labUp({
        stateDir,
        ...(o.configDir ? { configDir: o.configDir } : {}),
        daemons: false,
        vipsOnLo: false, // the backend daemons put the VIPs on lo themselves
        log: (line) => n.say(`  lab: ${line}`),
      });
      if (interrupted) throw new Error('interrupted');
      n.say(`  starting \`gitlb run ... --xdp-mode ${xdpMode}\` on every lb and backend node`);
      await startDaemons(built, { extraArgs: ['--xdp-mode', xdpMode], log: (line) => n.say(`  lab: ${line}`) });
      return built;
    })();
    building = build;
    const state = await build;
    building = null;
    const notRunning = state.daemons.filter((d) => !d.started);
    if (notRunning.length) throw new Error(`daemons not running: ${notRunning.map((d) => `${d.node}: ${d.reason}`).join('; ')}`);
    const view = labView(state);
    const bare = state.git!.bare;
    const clone = join(scratch, 'config');
    const ctx: DemoContext = {
      n,
      view,
      operator: new Shell(n, { ns: view.routerNs, prompt: 'operator', cwd: scratch }),
      host: new Shell(n, { ns: null, prompt: 'host', cwd: scratch }),
      clone,
      bare,
      stateDir: state.stateDir,
      repoUrl: state.git!.repoUrl,
      requests: o.requests ?? 200,
      failures,
    };
    await chapterConfig(ctx);
    await chapterDigests(ctx);
    await chapterSpread(ctx);
    await chapterMetrics(ctx);
    await chapterAddBackend(ctx);
    await chapterStatusLog(ctx);
    await chapterRevert(ctx);
    await chapterHealth(ctx, (node) => stopBackendServer(ctx, state, node));
    await chapterDrain(ctx);
  } catch (err) {
    failures.push((err as Error).message);
    n.warn(`demo stopped: ${(err as Error).message}`);
  } finally {
    await teardown();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  const secs = ((Date.now() - started) / 1000).toFixed(0);
  if (failures.length) {
    write(`\nDemo finished in ${secs} s with ${failures.length} problem(s):\n${failures.map((f) => `  - ${f}`).join('\n')}\n`);
    return 1;
  }
  write(`\nDemo finished in ${secs} s: every check passed.\n`);
  return 0;
}

function intro(n: Narrator): void {
  n.say('gitlb is a layer-4 load balancer: an XDP program on each lb node forwards packets to backends, and a\n' +
    'daemon on each node keeps that program\'s maps equal to a Git repository. Change the repository, and the\n' +
    'traffic follows. Lines starting with `operator$` (run in the lab\'s router namespace, which reaches the lab Git server) or\n' +
    '`host$` are real commands, run as shown (`gitlb` is this checkout\'s bin/gitlb; `make install` puts it on the PATH).');
}

/** Stops the lab's server process of `node` with a plain `kill`, as an operator would; returns its pid. */
async function stopBackendServer(ctx: DemoContext, state: LabState, node: string): Promise<number | null> {
  const current = readLabState(state.stateDir) ?? state;
  const p = current.processes.find((x) => x.role === 'backend-server' && x.node === node && isAlive(x));
  if (!p) return null;
  await ctx.host.run(['kill', String(p.pid)], { show: 0 });
  ctx.n.say(`(pid ${p.pid} was the HTTP/UDP server in namespace ${labNs(state, node)})`);
  return p.pid;
}
