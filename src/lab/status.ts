// `gitlb lab status`: what the recorded lab looks like now, read from the kernel and /proc (not from the state
// file alone), and its text form.
import { listNetns, netnsPids, nsExec } from './netns.js';
import { isAlive } from './processes.js';
import { routerRouteProto } from './topology.js';
import { DEFAULT_STATE_DIR, fullNs, labAlive, readLabState, statePath, type DaemonReport, type LabState } from './state.js';

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
