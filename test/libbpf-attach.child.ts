// Child process for test/netns/libbpf.test.ts attach tests. Runs INSIDE a throwaway network
// namespace (started with `ip netns exec`), performs one step and prints one JSON line.
// Usage: node --import tsx test/libbpf-attach.child.ts <step> <pinRoot> <ifname>
import { spawnSync } from 'node:child_process';
import { BpfObject, XdpAction, detachPinnedLink, queryTc, queryTcClsact, queryXdp, type BpfError } from '../src/bpf/libbpf.js';
import { u32 } from '../src/bpf/codec.js';
import { native } from '../src/bpf/addon.js';

const [step, pinRoot, ifname] = process.argv.slice(2) as [string, string, string];
const pins = { xdp: `${pinRoot}/links/xdp_${ifname}`, tcIn: `${pinRoot}/links/tc_in_${ifname}`, tcOut: `${pinRoot}/links/tc_out_${ifname}` };

function code(fn: () => unknown): string {
  try {
    fn();
    return 'ok';
  } catch (e) {
    return (e as BpfError).code ?? String(e);
  }
}

async function main(): Promise<Record<string, unknown>> {
  switch (step) {
    case 'attach': {
      const o = await BpfObject.load('selftest', { pinRoot });
      o.map('cfg').update(u32.encode(0), u32.encode(XdpAction.pass));
      const xdp = o.program('xdp_selftest').attachXdp(ifname, 'auto', pins.xdp);
      const query = queryXdp(ifname);
      const second = code(() => o.program('xdp_inner').attachXdp(ifname, 'auto'));
      const tin = o.program('tc_selftest').attachTc(ifname, 'ingress', pins.tcIn);
      const tout = o.program('tc_selftest').attachTc(ifname, 'egress', pins.tcOut);
      const tc = { ingress: queryTc(ifname, 'ingress'), egress: queryTc(ifname, 'egress') };
      const res = { mode: xdp.mode, replaced: xdp.replaced, linkId: xdp.linkId, query, second, tcReplaced: [tin.replaced, tout.replaced], tc };
      xdp.close();
      tin.close();
      tout.close();
      o.close();
      return res;
    }
    case 'reattach': {
      const survived = queryXdp(ifname);
      const o = await BpfObject.load('selftest', { pinRoot });
      const xdp = o.program('xdp_selftest').attachXdp(ifname, 'auto', pins.xdp);
      const tin = o.program('tc_selftest').attachTc(ifname, 'ingress', pins.tcIn);
      const after = queryXdp(ifname);
      const dupTc = code(() => o.program('tc_selftest').attachTc(ifname, 'ingress'));
      // another instance (no shared pins) must not take over the interface
      const foreign = await BpfObject.load('selftest');
      const foreignXdp = code(() => foreign.program('xdp_selftest').attachXdp(ifname, 'auto', `${pinRoot}/links/other`));
      const wrongPin = code(() => foreign.program('xdp_selftest').attachXdp(ifname, 'auto', pins.tcIn));
      const mapPin = code(() => foreign.program('xdp_selftest').attachXdp(ifname, 'auto', `${pinRoot}/pcpu_cnt`));
      // the update names the program it expects to replace (BPF_F_REPLACE): a stale expectation is refused
      const n = native();
      const linkFd = n.objGet(pins.xdp);
      const casStale = code(() => n.linkUpdate(linkFd, foreign.program('xdp_inner').fd, foreign.program('xdp_selftest').fd));
      n.closeFd(linkFd);
      foreign.close();
      const res = { survived, reused: o.map('flows').reused, replaced: xdp.replaced, linkId: xdp.linkId,
        tcReplaced: tin.replaced, after, newProgId: o.program('xdp_selftest').info().id, dupTc, foreignXdp, wrongPin, mapPin,
        casStale, afterCas: queryXdp(ifname) };
      xdp.close();
      tin.close();
      o.close();
      return res;
    }
    case 'detach': {
      const removed = [detachPinnedLink(pins.xdp), detachPinnedLink(pins.tcIn), detachPinnedLink(pins.tcOut), detachPinnedLink(pins.xdp)];
      return { removed, xdp: queryXdp(ifname), tcIn: queryTc(ifname, 'ingress'), tcOut: queryTc(ifname, 'egress') };
    }
    case 'clsact': {
      const o = await BpfObject.load('selftest');
      o.map('cfg').update(u32.encode(1), u32.encode(0)); // TC_ACT_OK
      const tin = o.program('tc_selftest').attachTc(ifname, 'ingress', undefined, { api: 'clsact' });
      const tout = o.program('tc_selftest').attachTc(ifname, 'egress', undefined, { api: 'clsact' });
      const query = queryTcClsact(ifname, 'ingress');
      const ping = spawnSync('ping', ['-c', '2', '-i', '0.2', '-W', '1', '192.0.2.1'], { timeout: 10_000 });
      const tcCount = Number(o.map('pcpu_cnt').lookupPerCpuSum(u32.encode(1))![0]);
      const again = o.program('tc_selftest').attachTc(ifname, 'ingress', undefined, { api: 'clsact' }).replaced;
      const foreign = code(() => o.program('tc_passthru').attachTc(ifname, 'ingress', undefined, { api: 'clsact' }));
      const other = o.program('tc_passthru').attachTc(ifname, 'ingress', undefined, { api: 'clsact', priority: 7 });
      other.detach();
      tin.detach();
      tout.detach();
      const res = { first: { api: tin.api, replaced: tin.replaced }, query, pingStatus: ping.status, tcCount, again, foreign,
        otherSlot: 'ok', afterDetach: queryTcClsact(ifname, 'ingress') };
      o.close();
      return res;
    }
    case 'sysbpf': {
      // under ip netns exec, /sys/fs/bpf is a fresh sysfs: pinning there must fail loudly
      const e = await BpfObject.load('selftest', { pinRoot: '/sys/fs/bpf/gitlb-test-never' }).then(() => null, (x) => x);
      return { code: e?.code, message: e?.message };
    }
    case 'modes': {
      const o = await BpfObject.load('selftest');
      const out: Record<string, unknown> = {};
      for (const mode of ['generic', 'native'] as const) {
        const a = o.program('xdp_selftest').attachXdp(ifname, mode);
        out[mode] = { reported: a.mode, queried: queryXdp(ifname)?.mode };
        a.detach();
      }
      out.afterDetach = queryXdp(ifname);
      // the namespace's own loopback has no driver XDP: auto falls back to generic and says so
      out.loNative = code(() => o.program('xdp_selftest').attachXdp('lo', 'native'));
      const lo = o.program('xdp_selftest').attachXdp('lo', 'auto');
      out.loAuto = { reported: lo.mode, queried: queryXdp('lo')?.mode };
      lo.detach();
      // without a pin the link dies with its fd: closing the object's attachment detaches
      const t = o.program('tc_selftest').attachTc(ifname, 'egress');
      out.tcWhileOpen = queryTc(ifname, 'egress').length;
      t.close();
      out.tcAfterClose = queryTc(ifname, 'egress').length;
      out.missingIf = code(() => o.program('xdp_selftest').attachXdp(`${ifname}nope`, 'auto'));
      o.close();
      return out;
    }
    default:
      throw new Error(`unknown step ${step}`);
  }
}

main().then(
  (r) => console.log(JSON.stringify(r)),
  (e) => {
    console.log(JSON.stringify({ error: String(e?.message ?? e), code: e?.code }));
    process.exitCode = 1;
  },
);
