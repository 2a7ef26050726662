// Runs inside a test network namespace (like xdp-harness.ts): the hostile-packet suite for xdp_lb. Applies the
// desired state read from stdin, opens a SNAT flow, then runs every truncation, named mutation and seeded bit flip
// of every base frame, and every frame of the given corpora (other projects' packets: test/netns/hostile-foreign.test.ts),
// through BPF_PROG_TEST_RUN, checks each output (test/lib/hostile.ts) and the counters per batch, and prints one
// JSON summary per batch. Generation and checks run here so 10,000s of frames never cross a pipe.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { stateFromJson } from './xdp-harness.js';
import { IPPROTO, frame, icmpv4, ipPacket, ipv4Header } from './packets.js';
import { bitFlips, l3Offset, mutations, outputProblems, tally, truncations } from './hostile.js';
import { applyTo } from './converge.js';
import { CaptureProgram } from '../../src/bpf/capture/index.js';
import { NO_FILTER } from '../../src/bpf/capture/filter.js';
import { CAPTURE_SNAPLEN } from '../../src/bpf/capture/record.js';

export interface HostileInput {
  pinRoot: string;
  state: unknown;
  ifname: string;
  mtu: number;
  /** hex frames by kind: each is truncated, mutated and bit-flipped (none: no generated batches) */
  kinds: Record<string, string>;
  /** a UDP request (client:sport -> snat VIP:53) whose SNAT port the reply and ICMP-error kinds then use */
  snatSyn: string;
  snat: { address: string; mac: string; real: string; realMac: string };
  flips: number;
  seed: number;
  /** the SNAT port the flow of `snatSyn` must have (a corpus built for it was opened by an earlier run) */
  snatPort?: number;
  /** frames run as they are, one batch each: [name, hex] */
  corpora?: Array<{ batch: string; frames: Array<[string, string]> }>;
  /** run xdp_lb_capture.o (gitlb capture's build, over the same maps, capturing every frame) instead of xdp_lb.o, and
   * check each frame's record against the run: one record, the verdict returned, the frame as received and as it left */
  capture?: boolean;
}

export interface BatchSummary {
  batch: string;
  runs: number;
  actions: Record<string, number>;
  counters: Record<string, number>;
  problems: string[];
}

const ACTIONS: Record<number, string> = { 1: 'drop', 2: 'pass', 3: 'tx', 4: 'redirect' };

function ifindexOf(name: string): number {
  const [link] = JSON.parse(execFileSync('ip', ['-j', 'link', 'show', 'dev', name]).toString()) as Array<{ ifindex: number }>;
  return link!.ifindex;
}

function ctxFor(len: number, ifindex: number): Buffer {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(len, 4);
  b.writeUInt32LE(ifindex, 12);
  return b;
}

/** An IPv4 frame to the SNAT address: passed byte for byte as received (only VIP listener frames may lose a trailer). */
function toSnatAddress(f: Buffer, address: string | undefined): boolean {
  const l3 = l3Offset(f);
  if (!address || f.length < l3 + 20 || f[l3]! >> 4 !== 4) return false;
  return [...f.subarray(l3 + 16, l3 + 20)].join('.') === address;
}

/** The input cut to its IP length (what the program may pass on a VIP listener after trimming trailer bytes). */
function trimmed(f: Buffer): Buffer {
  const l3 = l3Offset(f);
  if (f.length < l3 + 20) return f;
  const v = f[l3]! >> 4;
  const len = v === 4 ? f.readUInt16BE(l3 + 2) : v === 6 && f.length >= l3 + 40 ? 40 + f.readUInt16BE(l3 + 4) : f.length - l3;
  return l3 + len < f.length ? f.subarray(0, l3 + len) : f;
}

async function main(): Promise<void> {
  const input = JSON.parse(readFileSync(0, 'utf8')) as HostileInput;
  const dp = await openLbDataPlane({ pinRoot: input.pinRoot });
  const out: BatchSummary[] = [];
  try {
    await applyTo(dp, stateFromJson(input.state));
    const capture = input.capture ? await CaptureProgram.loadOver(dp.object()!.program('xdp_lb').fd, { ...NO_FILTER, rate: 0 }) : null;
    const prog = capture ? capture.program : dp.object()!.program('xdp_lb');
    const ifindex = ifindexOf(input.ifname);
    /** With the capture build: what is wrong with the records of one run (none: []). */
    let captureProblems: string[] = [];
    const run = (f: Buffer) => {
      const r = prog.testRun({ data: f, ctxIn: ctxFor(f.length, ifindex) });
      if (capture) {
        const { records, lost } = capture.read(0);
        captureProblems = [];
        if (records.length !== 1 || lost) captureProblems.push(`capture: ${records.length} records, ${lost} lost for one run`);
        for (const c of records) {
          if (c.action !== (ACTIONS[r.retval] ?? String(r.retval)).toUpperCase()) captureProblems.push(`capture: verdict ${c.action}, the run returned ${r.retval}`);
          if (!c.entry?.equals(f.subarray(0, CAPTURE_SNAPLEN)) || c.entryLength !== f.length) captureProblems.push('capture: the frame as received differs from the input');
          if (!c.exit.equals(r.data.subarray(0, CAPTURE_SNAPLEN)) || c.exitLength !== r.data.length) captureProblems.push('capture: the frame as it left differs from the output');
          // a translated SNAT reply names the real it came from, a forwarded frame the real it went to
          if ((c.counters.includes('snat_reply') || c.counters.includes('ct_hit') || c.counters.includes('snat_new')) && (c.action === 'TX' || c.action === 'REDIRECT') && !c.realId)
            captureProblems.push(`capture: ${c.action} [${c.counters.join(' ')}] without the real`);
        }
      }
      return r;
    };
    // a SNAT flow, so replies and ICMP errors to the SNAT address meet a translation
    const syn = run(Buffer.from(input.snatSyn, 'hex'));
    if (syn.retval !== 3) throw new Error(`SNAT SYN not transmitted (action ${syn.retval})`);
    const l3 = l3Offset(syn.data);
    const snatPort = syn.data.readUInt16BE(l3 + (syn.data[l3]! & 0xf) * 4);
    if (input.snatPort !== undefined && snatPort !== input.snatPort) throw new Error(`SNAT port ${snatPort}, expected ${input.snatPort}`);
    const kinds: Record<string, Buffer> = Object.fromEntries(Object.entries(input.kinds).map(([k, hex]) => [k, Buffer.from(hex, 'hex')]));
    const { address, mac, real, realMac } = input.snat;
    const eth = { dst: mac, src: realMac };
    kinds['snat reply'] = frame(eth, ipPacket({ src: real, dst: address, l4: { udp: { sport: 53, dport: snatPort, payload: Buffer.from('answer') } } }));
    const quote = ipPacket({ src: address, dst: real, l4: { udp: { sport: snatPort, dport: 53, payload: Buffer.from('query') } } }).subarray(0, 28);
    const icmp = icmpv4(3, 3, Buffer.alloc(4), quote);
    kinds['snat ICMP error'] = frame(eth, Buffer.concat([ipv4Header({ src: real, dst: address, proto: IPPROTO.ICMP }, icmp.length), icmp]));

    const toSnat = (f: Buffer) => toSnatAddress(f, input.snat?.address);
    const batch = async (name: string, frames: Array<{ name: string; frame: Buffer }>) => {
      const s: BatchSummary = { batch: name, runs: 0, actions: {}, counters: {}, problems: [] };
      const before = await dp.counters();
      for (const { name: n, frame } of frames) {
        const r = run(frame);
        s.runs++;
        const action = ACTIONS[r.retval] ?? `invalid ${r.retval}`;
        tally(s.actions, action);
        const problem = (p: string) => { if (s.problems.length < 20) s.problems.push(`${n}: ${p} (in ${frame.toString('hex')} out ${r.data.toString('hex')})`); };
        for (const p of captureProblems) problem(p);
        if (!ACTIONS[r.retval]) problem(`action ${r.retval}`);
        else if (action === 'pass' && !r.data.equals(frame) && (toSnat(frame) || !r.data.equals(trimmed(frame))))
          problem(toSnat(frame) ? 'passed frame to the SNAT address was changed' : 'passed frame was changed');
        else if (action === 'tx' || action === 'redirect') for (const p of outputProblems(frame, r.data, { mtu: input.mtu })) problem(p);
      }
      const after = await dp.counters();
      for (const [k, v] of Object.entries(after))
        if (typeof v === 'number' && v !== (before[k] ?? 0) && !k.includes(':')) s.counters[k] = v - ((before[k] as number) ?? 0);
      // every packet counted by exactly one reason of its outcome
      const sum = (pred: (k: string) => boolean) => Object.entries(s.counters).filter(([k]) => pred(k)).reduce((a, [, v]) => a + v, 0);
      const drops = sum((k) => k.startsWith('drop_') || k.startsWith('snat_drop_'));
      const passes = sum((k) => k.startsWith('pass_') || k.startsWith('snat_pass_'));
      const sent = sum((k) => k === 'tx' || k === 'redirect' || k === 'icmp_sent' || k === 'icmp_echo_reply');
      if (drops !== (s.actions.drop ?? 0)) s.problems.push(`${s.actions.drop ?? 0} drops but ${drops} drop counts`);
      if (passes !== (s.actions.pass ?? 0)) s.problems.push(`${s.actions.pass ?? 0} passes but ${passes} pass counts`);
      if (sent !== (s.actions.tx ?? 0) + (s.actions.redirect ?? 0)) s.problems.push(`${(s.actions.tx ?? 0) + (s.actions.redirect ?? 0)} sent but ${sent} tx/redirect/icmp_sent/icmp_echo_reply counts`);
      out.push(s);
    };
    const entries = Object.entries(kinds);
    if (Object.keys(input.kinds).length) {
      await batch('truncations and mutations', entries.flatMap(([k, f]) => [...truncations(f), ...mutations(f)].map((x) => ({ name: `${k}: ${x.name}`, frame: x.frame }))));
      const per = Math.ceil(input.flips / entries.length);
      if (input.flips) await batch(`${input.flips} bit flips`, entries.flatMap(([k, f], i) => bitFlips(f, input.seed + i, per).map((x) => ({ name: `${k}: ${x.name}`, frame: x.frame }))));
    }
    for (const c of input.corpora ?? []) await batch(c.batch, c.frames.map(([name, hex]) => ({ name, frame: Buffer.from(hex, 'hex') })));
    if (capture) {
      const s = capture.stats();
      if (s.seen !== s.captured || s.output_failed) out.push({ batch: 'capture', runs: 0, actions: {}, counters: {}, problems: [`capture counted ${JSON.stringify(s)}`] });
      capture.close();
    }
  } finally {
    dp.close();
  }
  process.stdout.write(JSON.stringify(out));
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
