// Runs inside a test network namespace (spawned with `ip netns exec`): loads the LB data plane through
// openLbDataPlane, then executes the steps read as JSON from stdin (apply a desired state, clear the
// connection table, BPF_PROG_TEST_RUN a packet) and prints one JSON result per step. The ava test in the
// host namespace builds the cases and checks the results; this process only has to be in the namespace
// because bpf_fib_lookup resolves next hops in the caller's namespace.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import type { DesiredState } from '../../src/render/state.js';
import { applyTo } from './converge.js';

type LbDataPlane = Awaited<ReturnType<typeof openLbDataPlane>>;

export type HarnessStep =
  | { op: 'apply'; state: unknown }
  | { op: 'ctClear' }
  | { op: 'run'; data: string; ifname: string }
  | { op: 'counters' }
  /** back-to-back runs without reading counters in between (timing-sensitive paths such as the rate guard);
   * answers the return values, each output's destination MAC, the counters that changed and the connection-table
   * size afterwards */
  | { op: 'runMany'; data: string[]; ifname: string }
  | { op: 'live' };

export function stateToJson(s: DesiredState): unknown {
  return { ...s, services: s.services.map((x) => ({ ...x, ring: [...x.ring] })) };
}

export function stateFromJson(j: any): DesiredState {
  return { ...j, services: j.services.map((x: any) => ({ ...x, ring: Uint32Array.from(x.ring) })) };
}

/** ifindex via netlink (`ip`), which follows our network namespace (sysfs would show the host's). */
function ifindexOf(name: string): number {
  const [link] = JSON.parse(execFileSync('ip', ['-j', 'link', 'show', 'dev', name]).toString()) as Array<{ ifindex: number }>;
  return link!.ifindex;
}

function xdpMd(len: number, ifindex: number): Buffer {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(0, 0);
  b.writeUInt32LE(len, 4);
  b.writeUInt32LE(ifindex, 12);
  return b;
}

const macText = (b: Buffer) => [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');

type Counters = Awaited<ReturnType<LbDataPlane['counters']>>;

/** The numeric counters that moved, by how much. */
function changed(before: Counters, after: Counters): Record<string, number> {
  const delta: Record<string, number> = {};
  for (const [k, v] of Object.entries(after))
    if (typeof v === 'number' && v !== before[k]) delta[k] = v - ((before[k] as number) ?? 0);
  return delta;
}

/** BPF_PROG_TEST_RUN of xdp_lb on one packet (hex) as if received on `ifname`; the counters that changed. */
export async function runPacket(dp: LbDataPlane, hex: string, ifname: string)
  : Promise<{ retval: number; data: string; counters: Record<string, number> }> {
  const data = Buffer.from(hex, 'hex');
  const ifindex = ifindexOf(ifname);
  const before = await dp.counters();
  const r = dp.object()!.program('xdp_lb').testRun({ data, ctxIn: xdpMd(data.length, ifindex) });
  return { retval: r.retval, data: r.data.toString('hex'), counters: changed(before, await dp.counters()) };
}

async function runMany(dp: LbDataPlane, hexes: string[], ifname: string)
  : Promise<{ retvals: number[]; dstMacs: string[]; counters: Record<string, number>; ctEntries: number }> {
  const ifindex = ifindexOf(ifname);
  const prog = dp.object()!.program('xdp_lb');
  const packets = hexes.map((h) => Buffer.from(h, 'hex'));
  const before = await dp.counters();
  const runs = packets.map((data) => prog.testRun({ data, ctxIn: xdpMd(data.length, ifindex) }));
  return { retvals: runs.map((r) => r.retval), dstMacs: runs.map((r) => macText(r.data.subarray(0, 6))),
    counters: changed(before, await dp.counters()), ctEntries: dp.object()!.map('lb_conntrack').keys().length };
}

async function main(): Promise<void> {
  const input = JSON.parse(readFileSync(0, 'utf8')) as { pinRoot: string; steps: HarnessStep[] };
  const dp = await openLbDataPlane({ pinRoot: input.pinRoot });
  const out: unknown[] = [];
  try {
    for (const step of input.steps) {
      try {
        if (step.op === 'apply') out.push({ report: await applyTo(dp, stateFromJson(step.state)) });
        else if (step.op === 'ctClear') {
          const ct = dp.object()!.map('lb_conntrack');
          for (const k of ct.keys()) ct.delete(k);
          out.push({});
        } else if (step.op === 'counters') out.push({ counters: await dp.counters() });
        else if (step.op === 'runMany') out.push(await runMany(dp, step.data, step.ifname));
        else if (step.op === 'live') {
          const l = await dp.readLive({ tables: true });
          out.push({ live: { ...l, services: l.services.map((s) => ({ ...s, ring: [...s.ring!] })) } });
        } else if (step.op === 'run') out.push(await runPacket(dp, step.data, step.ifname));
      } catch (e) {
        out.push({ error: String((e as Error).stack ?? e) });
      }
    }
  } finally {
    dp.close();
  }
  process.stdout.write(JSON.stringify(out));
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
