// Runs inside a test network namespace that has only loopback (so every forward ends at the route lookup):
//   ring-switch-traffic.ts <pinRoot> <count> <src> <vip> <firstSport>
// Sends <count> TCP SYNs to <vip>:80 with source ports from <firstSport> on through xdp_lb (BPF_PROG_TEST_RUN on the pinned data plane)
// and prints, as JSON, the real each flow was given (read from the connection table, which the program writes
// right after the ring lookup).
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { encodeFlowKey } from '../../src/bpf/dataplane/codec.js';
import { TCP_FLAGS, frame, ipPacket } from './packets.js';

const [pinRoot, countText, src, dst, firstSportText] = process.argv.slice(2);
const count = Number(countText);
const FLOW = { src: src!, dst: dst!, dport: 80, firstSport: Number(firstSportText) };
const dp = await openLbDataPlane({ pinRoot: pinRoot! });
try {
  const prog = dp.object()!.program('xdp_lb');
  const ct = dp.object()!.map('lb_conntrack');
  const ctx = Buffer.alloc(24);
  const out: Array<[number, number]> = [];
  for (let i = 0; i < count; i++) {
    const sport = FLOW.firstSport + i;
    const data = frame({ dst: '02:00:00:00:00:01', src: '02:00:00:00:00:02' },
      ipPacket({ src: FLOW.src, dst: FLOW.dst, l4: { tcp: { sport, dport: FLOW.dport, flags: TCP_FLAGS.SYN } } }));
    ctx.writeUInt32LE(data.length, 4);
    ctx.writeUInt32LE(1, 12); // ingress on lo
    prog.testRun({ data, ctxIn: ctx });
    const v = ct.lookup(encodeFlowKey({ src: FLOW.src, dst: FLOW.dst, sport, dport: FLOW.dport, proto: 6, family: 4 }));
    out.push([sport, v ? v.readUInt32LE(0) : 0]);
  }
  process.stdout.write(JSON.stringify(out));
} finally {
  dp.close();
}
