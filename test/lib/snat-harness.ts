// Runs inside a test network namespace (like xdp-harness.ts, which it follows) for the SNAT tests: loads the
// LB data plane through openLbDataPlane, then executes steps read as JSON from stdin and prints one JSON
// result per step. Beyond apply/run it can age a NAT entry (rewrite its last-seen time on the
// CLOCK_MONOTONIC clock), list the NAT table, clear it and sweep it, so timeouts are tested without waiting.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import {
  SNAT_MAPS, decodeSnatConfig, decodeSnatRev, encodeSnatConfig, encodeSnatRev, encodeSnatRevKey, listSnat, monotonicNs, sweepSnat, type SnatRevKey,
} from '../../src/bpf/dataplane/snat.js';
import { runPacket, stateFromJson } from './xdp-harness.js';
import { runHarnessScript } from './xdp-lab.js';
import { applyTo } from './converge.js';

export type SnatStep =
  | { op: 'apply'; state: unknown }
  | { op: 'run'; data: string; ifname: string }
  | { op: 'age'; key: SnatRevKey; ageMs: number }
  | { op: 'list' }
  | { op: 'clear' }
  | { op: 'sweep' }
  /** a sweep on a clock `aheadMs` ahead of now, with packet `data` run through XDP between its scan and its deletes
   * (after its first page): a live flow's packet racing the sweep */
  | { op: 'sweepAcross'; aheadMs: number; data: string; ifname: string }
  | { op: 'timeouts'; tcpEstablishedMs: number; tcpClosingMs: number; udpMs: number }
  /** `ip` with these arguments in the harness's namespace (e.g. change a neighbour entry) */
  | { op: 'ip'; args: string[] }
  /** `run` again and again (every 20 ms, at most `withinMs`) until the result has `retval` and, when given, the
   * frame leaves for `dstMac`; the last result, with `tries` */
  | { op: 'runUntil'; data: string; ifname: string; retval: number; dstMac?: string; withinMs: number };

async function main(): Promise<void> {
  const input = JSON.parse(readFileSync(0, 'utf8')) as { pinRoot: string; steps: SnatStep[] };
  const dp = await openLbDataPlane({ pinRoot: input.pinRoot });
  const out: unknown[] = [];
  try {
    for (const step of input.steps) {
      try {
        const obj = dp.object();
        if (step.op === 'apply') out.push({ report: await applyTo(dp, stateFromJson(step.state)) });
        else if (step.op === 'run') out.push(await runPacket(dp, step.data, step.ifname));
        else if (step.op === 'age') {
          const rev = obj!.map(SNAT_MAPS.rev);
          const k = encodeSnatRevKey(step.key);
          const v = rev.lookup(k);
          if (!v) throw new Error(`no NAT entry ${JSON.stringify(step.key)}`);
          const r = decodeSnatRev(Buffer.from(v), step.key.family);
          const now = monotonicNs();
          const ago = BigInt(step.ageMs) * 1_000_000n;
          if (ago >= now) throw new Error(`cannot age by ${step.ageMs} ms: the monotonic clock is only at ${now} ns`);
          r.lastSeenNs = now - ago;
          rev.update(k, encodeSnatRev(r), 'exist');
          out.push({});
        } else if (step.op === 'list') {
          out.push({ nat: listSnat(obj!).map((t) => ({ ...t, rev: { ...t.rev, createdNs: String(t.rev.createdNs), lastSeenNs: String(t.rev.lastSeenNs) } })),
            fwd: obj!.map(SNAT_MAPS.fwd).keys().length });
        } else if (step.op === 'clear') {
          for (const name of [SNAT_MAPS.rev, SNAT_MAPS.fwd]) {
            const m = obj!.map(name);
            for (const k of m.keys()) m.delete(k);
          }
          out.push({});
        } else if (step.op === 'timeouts') {
          // shorter timeouts than the defaults, so ages stay below the machine's uptime (bpf_ktime_get_ns)
          const cfgMap = obj!.map(SNAT_MAPS.config);
          const cfg = decodeSnatConfig(Buffer.from(cfgMap.lookup(Buffer.alloc(4))!));
          const ms = (n: number) => BigInt(n) * 1_000_000n;
          cfg.timeouts = { tcpEstablishedNs: ms(step.tcpEstablishedMs), tcpClosingNs: ms(step.tcpClosingMs), udpNs: ms(step.udpMs) };
          cfgMap.update(Buffer.alloc(4), encodeSnatConfig(cfg));
          out.push({});
        } else if (step.op === 'sweep') {
          out.push({ deleted: await sweepSnat(obj!) });
        } else if (step.op === 'sweepAcross') {
          let during: unknown;
          const deleted = await sweepSnat(obj!, monotonicNs() + BigInt(step.aheadMs) * 1_000_000n, async () => {
            during ??= await runPacket(dp, step.data, step.ifname);
          });
          out.push({ deleted, during });
        } else if (step.op === 'ip') {
          execFileSync('ip', step.args, { stdio: ['ignore', 'ignore', 'pipe'] });
          out.push({});
        } else if (step.op === 'runUntil') {
          const mac = step.dstMac?.replaceAll(':', '');
          const deadline = Date.now() + step.withinMs;
          for (let tries = 1; ; tries++) {
            const r = await runPacket(dp, step.data, step.ifname);
            if ((r.retval === step.retval && (!mac || r.data.startsWith(mac))) || Date.now() > deadline) {
              out.push({ ...r, tries });
              break;
            }
            await new Promise((res) => setTimeout(res, 20));
          }
        }
      } catch (e) {
        out.push({ error: String((e as Error).stack ?? e) });
      }
    }
  } finally {
    dp.close();
  }
  process.stdout.write(JSON.stringify(out));
}

/** Runs this harness in namespace `ns` with `input` on stdin. */
export function runSnatHarness(ns: string, input: { pinRoot: string; steps: SnatStep[] }, timeoutMs = 90_000,
  opts: { cpu?: number } = {}): Promise<any[]> {
  return runHarnessScript(new URL(import.meta.url).pathname, ns, input, timeoutMs, opts);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
