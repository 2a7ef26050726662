// What the XDP benches share: the xdp_md context for BPF_PROG_TEST_RUN, the median-of-runs measurement that
// checks every measured iteration took the intended path, and loading a restore harness (restore.c, snat_vary.c:
// both have an `original` packet map and a `target` program array).
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap, BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';

/** The packet length the restore harnesses are compiled for (BENCH_PKT_LEN in restore_harness.h). */
export const HARNESS_PKT_LEN = 54;

export const u32 = (n: number): Buffer => { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; };
export const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** An xdp_md for BPF_PROG_TEST_RUN: packet length and ingress ifindex of `ifname` (looked up in our namespace). */
export function xdpContextFor(ifname: string): (len: number) => Buffer {
  const [link] = JSON.parse(execFileSync('ip', ['-j', 'link', 'show', 'dev', ifname]).toString()) as Array<{ ifindex: number }>;
  return (len) => {
    const b = Buffer.alloc(24);
    b.writeUInt32LE(len, 4);
    b.writeUInt32LE(link!.ifindex, 12);
    return b;
  };
}

export interface Measurer {
  /** Median ns/run of `prog` on `data` over `runs` runs of `repeat`; throws unless every run returned `action`
   * and, with `counterName`, that counter (each of them, for a list) moved by exactly `repeat` (every iteration
   * took the measured path). */
  measure(prog: BpfProgram, data: Buffer, action: number, repeat: number, counterName?: string | string[],
    beforeRun?: () => void): Promise<{ ns: number; runs: number[] }>;
}

type Counter = (name: string) => Promise<number> | number;

/** One BPF_PROG_TEST_RUN of `repeat` iterations, checked as Measurer.measure describes; kernel ns per iteration. */
export async function runChecked(prog: BpfProgram, data: Buffer, ctxIn: Buffer, action: number, repeat: number,
  counter: Counter, counterName?: string | string[]): Promise<number> {
  const names = counterName === undefined ? [] : Array.isArray(counterName) ? counterName : [counterName];
  const before = await Promise.all(names.map((n) => counter(n)));
  const res = prog.testRun({ data, repeat, ctxIn });
  if (res.retval !== action) throw new Error(`returned ${res.retval}, expected ${action}`);
  for (const [i, n] of names.entries()) {
    const moved = (await counter(n)) - before[i]!;
    if (moved !== repeat) throw new Error(`${n} moved by ${moved}, expected ${repeat}: iterations took another path`);
  }
  return res.durationNs;
}

export function measurer(opts: { runs: number; ctxFor: (len: number) => Buffer; counter: Counter }): Measurer {
  return {
    async measure(prog, data, action, repeat, counterName, beforeRun) {
      const runs: number[] = [];
      for (let r = 0; r < opts.runs; r++) {
        beforeRun?.();
        runs.push(await runChecked(prog, data, opts.ctxFor(data.length), action, repeat, opts.counter, counterName));
      }
      return { ns: median(runs), runs };
    },
  };
}

/** Points a restore harness at `target`, restoring `data` before every iteration. */
export function loadHarness(o: BpfObject, data: Buffer, target: BpfProgram): void {
  if (data.length !== HARNESS_PKT_LEN) throw new Error(`the harnesses are built for ${HARNESS_PKT_LEN}-byte packets`);
  o.map('original').update(u32(0), data);
  o.map('target').update(u32(0), u32(target.fd));
}

/** The sizes of the maps pinned under `pinRoot` (links and programs skipped): another build loaded over exactly these
 * maps must be given them, or libbpf would create its maps at their default sizes and refuse the pins. */
export function pinnedMapSizes(pinRoot: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of readdirSync(pinRoot)) {
    try {
      const m = BpfMap.open(join(pinRoot, name));
      out[name] = m.maxEntries;
      m.close();
    } catch {
      /* a link or program pin, not a map */
    }
  }
  return out;
}

/**
 * Another build of xdp_lb loaded over the maps pinned under `pinRoot`, at their sizes (pinnedMapSizes). A build
 * without one of those maps refuses its size override, which is then dropped. A map of another layout is replaced
 * by one of the build's own (replaceIncompatiblePins): a scratch map loses nothing, a state map starts empty, which
 * the benches' path checks (or their refill) deal with.
 */
export async function loadBuildOver(path: string, pinRoot: string, sizes = pinnedMapSizes(pinRoot)): Promise<BpfObject> {
  const own = { ...sizes };
  for (;;) {
    try {
      return await BpfObject.load(path, { pinRoot, reusePinnedMaps: true, replaceIncompatiblePins: true, mapMaxEntries: own });
    } catch (e) {
      const missing = /map '([^']+)' not found/.exec((e as Error).message)?.[1];
      if (!missing || !(missing in own)) throw e;
      delete own[missing];
    }
  }
}

/** The machine's load averages (1, 5, 15 min), as the benches print them beside their figures. */
export const loadavg = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
