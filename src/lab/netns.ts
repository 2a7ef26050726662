// Network-namespace plumbing for tests and the lab: namespaces, veth pairs, bridges, addresses, routes,
// sysctls, and processes running inside a namespace. Everything shells out to iproute2 (`ip`), so what a
// test builds is exactly what an operator would type, and nothing here ever touches the host namespace's
// interfaces: veth pairs are created directly inside their target namespaces with `ip -n`.
//
// Processes enter a namespace with `nsenter --net=/run/netns/<name>`, not `ip netns exec`: the latter also
// makes a private mount namespace with a fresh /sys, which hides /sys/fs/bpf, so a daemon could not pin (or
// adopt) its BPF programs and maps in the host's bpffs. nsenter switches the network namespace only. Netlink,
// ioctls, /proc/net and /proc/sys/net all follow the network namespace; only /sys/class/net still shows the
// host's view — pass `{ sysfs: true }` for the rare command that needs the namespace's /sys (then bpffs is hidden).
//
// Names carry a per-run prefix (`glb<pid>-`) so parallel runs never collide and a later `cleanStale()` can tell
// which namespaces belong to a run that has died. Everything a run creates or spawns is recorded, so
// `cleanupRun()` removes exactly that.
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';

/** Namespace names made by gitlb start with this; the creating process's pid follows, then `-`. */
export const NETNS_PREFIX = 'glb';

/** The prefix for namespaces created by this process: `glb<pid>-`. */
export function runPrefix(): string {
  return `${NETNS_PREFIX}${process.pid}-`;
}

/** Prefixes a short name with this run's prefix: `nsName('lb1')` -> `glb1234-lb1`. */
export function nsName(short: string): string {
  return runPrefix() + short;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  code: number;
}

export interface ExecOptions {
  /** Written to the child's stdin, which is then closed. */
  input?: string | Buffer;
  /** Kills the child (SIGKILL) after this long; the result then has code 124. Default 30 s. */
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/** Thrown by `run()` when a command exits non-zero; carries the command line and its stderr. */
export class CommandError extends Error {
  override name = 'CommandError';
  constructor(
    readonly argv: string[],
    readonly result: ExecResult,
  ) {
    super(`command failed (exit ${result.code}): ${argv.join(' ')}${result.stderr ? `: ${result.stderr.trim()}` : ''}`);
  }
}

/** Runs a command to completion (never throws for a non-zero exit; see `run()` for that). */
export function exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: opts.env ?? process.env,
      cwd: opts.cwd,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? 30_000);
    child.stdout!.on('data', (b: Buffer) => out.push(b));
    child.stderr!.on('data', (b: Buffer) => err.push(b));
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8') + (timedOut ? `\n(timed out after ${opts.timeoutMs ?? 30_000} ms)` : ''),
        code: timedOut ? 124 : (code ?? (signal ? 128 : 1)),
      });
    });
    child.stdin!.on('error', () => {}); // a child that exits without reading stdin is not an error
    child.stdin!.end(opts.input ?? '');
  });
}

/** Runs a command and throws `CommandError` unless it exits 0. */
export async function run(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  const r = await exec(argv, opts);
  if (r.code !== 0) throw new CommandError(argv, r);
  return r;
}

/** `ip` commands executed in namespace `ns` (`ip -n ns ...`). */
function ipIn(ns: string, args: string[]): Promise<ExecResult> {
  return run(['ip', '-n', ns, ...args]);
}

// ---- what this run made: namespaces and processes, removed by cleanupRun() -------------------------------

const createdNamespaces = new Set<string>();
const spawnedChildren = new Set<ChildProcess>();

/** The namespaces this process created and has not deleted yet. */
export function createdNetns(): string[] {
  return [...createdNamespaces];
}

// ---- namespaces ---------------------------------------------------------------------------------------------

/** All named network namespaces (those under /run/netns). */
export function listNetns(): string[] {
  try {
    return readdirSync('/run/netns').sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

/** Creates a namespace and brings its loopback up. Refuses names without the gitlb prefix. */
export async function createNetns(name: string): Promise<void> {
  if (!name.startsWith(NETNS_PREFIX)) throw new Error(`netns name '${name}' must start with '${NETNS_PREFIX}' (use nsName())`);
  await run(['ip', 'netns', 'add', name]);
  createdNamespaces.add(name);
  await ipIn(name, ['link', 'set', 'lo', 'up']);
}

/** Deletes a namespace (its interfaces go with it; veth peers elsewhere vanish too). Missing is not an error. */
export async function deleteNetns(name: string): Promise<void> {
  createdNamespaces.delete(name);
  // `ip netns del` can fail with EBUSY for a moment while another mount namespace (an `ip netns exec` of
  // someone else's, starting or ending) still holds a copy of the /run/netns mount: retry briefly.
  for (let attempt = 1; ; attempt++) {
    if (!listNetns().includes(name)) return; // gone (its owner tore it down at the same moment): nothing to do
    const r = await exec(['ip', 'netns', 'del', name]);
    if (r.code === 0 || !listNetns().includes(name)) return;
    if (attempt === 5) throw new CommandError(['ip', 'netns', 'del', name], r);
    await sleep(200 * attempt);
  }
}

/** Process ids currently running inside namespace `name` (`ip netns pids`). */
export async function netnsPids(name: string): Promise<number[]> {
  const r = await exec(['ip', 'netns', 'pids', name]);
  if (r.code !== 0) return [];
  return r.stdout.split(/\s+/).filter(Boolean).map(Number);
}

/** Is process `pid` alive? (EPERM means it exists but is not ours; it is still alive.) */
export function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The creating pid encoded in a namespace name `glb<pid>-...`, or null if the name is not of that form. */
export function creatorPid(name: string, prefix = NETNS_PREFIX): number | null {
  if (!name.startsWith(prefix)) return null;
  const m = /^(\d+)-/.exec(name.slice(prefix.length));
  return m ? Number(m[1]) : null;
}

export interface CleanStaleOptions {
  /** Namespaces never to remove even if their creator is dead (e.g. those of a running lab). */
  keep?: Iterable<string>;
  /** Report what would be removed without removing it. */
  dryRun?: boolean;
}

/**
 * Removes namespaces named `<prefix><pid>-...` whose creating pid is no longer alive. Namespaces without the
 * prefix, or whose name does not carry a pid, are never touched. Returns the names removed (or that would be).
 */
export async function cleanStale(prefix = NETNS_PREFIX, opts: CleanStaleOptions = {}): Promise<string[]> {
  const keep = new Set(opts.keep ?? []);
  const stale = listNetns().filter((name) => {
    if (keep.has(name)) return false;
    const pid = creatorPid(name, prefix);
    return pid !== null && pid !== process.pid && !pidAlive(pid);
  });
  if (opts.dryRun) return stale;
  for (const name of stale) {
    // what still runs there (a killed test's daemons, BIRD, servers) would keep the namespace, its links and its
    // BPF programs alive after the name is gone, unreachable by any later clean
    // a few passes: what runs there may fork while it is being killed
    for (let pass = 0; pass < 5; pass++) {
      const pids = (await netnsPids(name)).filter((pid) => Number.isInteger(pid) && pid > 1 && pid !== process.pid);
      if (!pids.length) break;
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await sleep(50);
    }
    await deleteNetns(name);
  }
  return stale;
}

// ---- links, addresses, routes -------------------------------------------------------------------------------

export interface VethEnd {
  /** Namespace that holds this end. */
  ns: string;
  /** Interface name inside that namespace (max 15 characters). */
  name: string;
  /** Addresses with prefix length, e.g. `192.0.2.1/24`, `2001:db8::1/64`. */
  addrs?: string[];
  /** Enslave this end to a bridge of that name in the same namespace instead of leaving it standalone. */
  master?: string;
  mtu?: number;
}

function checkIfName(name: string): void {
  if (name.length === 0 || name.length > 15) throw new Error(`interface name '${name}' must be 1..15 characters`);
}

/** `ip` arguments adding `addr` to `dev`. IPv6 addresses skip duplicate address detection so they work at once. */
export function addrAddArgs(dev: string, addr: string): string[] {
  return ['addr', 'add', addr, 'dev', dev, ...(addr.includes(':') ? ['nodad'] : [])];
}

/** Adds addresses to `dev` in `ns`. */
export async function addAddrs(ns: string, dev: string, addrs: string[]): Promise<void> {
  for (const addr of addrs) await ipIn(ns, addrAddArgs(dev, addr));
}

/**
 * Runs many `ip` commands in one process (`ip [-n ns] -batch -`), in order, stopping at the first failure.
 * `ns` null means the host namespace (only for `netns add`/`netns del`). One process instead of dozens keeps
 * building a lab fast on a busy machine.
 */
export async function ipBatch(ns: string | null, commands: string[][]): Promise<void> {
  if (commands.length === 0) return;
  for (const c of commands) {
    if (c.some((a) => a === '' || /\s|["'\\#]/.test(a))) throw new Error(`ipBatch: argument needs quoting in: ${c.join(' ')}`);
  }
  const argv = ['ip', ...(ns ? ['-n', ns] : []), '-batch', '-'];
  await run(argv, { input: commands.map((c) => c.join(' ')).join('\n') + '\n' });
}

export async function linkUp(ns: string, dev: string): Promise<void> {
  await ipIn(ns, ['link', 'set', dev, 'up']);
}

/**
 * Creates a veth pair with one end in each namespace (directly, never passing through the host namespace),
 * assigns addresses, optionally enslaves ends to bridges, and brings both ends up.
 */
export async function vethPair(a: VethEnd, b: VethEnd): Promise<void> {
  checkIfName(a.name);
  checkIfName(b.name);
  await ipIn(a.ns, ['link', 'add', a.name, 'type', 'veth', 'peer', 'name', b.name, 'netns', b.ns]);
  for (const end of [a, b]) {
    if (end.mtu) await ipIn(end.ns, ['link', 'set', end.name, 'mtu', String(end.mtu)]);
    if (end.master) await ipIn(end.ns, ['link', 'set', end.name, 'master', end.master]);
    await addAddrs(end.ns, end.name, end.addrs ?? []);
    await linkUp(end.ns, end.name);
  }
}

/** Creates a bridge inside `ns` (no STP, no forwarding delay), with optional addresses, and brings it up. */
export async function createBridge(ns: string, name: string, addrs: string[] = []): Promise<void> {
  checkIfName(name);
  await ipIn(ns, ['link', 'add', name, 'type', 'bridge', 'stp_state', '0', 'forward_delay', '0']);
  await addAddrs(ns, name, addrs);
  await linkUp(ns, name);
}

/** Creates a dummy interface in `ns` with addresses, and brings it up. Needs the kernel's dummy driver (not built
 * into every kernel: the CI machine has none; use `lo` or a bridge there). */
export async function createDummy(ns: string, name: string, addrs: string[] = []): Promise<void> {
  checkIfName(name);
  await ipIn(ns, ['link', 'add', name, 'type', 'dummy']);
  await addAddrs(ns, name, addrs);
  await linkUp(ns, name);
}

/**
 * Adds a route in `ns`: `addRoute(ns, '203.0.113.0/24', ['via', '198.51.100.11'])`; a route type other than
 * unicast goes in `type`: `addRoute(ns, '203.0.113.0/24', [], 'unreachable')`.
 */
export async function addRoute(ns: string, dest: string, spec: string[], type?: RouteType): Promise<void> {
  await ipIn(ns, routeAddArgs(dest, spec, type));
}

export type RouteType = 'unreachable' | 'blackhole' | 'prohibit';

/**
 * `ip` arguments adding a route. `ip` infers the family from `dest` or the gateway (write `::/0`, not
 * `default`, for an IPv6 default route); no `-4`/`-6` flag, so the arguments also work in `ip -batch`.
 */
export function routeAddArgs(dest: string, spec: string[], type?: RouteType): string[] {
  return ['route', 'add', ...(type ? [type] : []), dest, ...spec];
}

/** `ip` arguments adding a kernel multipath route over `hops`. */
export function multipathRouteArgs(dest: string, hops: { via: string; dev: string; weight?: number }[]): string[] {
  if (hops.length === 0) throw new Error(`multipath route to ${dest} needs at least one next hop`);
  return routeAddArgs(dest, hops.flatMap((h) => ['nexthop', 'via', h.via, 'dev', h.dev, 'weight', String(h.weight ?? 1)]));
}

/**
 * Adds a kernel multipath (ECMP) route in `ns` to `dest` over several next hops, each `{via, dev}`.
 * The hash policy (L3 or L4) is a per-namespace sysctl; see `setEcmpHashPolicy`.
 */
export async function addMultipathRoute(ns: string, dest: string, hops: { via: string; dev: string; weight?: number }[]): Promise<void> {
  await ipIn(ns, multipathRouteArgs(dest, hops));
}

/** fib_multipath_hash_fields bits: source and destination address, IP protocol, source and destination port. */
export const ECMP_FIVE_TUPLE_FIELDS = '0x0037';

/**
 * Makes the kernel's ECMP choice in `ns` depend on the flow: 'l4' hashes the 5-tuple, 'l3' the addresses only.
 * 'l4' uses the custom policy (3) with explicit fields rather than policy 1, because policy 1 reuses an L4 hash
 * already carried by the skb — across veth that is the *sending socket's* random txhash, so the same 5-tuple
 * could take different next hops (and a retransmitted SYN could switch lb node). Policy 3 always dissects.
 */
export async function setEcmpHashPolicy(ns: string, mode: 'l3' | 'l4' = 'l4'): Promise<void> {
  for (const family of ['ipv4', 'ipv6']) {
    if (mode === 'l3') {
      await setSysctl(ns, `net.${family}.fib_multipath_hash_policy`, '0');
    } else {
      await setSysctl(ns, `net.${family}.fib_multipath_hash_fields`, ECMP_FIVE_TUPLE_FIELDS);
      await setSysctl(ns, `net.${family}.fib_multipath_hash_policy`, '3');
    }
  }
}

/** Sets a sysctl inside `ns` (per-namespace keys only, e.g. net.ipv4.*; never the host's). */
export async function setSysctl(ns: string, key: string, value: string): Promise<void> {
  await setSysctls(ns, [[key, value]]);
}

/** Sets several sysctls inside `ns` in one process, in order. */
export async function setSysctls(ns: string, entries: [key: string, value: string][]): Promise<void> {
  if (entries.length === 0) return;
  for (const [key, value] of entries) {
    if (!/^[a-z0-9_.\-/]+$/i.test(key)) throw new Error(`bad sysctl key '${key}'`);
    if (!/^[\w.:-]+$/.test(value)) throw new Error(`bad sysctl value '${value}' for ${key}`);
  }
  await run(nsArgv(ns, ['sysctl', '-q', '-w', ...entries.map(([k, v]) => `${k}=${v}`)]));
}

export async function getSysctl(ns: string, key: string): Promise<string> {
  const r = await run(nsArgv(ns, ['sysctl', '-n', key]));
  return r.stdout.trim();
}

/**
 * Makes the bridges in `ns` plain L2 switches: where br_netfilter is loaded (its sysctls exist in every
 * namespace, set to 1), every bridged frame is otherwise sent through the IPv4/IPv6/ARP netfilter hooks, which
 * costs a route lookup and an skb extension per frame. A VIP packet crosses the lab's switch twice (router -> lb,
 * lb -> backend) and a direct one once, so that cost would be charged to the load balancer. No-op without
 * br_netfilter.
 */
export async function disableBridgeNetfilter(ns: string): Promise<void> {
  const keys = ['bridge-nf-call-iptables', 'bridge-nf-call-ip6tables', 'bridge-nf-call-arptables'];
  const present = await exec(nsArgv(ns, ['test', '-e', '/proc/sys/net/bridge/bridge-nf-call-iptables']));
  if (present.code !== 0) return;
  await setSysctls(ns, keys.map((k) => [`net.bridge.${k}`, '0']));
}

/** Turns on IPv4 and IPv6 forwarding inside `ns` (a router). */
export async function enableForwarding(ns: string): Promise<void> {
  await setSysctl(ns, 'net.ipv4.ip_forward', '1');
  await setSysctl(ns, 'net.ipv6.conf.all.forwarding', '1');
}

// ---- processes inside a namespace ---------------------------------------------------------------------------

export interface NsEnterOptions {
  /** Use `ip netns exec` (private mount namespace with the namespace's own /sys; no bpffs) instead of nsenter. */
  sysfs?: boolean;
}

/** The argv that runs `argv` inside network namespace `ns` (the command is exec'd in place: same pid). */
export function nsArgv(ns: string, argv: string[], opts: NsEnterOptions = {}): string[] {
  if (ns.includes('/') || ns === '' || ns.startsWith('.')) throw new Error(`bad netns name '${ns}'`);
  const [cmd, ...rest] = argv;
  const command = cmd === undefined ? [] : [systemCommand(cmd), ...rest];
  return opts.sysfs ? ['ip', 'netns', 'exec', ns, ...command] : ['nsenter', `--net=/run/netns/${ns}`, '--', ...command];
}

// ava depends on @vercel/nft, whose file tracer is installed as node_modules/.bin/nft: run under npx or an npm script
// (node_modules/.bin first on PATH) a bare `nft` is that tracer, which exits 0 whatever it is asked, so a firewall
// rule a test or bench believed installed was not. Such names are taken from the system's directories.
const SHADOWED_BY_NPM_BIN = new Set(['nft']);
const SYSTEM_DIRS = ['/usr/sbin', '/sbin', '/usr/bin', '/bin'];

/** `name` as the system's command when npm's bin directory shadows it (nft); any other name unchanged. */
export function systemCommand(name: string): string {
  if (!SHADOWED_BY_NPM_BIN.has(name)) return name;
  return SYSTEM_DIRS.map((d) => `${d}/${name}`).find((p) => existsSync(p)) ?? name;
}

/** Runs a command inside `ns` to completion; never throws for a non-zero exit. */
export function nsExec(ns: string, argv: string[], opts: ExecOptions & NsEnterOptions = {}): Promise<ExecResult> {
  return exec(nsArgv(ns, argv, opts), opts);
}

export interface NsSpawnOptions extends SpawnOptions, NsEnterOptions {
  /** Do not record the child for `cleanupRun()` (e.g. lab processes meant to outlive this process). */
  untracked?: boolean;
}

/**
 * Starts a long-running process inside `ns`. nsenter execs the command in place, so the child's pid is the
 * command's own pid. Tracked children are killed by `cleanupRun()`.
 */
export function nsSpawn(ns: string, argv: string[], opts: NsSpawnOptions = {}): ChildProcess {
  const { untracked, sysfs, ...spawnOpts } = opts;
  const full = nsArgv(ns, argv, { sysfs });
  const child = spawn(full[0]!, full.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], ...spawnOpts });
  if (!untracked) {
    spawnedChildren.add(child);
    child.on('exit', () => spawnedChildren.delete(child));
  }
  return child;
}

/** Sends SIGTERM, then SIGKILL after `graceMs`, and resolves when the child has exited. */
export function stopChild(child: ChildProcess, graceMs = 2000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/** Kills process `pid` (SIGTERM, then SIGKILL after `graceMs`) and waits until it is gone. */
export async function stopPid(pid: number, graceMs = 2000): Promise<void> {
  if (!pidAlive(pid)) return;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  const deadline = Date.now() + graceMs;
  while (pidAlive(pid) && Date.now() < deadline) await sleep(25);
  if (pidAlive(pid)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      return;
    }
    const hardDeadline = Date.now() + 2000;
    while (pidAlive(pid) && Date.now() < hardDeadline) await sleep(25);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

// ---- waiting for services -----------------------------------------------------------------------------------

export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
}

/** Is something listening on `port` in `ns`? TCP checks LISTEN sockets, UDP checks bound sockets. */
export async function isListening(ns: string, port: number, proto: 'tcp' | 'udp' = 'tcp'): Promise<boolean> {
  const r = await nsExec(ns, ['ss', '-H', '-n', proto === 'tcp' ? '-lt' : '-lu', `sport = :${port}`], { timeoutMs: 5000 });
  return r.code === 0 && r.stdout.trim().length > 0;
}

/** Waits until a socket listens on `port` inside `ns`; throws after `timeoutMs` (default 10 s). */
export async function waitForPort(ns: string, port: number, proto: 'tcp' | 'udp' = 'tcp', opts: WaitOptions = {}): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await isListening(ns, port, proto)) return;
    if (Date.now() >= deadline) throw new Error(`nothing listening on ${proto}/${port} in netns ${ns} after ${timeoutMs} ms`);
    await sleep(opts.intervalMs ?? 100);
  }
}

/** Waits until a TCP connection from `fromNs` to `host:port` succeeds (a reachability check across namespaces). */
export async function waitForTcp(fromNs: string, host: string, port: number, opts: WaitOptions = {}): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await nsExec(fromNs, ['nc', '-z', '-w', '1', host, String(port)], { timeoutMs: 3000 });
    if (r.code === 0) return;
    if (Date.now() >= deadline) throw new Error(`cannot connect from netns ${fromNs} to ${host}:${port} after ${timeoutMs} ms`);
    await sleep(opts.intervalMs ?? 100);
  }
}

// ---- cleanup ------------------------------------------------------------------------------------------------

/** Kills every tracked child this process spawned into a namespace and deletes every namespace it created. */
export async function cleanupRun(): Promise<{ killed: number; namespaces: string[] }> {
  const children = [...spawnedChildren];
  await Promise.all(children.map((c) => stopChild(c)));
  const namespaces = [...createdNamespaces];
  for (const ns of namespaces) await deleteNetns(ns);
  return { killed: children.length, namespaces };
}
