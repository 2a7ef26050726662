// The kernel gitlb needs (`gitlb doctor`, docs/deploy.md "Kernel"): every kernel feature the daemon's BPF objects and
// its user space use, with the first mainline release that has it, and whether a node needs it always or only on an
// optional path. Pure: the release text comes from the caller (os.release()), so the comparison is unit-tested.
// Benches and tests use more (BPF_F_TEST_XDP_LIVE_FRAMES, 5.18); they are not listed: no node runs them.

export type KernelVersion = readonly [major: number, minor: number];
export type NodeRole = 'lb' | 'backend';

export interface KernelFeature {
  /** What the kernel must have, as its documentation names it. */
  feature: string;
  since: KernelVersion;
  /** What needs it on which node. */
  usedBy: string;
  roles: readonly NodeRole[];
  /** Set for a feature only an optional path needs: what that path is. A node without it runs everything else. */
  onlyFor?: string;
  /** Set for a feature gitlb uses when present and does without otherwise: how (not a warning when missing). */
  otherwise?: string;
}

export const KERNEL_FEATURES: readonly KernelFeature[] = [
  { feature: 'BPF_ADJ_ROOM_MAC (bpf_skb_adjust_room at the MAC layer)', since: [5, 2], roles: ['backend'],
    usedBy: 'tc_backend: decapsulation of IPIP and GUE' },
  { feature: 'BPF ring buffer (BPF_MAP_TYPE_RINGBUF)', since: [5, 8], roles: ['lb'],
    usedBy: 'xdp_lb: flow-sync events (the map is created with the object, sync or not)' },
  { feature: 'CAP_BPF and CAP_PERFMON (capabilities)', since: [5, 8], roles: ['backend', 'lb'],
    usedBy: 'gitlb doctor fails without both effective; the systemd unit and the DaemonSet grant them' },
  { feature: 'XDP through BPF links (BPF_LINK_CREATE)', since: [5, 9], roles: ['lb'],
    usedBy: 'attaching xdp_lb (a pinned link outlives the daemon)' },
  { feature: 'BPF_F_INNER_MAP (inner maps of any size)', since: [5, 10], roles: ['lb'],
    usedBy: 'xdp_lb: the Maglev rings (lb_rings)' },
  { feature: 'bpf_ktime_get_coarse_ns', since: [5, 11], roles: ['lb'],
    usedBy: 'xdp_lb: the connection table\'s recency mark and the SNAT clock' },
  { feature: 'bpf_map_lookup_and_delete_elem on hash maps', since: [5, 14], roles: ['lb'],
    usedBy: 'the SNAT sweep and the flow sync\'s deletions of translations', onlyFor: 'snat listeners' },
  { feature: 'bpf_xdp_load_bytes', since: [5, 18], roles: ['lb'],
    usedBy: 'xdp_lb_capture.o', onlyFor: 'gitlb capture on lb nodes' },
  { feature: 'BPF_F_ADJ_ROOM_DECAP_L3_IPV4/IPV6', since: [6, 3], roles: ['backend'],
    usedBy: 'tc_backend: a tunnel whose inner family differs from the outer one', onlyFor: 'IPv4 in IPv6 or IPv6 in IPv4 tunnels' },
  { feature: 'tcx links (BPF_TCX_INGRESS/EGRESS)', since: [6, 6], roles: ['backend', 'lb'],
    usedBy: 'attaching the TC programs (tc_backend; tc_vip_probe on lb nodes)', otherwise: 'a clsact qdisc and cls_bpf filter, the same programs' },
  { feature: 'BPF_FIB_LOOKUP_SRC', since: [6, 7], roles: ['lb'],
    usedBy: 'xdp_lb: the outer source of dsr-ipip / dsr-gue chosen by the kernel',
    onlyFor: 'dsr-ipip and dsr-gue reals of a family the lb Node lists no address of (Node.spec.addresses)' },
];

/** The major and minor of a release text such as '6.1.0-18-amd64' or '5.15.0-91-generic'; null when it has none. */
export function parseKernelRelease(release: string): KernelVersion | null {
  const m = /^(\d+)\.(\d+)/.exec(release.trim());
  return m ? [Number(m[1]), Number(m[2])] : null;
}

export function atLeast(v: KernelVersion, min: KernelVersion): boolean {
  return v[0] !== min[0] ? v[0] > min[0] : v[1] >= min[1];
}

export const versionText = (v: KernelVersion) => `${v[0]}.${v[1]}`;

/** The first release a node of these roles runs on: the newest of the features they always need. */
export function minimumKernel(roles: readonly NodeRole[]): KernelVersion {
  let min: KernelVersion = [0, 0];
  for (const f of KERNEL_FEATURES) if (!f.onlyFor && !f.otherwise && f.roles.some((r) => roles.includes(r)) && !atLeast(min, f.since)) min = f.since;
  return min;
}

export interface KernelVerdict { level: 'ok' | 'warn' | 'fail'; detail: string }

/**
 * Judges a kernel release for a node of `role` (both roles when unknown): fail when it lacks a feature the node
 * always needs (each named, with its release), warn when it lacks one an optional path needs (each named with the
 * path), ok otherwise.
 */
export function judgeKernel(release: string, role?: NodeRole): KernelVerdict {
  const roles: NodeRole[] = role ? [role] : ['lb', 'backend'];
  const who = role ? `${role} nodes need` : 'gitlb needs';
  const min = minimumKernel(roles);
  const v = parseKernelRelease(release);
  if (!v) return { level: 'warn', detail: `${release}: not a version this check reads; ${who} ${versionText(min)} or newer` };
  const relevant = KERNEL_FEATURES.filter((f) => !f.otherwise && f.roles.some((r) => roles.includes(r)) && !atLeast(v, f.since));
  const missing = relevant.filter((f) => !f.onlyFor);
  const optional = relevant.filter((f) => f.onlyFor);
  const named = (fs: KernelFeature[]) => fs.map((f) => `${f.feature} (${versionText(f.since)}${f.onlyFor ? `: ${f.onlyFor}` : ''})`).join('; ');
  if (missing.length) {
    return { level: 'fail', detail: `${release}: ${who} ${versionText(min)} or newer; missing: ${named(missing)}` +
      (optional.length ? `; also missing for optional paths: ${named(optional)}` : '') };
  }
  if (optional.length) return { level: 'warn', detail: `${release}: runs; missing for optional paths only: ${named(optional)}` };
  return { level: 'ok', detail: `${release} (${who} ${versionText(min)}; every optional path works too)` };
}
