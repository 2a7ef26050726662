// Runs frames through a backend TC program (tc_backend.o) for the hostile-packet suites (test/netns/hostile-backend.test.ts,
// test/netns/hostile-foreign.test.ts): each output checked with test/lib/hostile.ts, every action tallied, and every
// dropped packet accounted for by exactly one drop counter.
import { TcAction, type BpfObject, type BpfProgram } from '../../src/bpf/libbpf.js';
import type { StatName } from '../../src/bpf/backend/codec.js';
import { backendStats } from './backend-prog.js';
import { outputProblems, tally } from './hostile.js';

/** The be_stats counters of a drop (TC_ACT_SHOT). */
export const DROP_STATS: StatName[] = ['adjust_fail', 'rewrite_fail', 'bad_ip_csum', 'decap_bad_outer', 'decap_not_allowed'];

export interface Summary { runs: number; actions: Record<string, number>; problems: string[]; drops: Record<string, number> }

/** `afterRun`: more checks of one run (the capture build's record of it); what it returns are problems. */
export function fuzz(obj: BpfObject, prog: BpfProgram, inputs: Array<{ name: string; frame: Buffer }>,
  afterRun?: (input: Buffer, retval: number, output: Buffer) => string[]): Summary {
  const s: Summary = { runs: 0, actions: {}, problems: [], drops: {} };
  const before = backendStats(obj);
  let shot = 0;
  for (const { name, frame: f } of inputs) {
    let r;
    try {
      r = prog.testRun({ data: f, dataOutSize: f.length + 256 });
    } catch (e) {
      // BPF_PROG_TEST_RUN for skb programs refuses IPv4/IPv6 frames shorter than the fixed IP header: such a
      // frame never reaches the program this way, so it is counted, not run
      if ((e as { code?: string }).code !== 'EINVAL' || f.length >= 14 + 40) throw e;
      tally(s.actions, 'refused by BPF_PROG_TEST_RUN');
      continue;
    }
    s.runs++;
    for (const p of afterRun?.(f, r.retval, r.data) ?? []) if (s.problems.length < 20) s.problems.push(`${name}: ${p}`);
    tally(s.actions, r.retval === TcAction.ok ? 'ok' : r.retval === TcAction.shot ? 'shot' : `other ${r.retval}`);
    if (r.retval === TcAction.shot) shot++;
    else if (r.retval !== TcAction.ok) s.problems.push(`${name}: action ${r.retval}`);
    else if (!r.data.equals(f)) {
      for (const p of outputProblems(f, r.data, { checkMac: false, allowTrailer: true, checkMartian: false }))
        if (s.problems.length < 20) s.problems.push(`${name}: ${p} (in ${f.toString('hex')} out ${r.data.toString('hex')})`);
    }
  }
  const after = backendStats(obj);
  for (const n of DROP_STATS) if (after[n] !== before[n]) s.drops[n] = after[n] - before[n];
  const counted = Object.values(s.drops).reduce((a, b) => a + b, 0);
  if (counted !== shot) s.problems.push(`${shot} packets dropped but ${counted} drop counts`);
  return s;
}
