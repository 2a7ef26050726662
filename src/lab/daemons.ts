// The gitlb daemons of a lab: `gitlb run` in every lb and backend namespace, kept apart from anything else on the
// machine (pin root, cache dir), with the lab's peer secret and metrics address; a daemon that exits at once is
// reported with the tail of its log.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { exec, sleep } from './netns.js';
import { isAlive, nodeScriptArgv, spawnDetached, type LabProcess } from './processes.js';
import { birdGenerated, birdSocket } from './bird.js';
import { LAB_METRICS_PORT, metricsAddress } from './prometheus.js';
import { startLabPrometheus } from './services.js';
import { fullNs, LAB_PIN_PARENT, PROJECT_ROOT, writeLabState, type DaemonReport, type LabState } from './state.js';

/** The argv prefix that runs the gitlb CLI the same way this process runs (bin/gitlb from dist/; from source, dist/'s
 * twin when dist/ is up to date, else the source via tsx: compiled.ts). */
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

function readTail(file: string, chars: number): string {
  try {
    const text = readFileSync(file, 'utf8').trim();
    return text.slice(-chars).replace(/\s+/g, ' ');
  } catch {
    return '';
  }
}
