// Shared fixture of the end-to-end tests: one lab (unique namespace prefix from its anchor pid, private state
// directory) built from sample-config-repo/ with a `gitlb run` daemon on every node, torn down in teardown.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_CONFIG_DIR, labDown, labUp, labNs, type LabState } from '../src/lab/lab.js';
import { nsArgv, nsExec, run, sleep } from '../src/lab/netns.js';
import { execGroup } from '../src/demo/shell.js';
import { labView, loadModel, type LabView } from '../src/demo/lab-view.js';
import { appliedRevision, waitForLocalApplied, waitForStatuses } from '../src/demo/status-watch.js';
import { renderDesiredState } from '../src/render/desired.js';
import { ringSlot } from '../src/bpf/dataplane/flow-hash.js';
import { VIP_PROBE_PORTS } from '../src/reconciler/health/checker.js';
import type { ConfigModel } from '../src/render/model.js';
import type { DesiredState } from '../src/render/state.js';
import type { FlowRecord } from '../src/demo/traffic.js';

export interface E2eLab {
  state: LabState;
  view: LabView;
  scratch: string;
  /** A working clone of the lab's config repository (pushes go to the lab Git server over HTTP). */
  clone: string;
  close(): Promise<void>;
}

const GIT_ENV = {
  GIT_AUTHOR_NAME: 'e2e',
  GIT_AUTHOR_EMAIL: 'e2e@gitlb.invalid',
  GIT_COMMITTER_NAME: 'e2e',
  GIT_COMMITTER_EMAIL: 'e2e@gitlb.invalid',
  GIT_TERMINAL_PROMPT: '0',
};

/**
 * `routing`: 'static' (the default here) keeps static ECMP routes on the router even though the sample config has
 * BGP settings, because these tests steer the router's routes themselves (routeVipsVia); 'bgp' runs BIRD on the lb
 * nodes and, on the router, BIRD or FRR (`router`). `editConfig` changes a copy of sample-config-repo/ (in the scratch
 * directory) before the lab is built from it.
 */
export async function startE2eLab(log: (s: string) => void,
  opts: { routing?: 'bgp' | 'static'; router?: 'bird' | 'frr'; daemonArgs?: (scratch: string) => string[]; editConfig?: (dir: string) => void } = {}): Promise<E2eLab> {
  const scratch = mkdtempSync(join(tmpdir(), `gitlb-e2e-${process.pid}-`));
  let configDir: string | undefined;
  if (opts.editConfig) {
    configDir = join(scratch, 'config');
    cpSync(DEFAULT_CONFIG_DIR, configDir, { recursive: true, filter: (src) => !src.split('/').includes('.git') });
    opts.editConfig(configDir);
  }
  const stateDir = join(scratch, 'lab');
  const close = async () => {
    await labDown(stateDir).catch(() => {});
    rmSync(scratch, { recursive: true, force: true });
  };
  try {
    const state = await labUp({ stateDir, log, routing: opts.routing ?? 'static', ...(configDir && { configDir }), ...(opts.router && { router: opts.router }),
      ...(opts.daemonArgs && { daemonArgs: opts.daemonArgs(scratch) }) });
    const bad = state.daemons.filter((d) => !d.started);
    if (bad.length) throw new Error(`daemons not running: ${bad.map((d) => `${d.node}: ${d.reason}`).join('; ')}`);
    const view = labView(state);
    const main = (await run(['git', '--git-dir', state.git!.bare, 'rev-parse', 'main'])).stdout.trim();
    // Ready = every daemon applied the first revision (its local record; status pushes can lag under load),
    // and both lb nodes' status files on the status branch say so (the digest test reads them).
    const local = await waitForLocalApplied(stateDir, state.plan.nodes.map((n) => n.name), main, 90_000);
    if (!local.ok) throw new Error(`daemons of ${local.missing.join(', ')} did not apply ${main} within 90 s`);
    const w = await waitForStatuses(state.git!.bare, view.lbNodes, appliedRevision(main), 90_000);
    if (!w.ok) throw new Error(`lb nodes did not report ${main} applied on the status branch within 90 s`);
    const clone = join(scratch, 'clone');
    await gitIn(view, scratch, ['clone', '--quiet', state.git!.repoUrl, clone]);
    return { state, view, scratch, clone, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** git, run in the router namespace (on the lab segment, it reaches the lab Git server over HTTP). */
export async function gitIn(view: LabView, cwd: string, args: string[]): Promise<string> {
  const r = await execGroup(nsArgv(view.routerNs, ['git', ...args]), { cwd, env: { ...process.env, ...GIT_ENV }, timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`git ${args.join(' ')} failed: ${r.stderr.trim()}`);
  return r.stdout;
}

/** Edits a file in the clone, commits and pushes; returns the new revision. */
export async function commitAndPush(lab: E2eLab, file: string, edit: (text: string) => string, message: string): Promise<string> {
  const path = join(lab.clone, file);
  writeFileSync(path, edit(readFileSync(path, 'utf8')));
  await gitIn(lab.view, lab.clone, ['commit', '--quiet', '-am', message]);
  await gitIn(lab.view, lab.clone, ['push', '--quiet', 'origin', 'main']);
  return (await gitIn(lab.view, lab.clone, ['rev-parse', 'HEAD'])).trim();
}

/** Waits until the nodes' daemons applied `rev` (their own record, written right after the apply). */
export async function waitApplied(lab: E2eLab, rev: string, nodes: string[], timeoutMs = 90_000): Promise<void> {
  const w = await waitForLocalApplied(lab.state.stateDir, nodes, rev, timeoutMs);
  if (!w.ok) throw new Error(`${rev.slice(0, 12)} not applied on ${w.missing.join(',')} within ${timeoutMs} ms`);
}

export async function cloneModel(lab: E2eLab): Promise<ConfigModel> {
  return loadModel(lab.clone);
}

/** Predicts the backend node of a new flow from the rendered Maglev table, as the XDP program picks it. */
export function predictor(desired: DesiredState, view: LabView) {
  return (vip: string, port: number, proto: 'TCP' | 'UDP', rec: Pick<FlowRecord, 'src' | 'sport'>): string | null => {
    const l = desired.vips.find((v) => v.vip === vip && v.port === port && v.protocol === proto);
    if (!l) return null;
    const svc = desired.services.find((s) => s.id === l.serviceId)!;
    const slot = ringSlot({ src: rec.src, dst: vip, sport: rec.sport, dport: port, proto: proto === 'TCP' ? 6 : 17 }, l.hashSourcePort, desired.hashSeed, svc.tableSize);
    const realId = svc.ring[slot]!;
    const real = desired.reals.find((r) => r.id === realId);
    return real ? (view.nodeByAddress.get(real.address) ?? real.address) : null;
  };
}

export function render(model: ConfigModel, node: string): DesiredState {
  return renderDesiredState(model, node);
}

/** Points the router's route for the IPv4 VIP range at the given lb nodes only (all of them: ECMP again). */
export async function routeVipsVia(lab: E2eLab, lbNodes: string[]): Promise<void> {
  const router = labNs(lab.state, 'router');
  const m = lab.state.plan.multipath.find((x) => !x.dest.includes(':'))!;
  const hops = m.hops.filter((h) => lbNodes.some((n) => lab.state.plan.nodes.find((x) => x.name === n)!.addresses.includes(h.via)));
  const args = hops.length === 1
    ? ['ip', 'route', 'replace', m.dest, 'via', hops[0]!.via, 'dev', hops[0]!.dev]
    : ['ip', 'route', 'replace', m.dest, ...hops.flatMap((h) => ['nexthop', 'via', h.via, 'dev', h.dev])];
  const r = await nsExec(router, args);
  if (r.code !== 0) throw new Error(`${args.join(' ')}: ${r.stderr}`);
}

/**
 * Counts, on the switch ports of the lb nodes, frames whose source is a VIP (replies) and whose destination is a
 * VIP (requests) while `during` runs: DSR replies must never reach an lb node.
 */
export async function captureAtLbPorts<T>(
  lab: E2eLab,
  vip: string,
  during: () => Promise<T>,
  lbNodes?: string[],
): Promise<{ result: T; toVip: number; fromVip: number }> {
  const sw = labNs(lab.state, 'sw');
  const ports = lab.state.plan.nodes.filter((n) => n.role === 'lb' && (!lbNodes || lbNodes.includes(n.name))).map((n) => n.switchPort);
  const { spawn } = await import('node:child_process');
  const procs = ports.map((p) => {
    // not the lb nodes' own via: vip health probes (and their answers), which use the reserved source ports
    const probes = `portrange ${VIP_PROBE_PORTS.min}-${VIP_PROBE_PORTS.min + VIP_PROBE_PORTS.count - 1}`;
    const argv = nsArgv(sw, ['tcpdump', '-l', '-n', '-i', p, `host ${vip} and not ${probes}`]);
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let ready: () => void;
    const listening = new Promise<void>((r) => (ready = r));
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => {
      if (d.toString().includes('listening on')) ready();
    });
    return { child, lines: () => out.split('\n').filter(Boolean), listening: Promise.race([listening, sleep(5000)]) };
  });
  await Promise.all(procs.map((p) => p.listening));
  try {
    const result = await during();
    await sleep(300);
    let toVip = 0;
    let fromVip = 0;
    for (const p of procs) {
      for (const line of p.lines()) {
        const m = /IP6? (\S+) > (\S+):/.exec(line);
        if (!m) continue;
        if (m[1]!.startsWith(`${vip}.`)) fromVip++;
        if (m[2]!.startsWith(`${vip}.`)) toVip++;
      }
    }
    return { result, toVip, fromVip };
  } finally {
    for (const p of procs) p.child.kill('SIGTERM');
  }
}
