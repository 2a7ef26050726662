// Does an XDP attachment forward? Native XDP can attach and still drop every frame it sends: on a veth whose peer
// runs no NAPI (no XDP program there, no GRO) frames returned with XDP_TX vanish without an error counter. The only
// reliable test is to send: run build/bpf/xdp_probe.o's xdp_tx_probe with BPF_F_TEST_XDP_LIVE_FRAMES on the
// interface (the kernel really transmits each XDP_TX frame through the driver, as xdp_lb's would be) and read
// the driver's XDP transmit counter (`ethtool -S`: veth's `*_xdp_xmit`) before and after. See docs/datapath.md.
import { execFileSync } from 'node:child_process';
import { BPF_F_TEST_XDP_LIVE_FRAMES, BpfObject } from './libbpf.js';

export const PROBE_OBJECT = 'xdp_probe';
/** Frames sent per probe; each is a broadcast of the IEEE local-experimental EtherType 0x88b5 (ignored by hosts). */
export const PROBE_FRAMES = 4;

export interface ForwardingCheck {
  /** true: the driver transmitted every probe frame; false: it transmitted none or only some; null: the driver
   * reports no XDP transmit counter, so nothing could be verified. */
  forwards: boolean | null;
  detail: string;
}

/** How xdp_lb is attached (src/bpf/dataplane): the mode in use, the mode asked for (--xdp-mode), and whether native
 * attached but could not forward so that generic is in use. Data, not a log line: bpf cannot reach the logger, so the
 * reconciler logs it and writes it into the node's status. */
export interface XdpForwarding extends ForwardingCheck {
  mode: 'native' | 'generic';
  requested: 'native' | 'generic' | 'auto';
  fellBack: boolean;
}

/** Sum of the driver's XDP transmit counters (`ethtool -S`), or null when it has none. */
function xdpXmitCount(ifname: string): number | null {
  let text: string;
  try {
    text = execFileSync('ethtool', ['-S', ifname], { stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 }).toString();
  } catch {
    return null;
  }
  let sum: number | null = null;
  for (const m of text.matchAll(/^\s*\S*xdp_xmit:\s*(\d+)\s*$/gm)) sum = (sum ?? 0) + Number(m[1]);
  return sum;
}

/** Index and MAC of `ifname` in the caller's network namespace (netlink via `ip`; sysfs may show another). */
function linkOf(ifname: string): { ifindex: number; mac: Buffer } {
  const [l] = JSON.parse(execFileSync('ip', ['-j', 'link', 'show', 'dev', ifname], { timeout: 5000 }).toString()) as Array<{ ifindex: number; address?: string }>;
  return { ifindex: l!.ifindex, mac: Buffer.from((l!.address ?? '00:00:00:00:00:00').replace(/:/g, ''), 'hex') };
}

/** Sends PROBE_FRAMES frames out of `ifname` with XDP_TX and reports whether the driver transmitted them. */
export async function checkXdpForwarding(ifname: string): Promise<ForwardingCheck> {
  const { ifindex, mac } = linkOf(ifname);
  const before = xdpXmitCount(ifname);
  if (before === null) return { forwards: null, detail: `${ifname}: the driver reports no XDP transmit counter (ethtool -S); not verified` };
  const obj = await BpfObject.load(PROBE_OBJECT);
  try {
    const frame = Buffer.alloc(60);
    frame.fill(0xff, 0, 6);
    mac.copy(frame, 6);
    frame.writeUInt16BE(0x88b5, 12);
    const ctx = Buffer.alloc(24);
    ctx.writeUInt32LE(frame.length, 4);
    ctx.writeUInt32LE(ifindex, 12);
    obj.program('xdp_tx_probe').testRun({ data: frame, ctxIn: ctx, flags: BPF_F_TEST_XDP_LIVE_FRAMES, repeat: PROBE_FRAMES, dataOutSize: 0 });
  } finally {
    obj.close();
  }
  const after = xdpXmitCount(ifname) ?? before;
  const sent = after - before;
  if (sent >= PROBE_FRAMES) return { forwards: true, detail: `${ifname}: ${sent}/${PROBE_FRAMES} XDP_TX probe frames transmitted` };
  return {
    forwards: false,
    detail: `${ifname}: only ${sent}/${PROBE_FRAMES} XDP_TX probe frames left the driver; on a veth the peer needs an XDP ` +
      'program (even XDP_PASS) or GRO on, and senders need `ethtool -K <dev> tx off` (docs/datapath.md)',
  };
}
