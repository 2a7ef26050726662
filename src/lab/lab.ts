// `gitlb lab`: builds the lab from its plan (topology.ts), records everything it made in a state file (state.ts),
// and removes exactly that on `down`. The network is network.ts, the lab's services services.ts, the gitlb daemons
// daemons.ts, `status` status.ts; this module is the lab's API (up, down, clean, and what the others export).
//
// The lab's namespaces are named after an *anchor* process (`glb<anchorPid>-client`, ...), a detached
// process that lives exactly as long as the lab: `sleep infinity` for `gitlb lab up`, a watcher of the building
// process otherwise (tests, benches, the demo: a lab whose builder was killed is stale a second later). So
// `cleanStale()` — run by any test or by `gitlb lab clean` — treats a running lab as alive and a lab whose anchor
// died as stale, with no special case; it kills what still runs in a stale lab's namespaces before removing them.
import { existsSync, mkdirSync, rmSync, cpSync, readdirSync, rmdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { cleanStale, deleteNetns, listNetns, run } from './netns.js';
import { spawnDetached, stopLabProcess } from './processes.js';
import { GIT_REPO_NAME, labSpecFromModel, planLab, type LabRouter, type LabSpec } from './topology.js';
import { frrAvailable, removeFrrTmp } from './frr.js';
import { DEFAULT_CONFIG_DIR, DEFAULT_STATE_DIR, LAB_PIN_PARENT, labAlive, readLabState, statePath, writeLabState, type LabState } from './state.js';
import { buildNetwork } from './network.js';
import { cleanStalePins } from './stale-pins.js';
import { startBackendServers, startBirds, startGitServer } from './services.js';
import { startDaemons } from './daemons.js';

export { DEFAULT_CONFIG_DIR, DEFAULT_STATE_DIR, PROJECT_ROOT, labAlive, labNs, readLabState, statePath, type DaemonReport, type LabState } from './state.js';
export { warmNeighbours } from './network.js';
export { restartBird, routerSessions, setRouterSessions } from './services.js';
export { labPeerSecret, startDaemons, type StartDaemonsOptions } from './daemons.js';
export { bgpRoutes, formatLabStatus, labStatus, type LabStatus } from './status.js';

export interface LabUpOptions {
  /** Config directory (default: sample-config-repo/). Ignored when `spec` is given. */
  configDir?: string;
  /** A ready lab spec instead of a config directory (tests). */
  spec?: LabSpec;
  stateDir?: string;
  /** Start `gitlb run` on every lb and backend node (default true). */
  daemons?: boolean;
  /** Put each backend's VIPs on its `lo` (default: when daemons are not started; the backend daemon does it otherwise). */
  vipsOnLo?: boolean;
  clientCount?: number;
  /** 'static': static ECMP routes even when the config has BGP settings (tests that steer routes themselves).
   * Default: BGP through BIRD when the config has BGP settings (docs/bgp.md), else static. */
  routing?: 'bgp' | 'static';
  /** With BGP routing: the router's daemon, BIRD (default) or FRR (bgpd + zebra, docs/lab.md). */
  router?: LabRouter;
  /** Who answers HTTP on the backends: 'node' (default, src/lab/servers/backend.ts) or 'haproxy'
   * (src/lab/servers/backend-haproxy.ts: same replies at a fraction of the CPU; bench/e2e). UDP stays with Node. */
  backendHttp?: 'node' | 'haproxy';
  /** Further `gitlb run` arguments for every daemon (tests: e.g. --flow-sync with --peer-secret-file). */
  daemonArgs?: string[];
  /** The lab outlives the process that built it (`gitlb lab up`). Otherwise (tests, benches, the demo) the anchor
   * ends within a second of that process's death, however it died, so the lab counts as stale and the next
   * `cleanStale`/`gitlb lab clean` removes it: a test killed mid-run no longer leaves a whole lab running. */
  persistent?: boolean;
  log?: (line: string) => void;
}

const GIT_ENV = {
  ...process.env,
  GIT_AUTHOR_NAME: 'gitlb lab',
  GIT_AUTHOR_EMAIL: 'lab@gitlb.invalid',
  GIT_COMMITTER_NAME: 'gitlb lab',
  GIT_COMMITTER_EMAIL: 'lab@gitlb.invalid',
};

async function git(args: string[], cwd?: string): Promise<string> {
  return (await run(['git', ...args], { env: GIT_ENV, cwd })).stdout;
}

/** Makes the config directory a Git repository with one commit, and a bare clone the server serves. */
async function prepareGitRepo(configDir: string, stateDir: string): Promise<{ root: string; bare: string; work: string }> {
  const root = join(stateDir, 'git');
  const bare = join(root, GIT_REPO_NAME);
  const work = join(stateDir, 'work');
  mkdirSync(root, { recursive: true });
  if (existsSync(join(configDir, '.git'))) {
    await git(['clone', '--quiet', '--bare', configDir, bare]);
  } else {
    cpSync(configDir, work, { recursive: true, filter: (src) => !src.split('/').includes('.git') });
    await git(['init', '--quiet', '-b', 'main'], work);
    await git(['add', '-A'], work);
    await git(['commit', '--quiet', '-m', 'Initial config from sample-config-repo'], work);
    await git(['clone', '--quiet', '--bare', work, bare]);
    rmSync(work, { recursive: true, force: true });
  }
  await git(['config', 'http.receivepack', 'true'], bare);
  // A working clone for people (and `make demo`) to commit from; pushes go to the bare repo.
  await git(['clone', '--quiet', bare, work]);
  return { root, bare, work };
}

/** The anchor's command: it lives as long as the lab may (docs at the top); with an owner, no longer than it. */
export function anchorArgv(owner: number | null): string[] {
  if (owner === null) return ['sleep', 'infinity'];
  return ['sh', '-c', 'while kill -0 "$0" 2>/dev/null; do sleep 1; done', String(owner)];
}

/** Builds the lab. On failure everything made so far is removed again and the error is rethrown. */
export async function labUp(opts: LabUpOptions = {}): Promise<LabState> {
  const log = opts.log ?? (() => {});
  const stateDir = resolve(opts.stateDir ?? DEFAULT_STATE_DIR);
  const configDir = resolve(opts.configDir ?? DEFAULT_CONFIG_DIR);
  const startDaemonsToo = opts.daemons ?? true;
  const vipsOnLo = opts.vipsOnLo ?? !startDaemonsToo;

  const existing = readLabState(stateDir);
  if (existing) {
    if (labAlive(existing)) throw new Error(`a lab is already up (${existing.prefix}*, state ${statePath(stateDir)}); run 'gitlb lab down' first`);
    log(`removing the remains of a dead lab (${existing.prefix}*)`);
    await labDown(stateDir);
  }

  let spec = opts.spec;
  if (!spec) {
    const { loadConfigModel } = await import('./load-config.js');
    spec = labSpecFromModel(await loadConfigModel(configDir), opts.clientCount);
  }
  if (opts.routing === 'static' && spec.bgp) spec = { ...spec, bgp: undefined };
  if (opts.router) spec = { ...spec, router: opts.router };
  if (spec.router === 'frr' && spec.bgp && !frrAvailable()) throw new Error('lab: --router frr needs FRR (Debian frr; make deps installs it)');
  const plan = planLab(spec); // pure: fails before anything is built
  mkdirSync(join(stateDir, 'logs'), { recursive: true });

  const anchor = spawnDetached('anchor', null, anchorArgv(opts.persistent ? null : process.pid), join(stateDir, 'logs', 'anchor.log'));
  const state: LabState = {
    version: 1,
    prefix: `glb${anchor.pid}-`,
    stateDir,
    configDir,
    createdAt: new Date().toISOString(),
    complete: false,
    plan,
    namespaces: [],
    processes: [anchor],
    git: null,
    daemons: [],
    pinRoots: [],
  };
  writeLabState(state);
  // The repository is plain files on the host: prepare it while the network is being built.
  const repoReady = prepareGitRepo(configDir, stateDir);
  repoReady.catch(() => {}); // awaited below; a failure elsewhere first must not leave it unhandled
  try {
    await buildNetwork(state, vipsOnLo, log);
    const gitUp = startGitServer(state, await repoReady);
    const serversUp = startBackendServers(state, opts.backendHttp ?? 'node');
    await gitUp;
    log(`git server ${state.git!.repoUrl}`);
    await serversUp;
    if (state.plan.bird) await startBirds(state, log);
    log(`backend servers: ${state.plan.servers.map((s) => `${s.node} (tcp ${s.tcpPorts.join(',')}, udp ${s.udpPorts.join(',')})`).join('; ')}`);
    if (startDaemonsToo) await startDaemons(state, { log, ...(opts.daemonArgs && { extraArgs: opts.daemonArgs }) });
    state.complete = true;
    writeLabState(state);
    log(`lab up: ${state.namespaces.length} namespaces with prefix ${state.prefix}, state in ${statePath(stateDir)}`);
    return state;
  } catch (err) {
    await repoReady.catch(() => {}); // let git finish before its directory is removed
    log(`lab up failed: ${(err as Error).message}; removing what was built`);
    await labDown(stateDir).catch(() => {});
    throw err;
  }
}

/**
 * Removes exactly what the recorded lab made: stops its processes (only if still the same processes),
 * deletes its namespaces, its bpffs pin roots and its files. Returns what it did; no state means nothing to do.
 */
export async function labDown(stateDir = DEFAULT_STATE_DIR): Promise<{ stopped: number; namespaces: string[] } | null> {
  const state = readLabState(stateDir);
  if (!state) return null;
  let stopped = 0;
  // Daemons first (they use the servers), the anchor last (until then the lab counts as alive).
  for (const role of ['prometheus', 'daemon', 'bird', 'frr', 'backend-server', 'git-server', 'anchor']) {
    const group = state.processes.filter((p) => p.role === role);
    const results = await Promise.all(group.map((p) => stopLabProcess(p)));
    stopped += results.filter((r) => r === 'stopped').length;
    if (role === 'frr') for (const p of group) removeFrrTmp(p);
  }
  const removed: string[] = [];
  const failed: string[] = [];
  for (const ns of [...state.namespaces].reverse()) {
    if (!ns.startsWith(state.prefix)) continue; // never anything the state file did not make
    if (!listNetns().includes(ns)) continue;
    try {
      await deleteNetns(ns);
      removed.push(ns);
    } catch (e) {
      failed.push(`${ns} (${(e as Error).message.split('\n')[0]})`); // go on: one stuck namespace must not keep the rest
    }
  }
  for (const pin of state.pinRoots) if (pin.startsWith(`${LAB_PIN_PARENT}/glb`)) rmSync(pin, { recursive: true, force: true });
  // The parent is the daemons' default pin root: removed only when the lab left it empty (no real node's pins).
  try {
    if (state.pinRoots.length && readdirSync(LAB_PIN_PARENT).length === 0) rmdirSync(LAB_PIN_PARENT);
  } catch {
    /* absent, or holds pins that are not the lab's */
  }
  // The state file (and the logs) stay while a namespace it made is left, so `gitlb lab down` can be run again.
  if (failed.length) throw new Error(`lab down: could not remove ${failed.join(', ')}; run 'gitlb lab down' again`);
  for (const sub of ['git', 'work', 'logs', 'cache', 'bird', 'frr', 'prometheus']) rmSync(join(state.stateDir, sub), { recursive: true, force: true });
  rmSync(statePath(state.stateDir), { force: true });
  rmSync(join(state.stateDir, 'peer-secret'), { force: true });
  try {
    if (readdirSync(state.stateDir).length === 0) rmdirSync(state.stateDir);
  } catch {
    /* not ours to insist on */
  }
  return { stopped, namespaces: removed };
}

/**
 * Removes stale labs, namespaces and pins: a recorded lab whose anchor is gone is taken down (its processes and
 * files too), then every `glb<pid>-*` namespace whose creating pid is dead, then every bpffs pin of a dead run
 * (stale-pins.ts: `glb<pid>-*`, `gitlb-test-glb<pid>-*`, `gitlb-test-<pid>-*`). A running lab is never touched.
 */
export async function labClean(stateDir = DEFAULT_STATE_DIR): Promise<{ lab: string | null; namespaces: string[]; pins: string[] }> {
  const state = readLabState(stateDir);
  let lab: string | null = null;
  const keep: string[] = [];
  if (state && !labAlive(state)) {
    await labDown(stateDir);
    lab = state.prefix;
  } else if (state) {
    keep.push(...state.namespaces);
  }
  const namespaces = await cleanStale('glb', { keep });
  return { lab, namespaces, pins: cleanStalePins() };
}
