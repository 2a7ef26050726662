// `gitlb lab`: builds the lab from its plan (topology.ts), records everything it made in a state file, and
// removes exactly that on `down`.
//
// The lab's namespaces are named after an *anchor* process (`glb<anchorPid>-client`, ...), a detached
// `sleep infinity` that lives exactly as long as the lab. So `cleanStale()` — run by any test or by
// `gitlb lab clean` — treats a running lab as alive and a lab whose anchor died as stale, with no special case.
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync, cpSync, readdirSync, rmdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import {
  addrAddArgs,
  cleanStale,
  deleteNetns,
  exec,
  ipBatch,
  listNetns,
  multipathRouteArgs,
  netnsPids,
  nsArgv,
  nsExec,
  routeAddArgs,
  run,
  setSysctls,
  disableBridgeNetfilter,
  sleep,
  waitForPort,
} from './netns.js';
import { describeProcess, isAlive, nodeScriptArgv, spawnDetached, stopLabProcess, type LabProcess } from './processes.js';
import { birdGenerated, birdSocket, spawnBird, waitForBird, writeBirdConfigs } from './bird.js';
import { GIT_REPO_NAME, labSpecFromModel, planLab, routerRouteProto, type LabPlan, type LabRouter, type LabSpec } from './topology.js';
import { frrAvailable, frrSessions, removeFrrTmp, spawnRouterFrr, waitForFrr, writeFrrConfigs } from './frr.js';
import { LAB_METRICS_PORT, metricsAddress, prometheusAvailable, startPrometheus } from './prometheus.js';
import { backendHaproxyConfig } from './servers/backend-haproxy.js';

export const DEFAULT_STATE_DIR = '/run/gitlb-lab';
export const PROJECT_ROOT = resolve(fileURLToPath(new URL('../../', import.meta.url)));
/** Lab daemons pin under `<this>/<lab prefix>`; the same bpffs directory `gitlb run` uses by default. */
const LAB_PIN_PARENT = '/sys/fs/bpf/gitlb';
export const DEFAULT_CONFIG_DIR = join(PROJECT_ROOT, 'sample-config-repo');

export interface DaemonReport {
  node: string;
  started: boolean;
  pid?: number;
  reason: string;
}

export interface LabState {
  version: 1;
  /** `glb<anchorPid>-`: every namespace of this lab starts with it. */
  prefix: string;
  stateDir: string;
  configDir: string;
  createdAt: string;
  /** True once `up` finished; a false value means `up` failed or is still running. */
  complete: boolean;
  plan: LabPlan;
  /** Full names of the namespaces created, in creation order. */
  namespaces: string[];
  processes: LabProcess[];
  git: { root: string; bare: string; work: string; url: string; repoUrl: string } | null;
  daemons: DaemonReport[];
  /** bpffs directories handed to daemons as their pin root; removed on `down`. */
  pinRoots: string[];
}

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
  log?: (line: string) => void;
}

export function statePath(stateDir = DEFAULT_STATE_DIR): string {
  return join(stateDir, 'state.json');
}

export function readLabState(stateDir = DEFAULT_STATE_DIR): LabState | null {
  const file = statePath(stateDir);
  if (!existsSync(file)) return null;
  const state = JSON.parse(readFileSync(file, 'utf8')) as LabState;
  if (state.version !== 1) throw new Error(`${file}: unknown lab state version ${String(state.version)}`);
  return state;
}

function writeLabState(state: LabState): void {
  const file = statePath(state.stateDir);
  writeFileSync(`${file}.tmp`, JSON.stringify(state, null, 2) + '\n');
  renameSync(`${file}.tmp`, file); // atomic: a reader never sees half a file
}

/** Is the lab recorded in `state` still alive (its anchor process runs)? */
export function labAlive(state: LabState): boolean {
  const anchor = state.processes.find((p) => p.role === 'anchor');
  return anchor !== undefined && isAlive(anchor);
}

function fullNs(state: LabState, short: string): string {
  return state.prefix + short;
}

/** The namespace of a lab node (`lb-1`) or of a lab role (`client`, `router`, `git`, `sw`). */
export function labNs(state: LabState, nodeOrShort: string): string {
  const node = state.plan.nodes.find((n) => n.name === nodeOrShort);
  return fullNs(state, node ? node.ns : nodeOrShort);
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

  const anchor = spawnDetached('anchor', null, ['sleep', 'infinity'], join(stateDir, 'logs', 'anchor.log'));
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

/** Groups `items` by their `ns`. */
function byNs<T extends { ns: string }>(items: T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) groups.set(item.ns, [...(groups.get(item.ns) ?? []), item]);
  return groups;
}

/**
 * Builds the network in a few rounds of one `ip -batch` process per namespace (a lab is ~150 `ip` commands;
 * one process each is slow on a busy machine): namespaces; links; link settings and addresses; routes.
 */
async function buildNetwork(state: LabState, vipsOnLo: boolean, log: (s: string) => void): Promise<void> {
  const { plan } = state;
  const ns = (short: string) => fullNs(state, short);
  // Recorded before they exist, so a half-built lab is still removed completely by `down`.
  state.namespaces.push(...plan.namespaces.map((n) => ns(n.short)));
  writeLabState(state);
  await ipBatch(null, plan.namespaces.map((n) => ['netns', 'add', ns(n.short)]));
  log(`namespaces: ${state.namespaces.join(' ')}`);

  const perNs = (fill: (short: string, cmds: string[][]) => void) =>
    Promise.all(
      plan.namespaces.map((n) => {
        const cmds: string[][] = [];
        fill(n.short, cmds);
        return ipBatch(ns(n.short), cmds);
      }),
    );
  const ends = plan.links.flatMap((l) => [l.a, l.b]);

  // Round 1: bridges, and each veth pair from its `a` side with the peer placed straight into its namespace.
  await perNs((short, cmds) => {
    for (const b of plan.bridges.filter((x) => x.ns === short)) {
      cmds.push(['link', 'add', b.name, 'type', 'bridge', 'stp_state', '0', 'forward_delay', '0']);
    }
    for (const l of plan.links.filter((x) => x.a.ns === short)) {
      cmds.push(['link', 'add', l.a.name, 'type', 'veth', 'peer', 'name', l.b.name, 'netns', ns(l.b.ns)]);
    }
  });
  // Round 2: loopback and bridges up, ports enslaved, addresses, links up.
  await perNs((short, cmds) => {
    cmds.push(['link', 'set', 'lo', 'up']);
    for (const b of plan.bridges.filter((x) => x.ns === short)) cmds.push(['link', 'set', b.name, 'up']);
    for (const end of ends.filter((e) => e.ns === short)) {
      if (end.master) cmds.push(['link', 'set', end.name, 'master', end.master]);
      for (const addr of end.addrs) cmds.push(addrAddArgs(end.name, addr));
      cmds.push(['link', 'set', end.name, 'up']);
    }
    if (vipsOnLo) for (const l of plan.loAddrs.filter((x) => x.ns === short)) for (const a of l.addrs) cmds.push(addrAddArgs('lo', a));
  });
  await Promise.all([...byNs(plan.sysctls)].map(([short, list]) => setSysctls(ns(short), list.map((x) => [x.key, x.value]))));
  await Promise.all([...new Set(plan.bridges.map((b) => b.ns))].map((short) => disableBridgeNetfilter(ns(short))));
  await Promise.all(
    ends.map((end) => {
      // Senders into a native-XDP veth must not leave checksums partial: XDP_TX'd frames would carry them
      // unfinished and be dropped. Cheap in a lab, so off everywhere.
      const features = ['tx', 'off'];
      // Native XDP_TX on a veth reaches the peer only if the peer runs NAPI, which GRO (or an XDP program
      // there) switches on. The lb nodes' peers are switch ports; GRO on every switch port keeps it uniform.
      if (end.master) features.push('gro', 'on');
      return run(nsArgv(ns(end.ns), ['ethtool', '-K', end.name, ...features]));
    }),
  );
  // The lb nodes' switch ports also run an XDP_PASS program (build/bpf/xdp_pass.o): the documented way to give a
  // veth peer NAPI for native XDP_TX (docs/datapath.md, "Native XDP"); the daemons' forwarding probe checks it.
  const lbNs = new Set(plan.nodes.filter((n) => n.role === 'lb').map((n) => n.ns));
  const passObj = join(PROJECT_ROOT, 'build', 'bpf', 'xdp_pass.o');
  await Promise.all(
    plan.links.flatMap((l) => [[l.a, l.b], [l.b, l.a]] as const)
      .filter(([port, other]) => port.master && lbNs.has(other.ns))
      .map(async ([port]) => {
        // `ip netns exec` (sysfs: true) gives iproute2 a mount namespace of its own: the bpffs work directories it
        // creates on load (tc/globals, the ip and xdp links) then never land in the host's /sys/fs/bpf.
        const attach = ['ip', 'link', 'set', 'dev', port.name, 'xdpdrv', 'obj', passObj, 'sec', 'xdp'];
        const r = await run(nsArgv(ns(port.ns), attach, { sysfs: true }));
        if (r.code !== 0) log(`xdp_pass on switch port ${port.name}: ${r.stderr.trim()} (native XDP on the lb nodes may fall back to generic)`);
      }),
  );
  // Round 3: routes (their next hops are reachable now).
  await perNs((short, cmds) => {
    for (const r of plan.routes.filter((x) => x.ns === short)) cmds.push(routeAddArgs(r.dest, r.spec, r.type));
    for (const m of plan.multipath.filter((x) => x.ns === short)) cmds.push(multipathRouteArgs(m.dest, m.hops));
  });
  await warmNeighbours(state);
  // With BGP the router has no static ECMP route: it learns the VIPs from the lb nodes' BIRD once they announce.
  const ecmp = plan.multipath.map((m) => m.dest).join(', ') || (plan.bird ? 'learnt by BGP once BIRD runs' : 'none');
  log(`links, routes and ECMP (${ecmp}) in place`);
}

/**
 * Resolves every backend address on every lb node (one bounded ping each). The XDP program takes a real's MAC
 * from the kernel's neighbour table via bpf_fib_lookup and drops the packet when there is no entry yet; a
 * freshly built lab has none.
 */
export async function warmNeighbours(state: LabState): Promise<void> {
  const lbs = state.plan.nodes.filter((n) => n.role === 'lb');
  const targets = state.plan.nodes.filter((n) => n.role === 'backend').flatMap((n) => n.addresses);
  const pings = lbs.flatMap((lb) =>
    targets.map((addr) =>
      nsExec(fullNs(state, lb.ns), ['ping', ...(addr.includes(':') ? ['-6'] : []), '-c', '1', '-W', '1', addr], { timeoutMs: 3000 }),
    ),
  );
  await Promise.all(pings);
}

/** Starts the Git server in the lab's git namespace; resolves when it listens. */
async function startGitServer(state: LabState, repo: { root: string; bare: string; work: string }): Promise<void> {
  const { ns: short, address, port } = state.plan.git;
  const url = `http://${address}:${port}`;
  state.git = { ...repo, url, repoUrl: `${url}/${GIT_REPO_NAME}` };
  const argv = nodeScriptArgv('servers/git-server', ['--root', repo.root, '--host', address, '--port', String(port)]);
  state.processes.push(spawnDetached('git-server', fullNs(state, short), argv, join(state.stateDir, 'logs', 'git-server.log'), { cwd: PROJECT_ROOT }));
  writeLabState(state);
  await waitForPort(fullNs(state, short), port, 'tcp', { timeoutMs: 30_000 });
}

function describeLabProcess(state: LabState, role: LabProcess['role'], node: string): string {
  // every match: with backendHttp 'haproxy' a backend has two servers (Node for UDP, haproxy for HTTP)
  return state.processes.filter((x) => x.role === role && x.node === node).map((p) => describeProcess(p)).join('');
}

/** Starts every backend's HTTP/UDP server (HTTP by Node or haproxy); resolves when all their ports are bound. */
async function startBackendServers(state: LabState, http: 'node' | 'haproxy'): Promise<void> {
  for (const s of state.plan.servers) {
    const nodeTcp = http === 'node' ? s.tcpPorts : [];
    const args = ['--name', s.node, ...nodeTcp.flatMap((p) => ['--tcp', String(p)]), ...s.udpPorts.flatMap((p) => ['--udp', String(p)])];
    const argv = nodeScriptArgv('servers/backend', args);
    const logFile = join(state.stateDir, 'logs', `backend-${s.node}.log`);
    state.processes.push(spawnDetached('backend-server', fullNs(state, s.ns), argv, logFile, { node: s.node, cwd: PROJECT_ROOT }));
    if (http === 'haproxy' && s.tcpPorts.length) {
      const cfg = join(state.stateDir, `backend-${s.node}.haproxy.cfg`);
      writeFileSync(cfg, backendHaproxyConfig(s.node, s.tcpPorts));
      // -db: stay in the foreground, so the recorded process is haproxy itself and `lab down` stops it
      const hlog = join(state.stateDir, 'logs', `backend-${s.node}-haproxy.log`);
      state.processes.push(spawnDetached('backend-server', fullNs(state, s.ns), ['haproxy', '-db', '-f', cfg], hlog, { node: s.node }));
    }
  }
  writeLabState(state);
  await Promise.all(
    state.plan.servers.map(async (s) => {
      try {
        for (const p of s.tcpPorts) await waitForPort(fullNs(state, s.ns), p, 'tcp', { timeoutMs: 30_000 });
        for (const p of s.udpPorts) await waitForPort(fullNs(state, s.ns), p, 'udp', { timeoutMs: 30_000 });
      } catch (e) {
        throw new Error(`backend server ${s.node}: ${(e as Error).message}${describeLabProcess(state, 'backend-server', s.node)}`);
      }
    }),
  );
}

/**
 * Starts BIRD on every lb node with BGP settings and the router's daemon (BIRD, or FRR's zebra and bgpd); resolves
 * when each answers on its socket.
 */
async function startBirds(state: LabState, log: (s: string) => void): Promise<void> {
  const b = state.plan.bird!;
  const frr = b.router === 'frr';
  writeBirdConfigs(state.stateDir, b, { router: !frr });
  const routerNs = fullNs(state, state.plan.router.ns);
  const who = [...(frr ? [] : [{ name: 'router', ns: routerNs }]), ...b.lbs.map((l) => ({ name: l.node, ns: fullNs(state, l.ns) }))];
  for (const w of who) state.processes.push(spawnBird(state.stateDir, w.name, w.ns));
  writeLabState(state);
  if (frr) {
    writeFrrConfigs(state.stateDir, b);
    try {
      state.processes.push(...(await spawnRouterFrr(state.stateDir, routerNs)));
    } finally {
      writeLabState(state);
    }
    await waitForFrr(state.stateDir, 'bgpd');
  }
  await Promise.all(who.map((w) => waitForBird(state.stateDir, w.name)));
  log(`${frr ? 'FRR (zebra, bgpd) on the router, ' : ''}BIRD running on ${who.map((w) => w.name).join(', ')}: ${b.sessions.length} BGP sessions to the router (AS ${b.routerAsn})`);
}

/** The router's BGP sessions (FRR labs): lb address -> state, from bgpd. */
export async function routerSessions(state: LabState): Promise<Record<string, string>> {
  if (state.plan.bird?.router !== 'frr') throw new Error('routerSessions: the lab router does not run FRR');
  return frrSessions(state.stateDir);
}

/**
 * Starts BIRD again for `who` (`router` or an lb node) after it was stopped or killed, like a supervisor would.
 * Resolves when it answers on its socket.
 */
export async function restartBird(state: LabState, who: string): Promise<LabProcess> {
  if (who === 'router' && state.plan.bird?.router === 'frr') throw new Error('restartBird: the lab router runs FRR, not BIRD');
  const ns = who === 'router' ? fullNs(state, state.plan.router.ns) : labNs(state, who);
  const proc = spawnBird(state.stateDir, who, ns);
  state.processes.push(proc);
  writeLabState(state);
  await waitForBird(state.stateDir, who);
  return proc;
}

/** The argv prefix that runs the gitlb CLI the same way this process runs (source via tsx, or dist/). */
function gitlbArgv(): { argv: string[]; commandFile: string } {
  const fromSource = fileURLToPath(import.meta.url).endsWith('.ts');
  if (fromSource) {
    return {
      argv: nodeScriptArgv('../cli/main', []),
      commandFile: join(PROJECT_ROOT, 'src', 'cli', 'commands', 'run.ts'),
    };
  }
  return { argv: [join(PROJECT_ROOT, 'bin', 'gitlb')], commandFile: join(PROJECT_ROOT, 'dist', 'cli', 'commands', 'run.js') };
}

export interface StartDaemonsOptions {
  log?: (line: string) => void;
  /** `--poll` schedule for the daemons (the lab has no webhook wiring): seconds or cron. Default '2'. */
  poll?: string;
  /** Further `gitlb run` arguments for every daemon. */
  extraArgs?: string[];
}

/**
 * Starts `gitlb run --repo <url> --node <name> --interface <if>` inside every lb and backend namespace.
 * Guarded: when the `run` command does not exist yet, nothing is started and each report says so. Options the
 * command advertises in its --help are used to keep each lab's daemons apart from anything else on the machine:
 * `--pin-root` under /sys/fs/bpf/gitlb/<lab>, `--cache-dir` under the lab's state dir, and `--poll`.
 * A daemon that exits within its first second is reported with the tail of its log.
 */
export async function startDaemons(state: LabState, opts: StartDaemonsOptions = {}): Promise<DaemonReport[]> {
  const log = opts.log ?? (() => {});
  const { argv: gitlb, commandFile } = gitlbArgv();
  if (!existsSync(commandFile)) {
    const reason = `gitlb run is not available (${commandFile} missing); no daemons started`;
    log(reason);
    return state.plan.nodes.map((n) => ({ node: n.name, started: false, reason }));
  }
  if (!state.git) throw new Error('startDaemons: the lab has no git server');
  const help = await exec([...gitlb, 'run', '--help'], { timeoutMs: 30_000, cwd: PROJECT_ROOT });
  if (help.code !== 0) {
    const reason = `gitlb run --help failed (exit ${help.code}): ${help.stderr.trim().slice(-300)}; no daemons started`;
    log(reason);
    return state.plan.nodes.map((n) => ({ node: n.name, started: false, reason }));
  }
  const supports = (flag: string) => help.stdout.includes(flag);
  const pinRoot = `${LAB_PIN_PARENT}/${state.prefix.replace(/-$/, '')}`;
  if (supports('--pin-root') && !state.pinRoots.includes(pinRoot)) state.pinRoots.push(pinRoot);
  const started: { node: string; proc: LabProcess }[] = [];
  for (const node of state.plan.nodes) {
    const args = ['run', '--repo', state.git.repoUrl, '--node', node.name, '--interface', node.interface];
    if (supports('--pin-root')) args.push('--pin-root', pinRoot);
    if (supports('--cache-dir')) args.push('--cache-dir', join(state.stateDir, 'cache', node.name));
    if (supports('--poll')) args.push('--poll', opts.poll ?? '2');
    // auto unless told otherwise: native XDP, which the daemon checks really transmits on this veth (the switch
    // port runs xdp_pass, see buildNetwork), else generic (docs/datapath.md, "Native XDP").
    if (supports('--xdp-mode') && !(opts.extraArgs ?? []).includes('--xdp-mode')) args.push('--xdp-mode', 'auto');
    // lb nodes with BGP: the generated file the node's BIRD includes, and that BIRD's own control socket.
    if (supports('--bird-config') && state.plan.bird?.lbs.some((l) => l.node === node.name))
      args.push('--bird-config', birdGenerated(state.stateDir, node.name), '--bird-socket', birdSocket(state.stateDir, node.name));
    // Static routing: there is no BIRD to drive (the config may still have BGP settings).
    else if (supports('--bird-socket') && !state.plan.bird && !(opts.extraArgs ?? []).includes('--bird-socket')) args.push('--bird-socket', 'off');
    // lb nodes talk to each other over the authenticated peer channel, as shipped (docs/security.md, Peers): one
    // random secret per lab, the same file for every lb daemon.
    if (supports('--peer-secret-file') && node.role === 'lb') args.push('--peer-secret-file', labPeerSecret(state.stateDir));
    // /metrics on the lab segment, where the lab's Prometheus (router namespace) scrapes it
    const metricsAt = metricsAddress(node.addresses);
    if (supports('--metrics') && metricsAt) args.push('--metrics', `${metricsAt.includes(':') ? `[${metricsAt}]` : metricsAt}:${LAB_METRICS_PORT}`);
    args.push(...(opts.extraArgs ?? []));
    const logFile = join(state.stateDir, 'logs', `daemon-${node.name}.log`);
    const proc = spawnDetached('daemon', fullNs(state, node.ns), [...gitlb, ...args], logFile, { node: node.name, cwd: PROJECT_ROOT });
    state.processes.push(proc);
    started.push({ node: node.name, proc });
    writeLabState(state);
  }
  await sleep(1000);
  const reports: DaemonReport[] = [];
  for (const { node, proc } of started) {
    if (isAlive(proc)) {
      reports.push({ node, started: true, pid: proc.pid, reason: 'running' });
    } else {
      const tail = readTail(proc.log, 400);
      reports.push({ node, started: false, pid: proc.pid, reason: `exited at once: ${tail || '(no output)'}` });
    }
  }
  state.daemons = reports;
  writeLabState(state);
  for (const r of reports) log(`daemon ${r.node}: ${r.started ? `running (pid ${r.pid})` : r.reason}`);
  if (supports('--metrics')) await startLabPrometheus(state, log);
  return reports;
}

/** The lab's peer secret file (created once, mode 0600, 32 random bytes as base64). */
export function labPeerSecret(stateDir: string): string {
  const file = join(stateDir, 'peer-secret');
  if (!existsSync(file)) writeFileSync(file, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
  return file;
}

/** Prometheus in the router namespace, scraping every daemon (once per lab; skipped when not installed). */
async function startLabPrometheus(state: LabState, log: (line: string) => void): Promise<void> {
  if (state.processes.some((p) => p.role === 'prometheus' && isAlive(p))) return;
  if (!prometheusAvailable()) {
    log('prometheus is not installed (make deps installs it): the lab runs without one');
    return;
  }
  const targets = state.plan.nodes.flatMap((n) => {
    const address = metricsAddress(n.addresses);
    return address ? [{ node: n.name, role: n.role, address }] : [];
  });
  const rules = join(PROJECT_ROOT, 'deploy', 'prometheus', 'gitlb-rules.yml');
  const proc = await startPrometheus({ ns: fullNs(state, state.plan.router.ns), dir: join(state.stateDir, 'prometheus'), targets,
    rulesFile: existsSync(rules) ? rules : null });
  state.processes.push(proc);
  writeLabState(state);
  log(`prometheus in ${fullNs(state, state.plan.router.ns)} on http://127.0.0.1:9090, scraping ${targets.length} daemons every 2 s`);
}

function readTail(file: string, chars: number): string {
  try {
    const text = readFileSync(file, 'utf8').trim();
    return text.slice(-chars).replace(/\s+/g, ' ');
  } catch {
    return '';
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

export interface LabStatus {
  /** The anchor process runs (the lab exists); whether everything in it runs is `dead`. */
  up: boolean;
  /** Recorded processes that should run and do not (per /proc: gone, a zombie, or the pid reused), as text. */
  dead: string[];
  complete: boolean;
  prefix: string;
  stateFile: string;
  git: LabState['git'];
  namespaces: { name: string; role: string; node?: string; exists: boolean; addrs: string[]; pids: number[] }[];
  processes: { role: string; node?: string; ns: string | null; pid: number; alive: boolean; log: string }[];
  /** The start-time report of each daemon, and whether its process runs now (from /proc). */
  daemons: (DaemonReport & { alive: boolean })[];
  ecmp: string[];
}

/** What the recorded lab looks like now, read from the kernel and /proc (not from the state file alone). */
export async function labStatus(stateDir = DEFAULT_STATE_DIR): Promise<LabStatus | null> {
  const state = readLabState(stateDir);
  if (!state) return null;
  const present = new Set(listNetns());
  const namespaces: LabStatus['namespaces'] = [];
  for (const n of state.plan.namespaces) {
    const name = fullNs(state, n.short);
    const exists = present.has(name);
    let addrs: string[] = [];
    if (exists) {
      const r = await nsExec(name, ['ip', '-br', 'addr', 'show'], { timeoutMs: 5000 });
      addrs = r.stdout
        .split('\n')
        .map((l) => l.trim().split(/\s+/))
        .filter((f) => f.length > 2)
        .flatMap(([dev, , ...a]) => a.filter((x) => !x.startsWith('fe80') && x !== '::1/128' && !x.startsWith('127.')).map((x) => `${dev!.split('@')[0]} ${x}`));
    }
    namespaces.push({ name, role: n.role, ...(n.node ? { node: n.node } : {}), exists, addrs, pids: exists ? await netnsPids(name) : [] });
  }
  const ecmp: string[] = [];
  const router = fullNs(state, state.plan.router.ns);
  if (present.has(router)) {
    for (const m of state.plan.multipath) {
      const fam = m.dest.includes(':') ? '-6' : '-4';
      const r = await nsExec(router, ['ip', fam, 'route', 'show', m.dest], { timeoutMs: 5000 });
      ecmp.push(r.stdout.trim().replace(/\s+/g, ' '));
    }
    // BGP: whatever the router's BIRD (or zebra) installed, one line per VIP route.
    if (state.plan.bird) ecmp.push(...(await bgpRoutes(router, routerRouteProto(state.plan.bird))));
  }
  const processes = state.processes.map((p) => ({ role: p.role, ...(p.node ? { node: p.node } : {}), ns: p.ns, pid: p.pid, alive: isAlive(p), log: p.log }));
  // Every recorded process is one `up` started to keep running (anchor, servers, BIRD, Prometheus, daemons).
  const dead = processes.filter((p) => !p.alive).map((p) => `${p.role}${p.node ? ` ${p.node}` : ''} (pid ${p.pid}, log ${p.log})`);
  const daemons = state.daemons.map((d) => {
    const proc = state.processes.find((p) => p.role === 'daemon' && p.node === d.node && p.pid === d.pid);
    return { ...d, alive: proc !== undefined && isAlive(proc) };
  });
  return {
    up: labAlive(state),
    dead,
    complete: state.complete,
    prefix: state.prefix,
    stateFile: statePath(stateDir),
    git: state.git,
    namespaces,
    processes,
    daemons,
    ecmp,
  };
}

/** The router's routes learnt by BGP (installed by BIRD, or by zebra: `proto`), one line per destination. */
export async function bgpRoutes(routerNs: string, proto: 'bird' | 'bgp' = 'bird'): Promise<string[]> {
  const out: string[] = [];
  for (const fam of ['-4', '-6']) {
    const r = await nsExec(routerNs, ['ip', fam, 'route', 'show', 'proto', proto], { timeoutMs: 5000 });
    // Multipath routes continue on indented `nexthop` lines: join them to their destination.
    out.push(...r.stdout.replace(/\n\s+/g, ' ').split('\n').map((l) => l.trim().replace(/\s+/g, ' ')).filter(Boolean));
  }
  return out;
}

export function formatLabStatus(s: LabStatus): string {
  const lines: string[] = [];
  const head = !s.up ? 'DOWN (anchor process gone: run gitlb lab down or clean)' : s.dead.length ? `UP, ${s.dead.length} process(es) DEAD` : 'UP';
  lines.push(`lab ${head}${s.complete ? '' : ' (incomplete)'}  prefix ${s.prefix}  state ${s.stateFile}`);
  if (s.up) for (const d of s.dead) lines.push(`  DEAD: ${d}`);
  if (s.git) lines.push(`git server  ${s.git.repoUrl}   working clone ${s.git.work}`);
  lines.push('', 'namespaces:');
  for (const n of s.namespaces) {
    lines.push(`  ${n.name.padEnd(22)} ${(n.node ?? n.role).padEnd(8)} ${n.exists ? '' : 'MISSING '}${n.pids.length ? `pids ${n.pids.join(',')}` : ''}`);
    for (const a of n.addrs) lines.push(`      ${a}`);
  }
  lines.push('', 'processes:');
  for (const p of s.processes) lines.push(`  ${p.role.padEnd(15)} ${(p.node ?? '').padEnd(6)} pid ${String(p.pid).padEnd(8)} ${p.alive ? 'running' : 'DEAD'}  ${p.ns ?? '(host)'}`);
  lines.push('', 'daemons:');
  if (s.daemons.length === 0) lines.push('  none (started with --no-daemons)');
  // Liveness now (from /proc), not the report `up` wrote when it started them.
  for (const d of s.daemons) {
    const now = d.alive ? `running pid ${d.pid}` : d.started ? `DEAD (pid ${d.pid} ran at start, has exited since; see its log)` : `not running: ${d.reason}`;
    lines.push(`  ${d.node.padEnd(6)} ${now}`);
  }
  lines.push('', 'router ECMP (static, or learnt by BGP):');
  for (const r of s.ecmp) lines.push(`  ${r}`);
  return lines.join('\n') + '\n';
}

/**
 * Removes stale labs and namespaces: a recorded lab whose anchor is gone is taken down (its processes and
 * files too), then every `glb<pid>-*` namespace whose creating pid is dead. A running lab is never touched.
 */
export async function labClean(stateDir = DEFAULT_STATE_DIR): Promise<{ lab: string | null; namespaces: string[] }> {
  const state = readLabState(stateDir);
  let lab: string | null = null;
  const keep: string[] = [];
  if (state && !labAlive(state)) {
    await labDown(stateDir);
    lab = state.prefix;
  } else if (state) {
    keep.push(...state.namespaces);
  }
  return { lab, namespaces: await cleanStale('glb', { keep }) };
}
