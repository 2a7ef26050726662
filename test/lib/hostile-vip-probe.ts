// The hostile-packet suite's model of tc_vip_probe (src/bpf/progs/tc_vip_probe.c; docs/health.md, "Probing
// through the VIP path", its hostile-packets paragraph): what each program may do with a frame, computed here
// from the routes the test installed, independently of the BPF code, and a runner that checks every output
// against it (test/kernel/hostile-vip-probe.test.ts).
import { TcAction, type BpfProgram } from '../../src/bpf/libbpf.js';
import type { VipProbeRoute } from '../../src/bpf/vip-probe.js';
import { IPPROTO, ipBytes, onesSum } from './packets.js';
import { outputProblems, tally } from './hostile.js';

const L3 = 14;
const CSUM_IP = L3 + 10;
const CSUM_TCP = L3 + 20 + 16;

/** A route as the maps hold it; `encap: 'unknown'` is an entry vip-probe.ts never writes (the program drops). */
export type ProbeRoute = Omit<VipProbeRoute, 'encap'> & { encap: VipProbeRoute['encap'] | 'unknown' };

export type Expect =
  | { kind: 'pass'; why: string }
  | { kind: 'rewrite'; out: Buffer; why: string } // l2 egress, ingress: one address changed, checksums updated
  | { kind: 'encap'; outer: Buffer; inner: Buffer; why: string } // ipip egress: outer IPv4 (gue: + UDP) + the rewritten packet
  | { kind: 'option'; out: Buffer; why: string } // ipopt egress: the SYN with the DSR option, byte for byte
  | { kind: 'shot'; why: string };

/** The frame is a whole IPv4 TCP packet the programs act on: Ethernet type IPv4, version 4, IHL 5, protocol TCP,
 * not a fragment, total length from 40 up to the bytes present (trailer bytes allowed after it). */
export function whole(f: Buffer): boolean {
  if (f.length < L3 + 40 || f.readUInt16BE(12) !== 0x0800) return false;
  if (f[L3] !== 0x45 || f[L3 + 9] !== IPPROTO.TCP || (f.readUInt16BE(L3 + 6) & 0x3fff) !== 0) return false;
  const len = f.readUInt16BE(L3 + 2);
  return len >= 40 && len <= f.length - L3;
}

const same = (a: Buffer, b: string) => a.equals(ipBytes(b));

/** What `prog` ('egress' | 'ingress') must do with `f`, given the routes in the maps. */
export function expected(prog: 'egress' | 'ingress', f: Buffer, routes: readonly ProbeRoute[]): Expect {
  if (!whole(f)) return { kind: 'pass', why: 'not a whole IPv4 TCP packet' };
  const src = f.subarray(L3 + 12, L3 + 16);
  const dst = f.subarray(L3 + 16, L3 + 20);
  const sport = f.readUInt16BE(L3 + 20);
  const dport = f.readUInt16BE(L3 + 22);
  if (prog === 'ingress') {
    // an answer from (VIP, port) to a reserved source port gets the real's address back as its source (ipopt: from
    // the service port, and it gets the targetPort back too)
    const r = routes.find((x) => same(src, x.vip) && sport === (x.encap === 'ipopt' ? x.vipPort : x.port) && dport === x.sourcePort);
    if (!r) {
      // ipopt: an answer from the real's own address and targetPort skipped the backend's rewrite
      if (routes.some((x) => x.encap === 'ipopt' && same(src, x.real) && sport === x.port && dport === x.sourcePort))
        return { kind: 'shot', why: 'ipopt answer not from the VIP' };
      return { kind: 'pass', why: 'no probe route' };
    }
    const out = Buffer.from(f);
    ipBytes(r.real).copy(out, L3 + 12);
    if (r.encap === 'ipopt') out.writeUInt16BE(r.port, L3 + 20);
    return { kind: 'rewrite', out, why: r.encap === 'ipopt' ? 'ipopt answer source and port restored' : 'answer source restored' };
  }
  const r = routes.find((x) => same(dst, x.real) && dport === x.port && sport === x.sourcePort);
  if (!r) return { kind: 'pass', why: 'no probe route' };
  if (r.encap === 'unknown') return { kind: 'shot', why: 'route with an unknown encap' };
  if (r.encap === 'gue' && !r.guePort) return { kind: 'shot', why: 'gue route without its port' };
  if (r.encap === 'ipopt') {
    const flags = f[L3 + 33]!;
    if ((flags & 0x12) !== 0x02) return { kind: 'pass', why: 'ipopt probe segment after the SYN' };
    if (onesSum(f.subarray(L3, L3 + 20)) !== 0xffff) return { kind: 'shot', why: 'ipopt SYN with a wrong IPv4 header checksum' };
    // the DSR option (0x9a, 8, port, VIP) after the 20-byte header: IHL 7, total length + 8, checksum anew
    const len = f.readUInt16BE(L3 + 2);
    const hdr = Buffer.from(f.subarray(L3, L3 + 20));
    hdr[0] = 0x47;
    hdr.writeUInt16BE(len + 8, 2);
    hdr.writeUInt16BE(0, 10);
    const opt = Buffer.from([0x9a, 8, 0, 0, ...ipBytes(r.vip)]);
    opt.writeUInt16BE(r.vipPort!, 2);
    hdr.writeUInt16BE(~onesSum(hdr, opt) & 0xffff, 10);
    return { kind: 'option', out: Buffer.concat([f.subarray(0, L3), hdr, opt, f.subarray(L3 + 20)]), why: 'ipopt SYN with the option' };
  }
  const rewritten = Buffer.from(f);
  ipBytes(r.vip).copy(rewritten, L3 + 16);
  if (r.encap === 'l2') return { kind: 'rewrite', out: rewritten, why: 'probe to the VIP (l2)' };
  const len = f.readUInt16BE(L3 + 2);
  // gue: the UDP header after the outer IPv4 one: source port 0xc000 | the probe's low 14 bits, the GUE port, the
  // probe's length + 8, checksum 0 (IPv4)
  const udp = r.encap === 'gue' ? 8 : 0;
  const outer = Buffer.alloc(20 + udp);
  outer[0] = 0x45;
  outer[1] = f[L3 + 1]!; // the probe's TOS
  outer.writeUInt16BE(len + 20 + udp, 2);
  outer[8] = 64;
  outer[9] = udp ? IPPROTO.UDP : IPPROTO.IPIP;
  (r.outerSource ? ipBytes(r.outerSource) : src).copy(outer, 12);
  ipBytes(r.real).copy(outer, 16);
  outer.writeUInt16BE(~onesSum(outer.subarray(0, 20)) & 0xffff, 10);
  if (udp) {
    outer.writeUInt16BE(0xc000 | (sport & 0x3fff), 20);
    outer.writeUInt16BE(r.guePort!, 22);
    outer.writeUInt16BE(len + 8, 24);
  }
  return { kind: 'encap', outer, inner: rewritten, why: udp ? 'probe to the VIP in GUE' : 'probe to the VIP in IPIP' };
}

/** Differences of `got` from `want` outside the IPv4 and TCP checksum fields (those are judged by validity). */
function bytesDiffer(want: Buffer, got: Buffer): boolean {
  if (want.length !== got.length) return true;
  for (let i = 0; i < want.length; i++) if (i !== CSUM_IP && i !== CSUM_IP + 1 && i !== CSUM_TCP && i !== CSUM_TCP + 1 && want[i] !== got[i]) return true;
  return false;
}

/** What is wrong with the program's answer to `f` (empty: it did what the model says). */
export function problemsOf(f: Buffer, action: number, out: Buffer, want: Expect): string[] {
  if (action !== TcAction.ok && action !== TcAction.shot) return [`action ${action}`];
  if (want.kind === 'shot') return action === TcAction.shot ? [] : [`${want.why}: not dropped`];
  if (action === TcAction.shot) return [`dropped (${want.why})`];
  if (want.kind === 'pass') return out.equals(f) ? [] : [`${want.why}: changed`];
  if (want.kind === 'option') return out.equals(want.out) ? [] : [`${want.why}: ${out.toString('hex')}, want ${want.out.toString('hex')}`];
  const p: string[] = [];
  // the rewritten packet: the model's bytes, checksums as valid as they came (updated, neither laundered nor
  // broken), lengths within the frame (outputProblems, as for the other programs)
  const added = want.kind === 'encap' ? want.outer.length : 0;
  const packet = want.kind === 'rewrite' ? out : Buffer.concat([out.subarray(0, L3), out.subarray(L3 + added)]);
  if (want.kind === 'encap') {
    const outer = out.subarray(L3, L3 + added);
    if (out.length !== f.length + added) p.push(`encapsulated frame of ${out.length} bytes, want ${f.length + added}`);
    else if (!outer.equals(want.outer)) p.push(`outer header ${outer.toString('hex')}, want ${want.outer.toString('hex')}`);
    if (out.readUInt16BE(12) !== 0x0800) p.push('Ethernet type of the tunnel not IPv4');
  }
  const model = want.kind === 'rewrite' ? want.out : want.inner;
  if (bytesDiffer(model, packet)) p.push(`${want.why}: bytes other than the rewrite changed`);
  for (const x of outputProblems(f, packet, { checkMac: false, allowTrailer: true, checkMartian: false })) p.push(`${want.why}: ${x}`);
  return p;
}

export interface Summary { runs: number; actions: Record<string, number>; outcomes: Record<string, number>; problems: string[] }

/** Runs every frame through `prog`, checks each against the model, and tallies actions and outcomes. */
export function fuzz(prog: BpfProgram, which: 'egress' | 'ingress', routes: readonly ProbeRoute[], inputs: Array<{ name: string; frame: Buffer }>): Summary {
  const s: Summary = { runs: 0, actions: {}, outcomes: {}, problems: [] };
  for (const { name, frame: f } of inputs) {
    let r;
    try {
      r = prog.testRun({ data: f, dataOutSize: f.length + 256 });
    } catch (e) {
      // BPF_PROG_TEST_RUN refuses an IPv4 frame shorter than the fixed IP header for skb programs (never run)
      if ((e as { code?: string }).code !== 'EINVAL' || f.length >= L3 + 20) throw e;
      tally(s.actions, 'refused by BPF_PROG_TEST_RUN');
      continue;
    }
    s.runs++;
    tally(s.actions, r.retval === TcAction.ok ? 'ok' : r.retval === TcAction.shot ? 'shot' : `other ${r.retval}`);
    const want = expected(which, f, routes);
    tally(s.outcomes, `${want.kind}: ${want.why}`);
    for (const p of problemsOf(f, r.retval, r.data, want))
      if (s.problems.length < 20) s.problems.push(`${name}: ${p} (in ${f.toString('hex')} out ${r.data.toString('hex')})`);
  }
  return s;
}
