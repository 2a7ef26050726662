// Test network namespace for the XDP table tests and bench: two veth pairs with fixed MACs, addresses,
// permanent neighbours and a route via a gateway, so bpf_fib_lookup gives deterministic next hops.
// Only documentation addresses; everything is created under the per-run prefix and removed by teardown().
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';

export const LAB = {
  lbA: { name: 'lbA', mac: '02:00:00:00:0a:01', v4: '198.51.100.1', v6: '2001:db8:2::1' },
  lbC: { name: 'lbC', mac: '02:00:00:00:0c:01', v4: '192.0.2.129' },
  gwMac: '02:00:00:00:01:fe',
  clientMac: '02:00:00:00:00:c1',
  neighbours: {
    '198.51.100.11': '02:00:00:00:01:11',
    '198.51.100.12': '02:00:00:00:01:12',
    '198.51.100.13': '02:00:00:00:01:13',
    '198.51.100.254': '02:00:00:00:01:fe',
    '2001:db8:2::11': '02:00:00:00:02:11',
    '2001:db8:2::12': '02:00:00:00:02:12',
  } as Record<string, string>,
  lbCNeighbours: { '192.0.2.140': '02:00:00:00:03:40' } as Record<string, string>,
} as const;

function ip(ns: string | null, ...args: string[]): void {
  execFileSync('ip', ns ? ['-n', ns, ...args] : args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

export function labNames(tag: string): { ns: string; pinRoot: string } {
  const ns = `glb${process.pid}-${tag}`;
  return { ns, pinRoot: `/sys/fs/bpf/${ns}` };
}

export function setupLab(tag: string): { ns: string; pinRoot: string } {
  const { ns, pinRoot } = labNames(tag);
  if (execFileSync('stat', ['-f', '-c', '%T', '/sys/fs/bpf']).toString().trim() !== 'bpf_fs')
    execFileSync('mount', ['-t', 'bpf', 'bpf', '/sys/fs/bpf']);
  ip(null, 'netns', 'add', ns);
  try {
    ip(ns, 'link', 'add', 'lbA', 'address', LAB.lbA.mac, 'type', 'veth', 'peer', 'name', 'lbB');
    ip(ns, 'link', 'add', 'lbC', 'address', LAB.lbC.mac, 'type', 'veth', 'peer', 'name', 'lbD');
    for (const d of ['lo', 'lbA', 'lbB', 'lbC', 'lbD']) ip(ns, 'link', 'set', d, 'up');
    ip(ns, 'addr', 'add', `${LAB.lbA.v4}/24`, 'dev', 'lbA');
    ip(ns, 'addr', 'add', `${LAB.lbA.v6}/64`, 'dev', 'lbA', 'nodad');
    ip(ns, 'addr', 'add', `${LAB.lbC.v4}/25`, 'dev', 'lbC');
    for (const [a, m] of Object.entries(LAB.neighbours)) ip(ns, 'neigh', 'replace', a, 'lladdr', m, 'dev', 'lbA', 'nud', 'permanent');
    for (const [a, m] of Object.entries(LAB.lbCNeighbours)) ip(ns, 'neigh', 'replace', a, 'lladdr', m, 'dev', 'lbC', 'nud', 'permanent');
    ip(ns, 'route', 'add', '203.0.113.128/25', 'via', '198.51.100.254', 'dev', 'lbA');
    // bpf_fib_lookup refuses to forward when forwarding is off
    execFileSync('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']);
    mkdirSync(pinRoot, { recursive: true });
  } catch (e) {
    teardownLab(tag);
    throw e;
  }
  return { ns, pinRoot };
}

export function teardownLab(tag: string): void {
  const { ns, pinRoot } = labNames(tag);
  try { ip(null, 'netns', 'del', ns); } catch { /* already gone */ }
  rmSync(pinRoot, { recursive: true, force: true });
}

/** Runs test/lib/xdp-harness.ts in the network namespace `ns` with `input` on stdin; resolves with its parsed output. */
export function runHarness(ns: string, input: unknown, timeoutMs = 90_000): Promise<any[]> {
  return runHarnessScript(new URL('./xdp-harness.ts', import.meta.url).pathname, ns, input, timeoutMs);
}

/** Runs a harness script (tsx) in namespace `ns`, JSON `input` on stdin, JSON array expected on stdout. */
export function runHarnessScript(script: string, ns: string, input: unknown, timeoutMs: number,
  opts: { cpu?: number } = {}): Promise<any[]> {
  const name = script.split('/').pop();
  return new Promise((resolve, reject) => {
    // nsenter --net (not `ip netns exec`): keeps the host's /sys/fs/bpf mount, so pins outlive the process; with
    // `cpu`, the harness runs on that CPU only (per-CPU maps, such as caches, then hold across its steps)
    const argv = ['nsenter', `--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx', script];
    const cmd = opts.cpu === undefined ? argv : ['taskset', '-c', String(opts.cpu), ...argv];
    const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${name} timed out; stderr: ${err}`)); }, timeoutMs);
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`${name} exited ${code}: ${err}`));
      try { resolve(JSON.parse(out)); } catch { reject(new Error(`${name} output not JSON: ${out.slice(0, 500)} ${err}`)); }
    });
    child.stdin.end(JSON.stringify(input));
  });
}

/** One result of the harness's `run` op. */
export interface CaseResult { retval: number; data: string; counters: Record<string, number>; error?: string }

/**
 * A table of packet cases over several desired states, in one harness run in a fresh lab namespace: each time the
 * state a case names differs from the last, that state is applied and read back live (`lives[state]`); the
 * connection table is cleared before every case that does not ask to keep it (`keepCt`). Resolves with each case's
 * result, every apply's answer in order, and the live read-back per state.
 */
export function runStateCases<C extends { state: string; keepCt?: boolean; input: Buffer }>(
  tag: string, cases: readonly C[], stateJson: (state: C['state']) => unknown,
): Promise<{ byCase: Map<C, CaseResult>; applies: any[]; lives: Record<string, any> }> {
  const { ns, pinRoot } = setupLab(tag);
  const steps: unknown[] = [];
  const index: Array<C | 'apply' | string | null> = [];
  let current: string | undefined;
  for (const c of cases) {
    if (c.state !== current) {
      steps.push({ op: 'apply', state: stateJson(c.state) }, { op: 'live' });
      index.push('apply', `live:${c.state}`);
      current = c.state;
    }
    if (!c.keepCt) { steps.push({ op: 'ctClear' }); index.push(null); }
    steps.push({ op: 'run', data: c.input.toString('hex'), ifname: 'lbA' });
    index.push(c);
  }
  return runHarness(ns, { pinRoot, steps }).then((out) => {
    const byCase = new Map<C, CaseResult>();
    const applies: any[] = [];
    const lives: Record<string, any> = {};
    out.forEach((r, i) => {
      const what = index[i];
      if (what === 'apply') applies.push(r);
      else if (typeof what === 'string') lives[what.slice(5)] = r;
      else if (what) byCase.set(what, r);
    });
    return { byCase, applies, lives };
  });
}
