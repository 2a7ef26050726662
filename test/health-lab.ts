// Test plumbing shared by the health tests: config models, and real processes in namespaces (a HealthChecker
// runner in the lb namespace, backend servers in the backend namespace). Not a test file itself.
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { rmSync } from 'node:fs';
import { nsSpawn, stopChild } from '../src/lab/netns.js';
import { labUp, labDown, labNs, type LabState } from '../src/lab/lab.js';
import type { ConfigModel, HealthCheckSpec, RealSpec, ServiceDoc } from '../src/render/model.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const node = process.execPath;

export function service(name: string, healthCheck: Partial<HealthCheckSpec> & { type: HealthCheckSpec['type'] },
                        reals: (string | Partial<RealSpec> & { address: string })[], port = 80): ServiceDoc {
  return {
    apiVersion: 'gitlb/v1',
    kind: 'Service',
    metadata: { name },
    source: { file: `services/${name}.yaml`, line: 1, col: 1 },
    spec: {
      vip: '203.0.113.10',
      ports: [{ port, protocol: 'TCP' }],
      dispatch: { mode: 'dsr', encap: 'l2' },
      hash: { sourcePort: true },
      healthCheck: { intervalMs: 200, timeoutMs: 150, rise: 2, fall: 3, ...healthCheck },
      reals: reals.map((r) => (typeof r === 'string' ? { address: r, weight: 1, state: 'active' } : { weight: 1, state: 'active', ...r })),
    },
  };
}

export function model(services: ServiceDoc[], lbNodes: string[] = ['lb1'], health?: ConfigModel['cluster']['spec']['health']): ConfigModel {
  return {
    cluster: {
      apiVersion: 'gitlb/v1',
      kind: 'Cluster',
      metadata: { name: 'test' },
      source: { file: 'cluster.yaml', line: 1, col: 1 },
      spec: {
        maglev: { tableSize: 251, seed: 'AAAAAAAAAAAAAAAA' },
        conntrack: { maxEntries: 1024, newFlowRate: 0 },
        status: { branch: 'status' },
        rollback: { policy: 'auto' },
        ...(health && { health }),
      },
    },
    nodes: lbNodes.map((n) => ({
      apiVersion: 'gitlb/v1' as const,
      kind: 'Node' as const,
      metadata: { name: n },
      source: { file: `nodes/${n}.yaml`, line: 1, col: 1 },
      spec: { role: 'lb' as const, interface: 'eth0', allowedVips: ['203.0.113.0/24'], addresses: [], mtu: 1500 },
    })),
    services: [...services].sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1)),
  };
}

/** The message of a daemon log line, whether it is a JSON line (pino, the default off a terminal) or plain text. */
export function logMessage(line: string): string {
  if (!line.startsWith('{')) return line;
  try {
    const msg = (JSON.parse(line) as { msg?: unknown }).msg;
    return typeof msg === 'string' ? msg : '';
  } catch {
    return line;
  }
}

/** Waits for lines of a child's stdout; `next(pred)` resolves with the first (future or buffered) matching line. */
export class LineTap {
  private readonly buffered: string[] = [];
  private readonly waiters: { pred: (l: string) => boolean; resolve: (l: string) => void }[] = [];
  /** `stream`: the daemon logs to stderr (pino), the test helpers print their events on stdout. */
  constructor(child: ChildProcess, stream: 'stdout' | 'stderr' = 'stdout') {
    createInterface({ input: child[stream]! }).on('line', (line) => {
      const i = this.waiters.findIndex((w) => w.pred(line));
      if (i >= 0) this.waiters.splice(i, 1)[0]!.resolve(line);
      else this.buffered.push(line);
    });
  }
  all(): string[] {
    return [...this.buffered];
  }
  next(pred: (l: string) => boolean, timeoutMs: number, what: string): Promise<string> {
    const i = this.buffered.findIndex(pred);
    if (i >= 0) return Promise.resolve(this.buffered.splice(i, 1)[0]!);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const j = this.waiters.indexOf(waiter);
        if (j >= 0) this.waiters.splice(j, 1);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const waiter = { pred, resolve: (l: string) => (clearTimeout(timer), resolve(l)) };
      this.waiters.push(waiter);
    });
  }
}

export interface ChangeEvent {
  type: 'change';
  service: string;
  address: string;
  from: string;
  to: string;
  at: string;
  observedAt: number;
  result: { ok: boolean; detail: string; at: number; durationMs: number };
}

export class Backend {
  private constructor(readonly child: ChildProcess, readonly lines: LineTap, readonly startedAt: number) {}
  static async start(ns: string, kind: 'tcp' | 'http', port: number): Promise<Backend> {
    const child = nsSpawn(ns, [node, '--import', 'tsx', path.join(here, 'health-backend.ts'), kind, String(port)]);
    const lines = new LineTap(child);
    await lines.next((l) => l === 'listening', 15_000, `${kind} backend on ${port}`);
    return new Backend(child, lines, Date.now());
  }
  /** SIGKILL, as a crashing backend; resolves once the process is gone, with the time it was killed. */
  async kill(): Promise<number> {
    const at = Date.now();
    const gone = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGKILL');
    await gone;
    return at;
  }
  stop(): Promise<void> {
    return stopChild(this.child, 500);
  }
}

export class Runner {
  private constructor(readonly child: ChildProcess, readonly lines: LineTap) {}
  /** `vipInterface`: steer via: vip checks through the TC egress program attached to that interface. */
  static async start(ns: string, m: ConfigModel, maxInFlight = 64, vipInterface?: string): Promise<Runner> {
    const child = nsSpawn(ns, [node, '--import', 'tsx', path.join(here, 'health-runner.ts'), String(maxInFlight), ...(vipInterface ? [vipInterface] : [])], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const lines = new LineTap(child);
    child.stdin!.write(JSON.stringify(m) + '\n');
    await lines.next((l) => l.includes('"type":"ready"'), 15_000, 'health runner ready');
    return new Runner(child, lines);
  }
  async change(service: string, address: string, to: string, timeoutMs: number): Promise<ChangeEvent> {
    const line = await this.lines.next((l) => {
      if (!l.includes('"type":"change"')) return false;
      const e = JSON.parse(l) as ChangeEvent;
      return e.service === service && e.address === address && e.to === to;
    }, timeoutMs, `${service}/${address} -> ${to}`);
    return JSON.parse(line) as ChangeEvent;
  }
  /** Change events not consumed by change() so far. */
  pendingChanges(): ChangeEvent[] {
    return this.lines.all().filter((l) => l.includes('"type":"change"')).map((l) => JSON.parse(l) as ChangeEvent);
  }
  async update(m: ConfigModel): Promise<void> {
    this.child.stdin!.write(`update ${JSON.stringify(m)}\n`);
    await this.lines.next((l) => l.includes('"type":"updated"'), 5000, 'update');
  }
  async snapshot(): Promise<{ snapshot: any; observations: any; replyMs: number }> {
    this.child.stdin!.write('snapshot\n');
    return JSON.parse(await this.lines.next((l) => l.includes('"type":"snapshot"'), 5000, 'snapshot'));
  }
  /** checker.suspect(address): how many checks it moved forward. */
  async suspect(address: string): Promise<number> {
    this.child.stdin!.write(`suspect ${address}\n`);
    return (JSON.parse(await this.lines.next((l) => l.includes('"type":"suspected"'), 5000, 'suspect')) as { pulled: number }).pulled;
  }
  stop(): Promise<void> {
    this.child.stdin!.end();
    return stopChild(this.child, 2000);
  }
}

/**
 * The end-to-end health lab (client, router, lb-1, DSR backends with the VIP on lo, from the config in `configDir`):
 * lb-1 runs test/health-lb-runner.ts (real XDP data plane + HealthService; `runnerArgs` after its four), the client
 * test/health-client.ts against vip:80. stop() ends both, takes the lab down and removes `work` and the pins.
 */
export async function startE2eLab(configDir: string, work: string, name: string, vip: string, runnerArgs: string[] = []) {
  const state: LabState = await labUp({ configDir, stateDir: path.join(work, 'lab'), daemons: false, vipsOnLo: true, clientCount: 1 });
  const pinRoot = `/sys/fs/bpf/gitlb-test-${state.prefix}${name}`;
  const lb = nsSpawn(labNs(state, 'lb-1'), [node, '--import', 'tsx', path.join(here, 'health-lb-runner.ts'), configDir, 'lb-1', 'eth0', pinRoot, ...runnerArgs],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  const client = nsSpawn(labNs(state, 'client'), [node, '--import', 'tsx', path.join(here, 'health-client.ts'), vip, '80'],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  return {
    state, pinRoot, lb, lbOut: new LineTap(lb), client, clientOut: new LineTap(client),
    async stop() {
      client.stdin!.end();
      lb.stdin!.end();
      await Promise.all([stopChild(client, 2000), stopChild(lb, 3000)]);
      await labDown(state.stateDir);
      rmSync(work, { recursive: true, force: true });
      rmSync(pinRoot, { recursive: true, force: true });
    },
  };
}
