// `--interface` and `--xdp-mode` given at start win over the attachment a previous run left pinned. The data
// plane reuses a pinned XDP link by swapping its program, which keeps the link's interface and mode; so when
// either differs from the flags, the stale link pin is removed before the data plane opens (removing the last
// reference detaches it) and the data plane attaches afresh as asked. This is break-before-make: new flows
// see the kernel's path for the few milliseconds in between; conntrack and maps stay pinned.
import { existsSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { interfaceIndex, pinnedXdpLink } from '../bpf/attach.js';
import { LINK_PIN } from '../bpf/dataplane/index.js';

/** Returns what was done (for the log), or null when the pinned attachment already matches. */
export function reconcilePinnedXdp(pinDir: string, ifname: string, mode: 'native' | 'generic' | 'auto'): string | null {
  const pin = join(pinDir, LINK_PIN);
  if (!existsSync(pin)) return null;
  const want = interfaceIndex(ifname);
  const have = pinnedXdpLink(pin);
  if (!have) return null; // not an XDP link: the data plane refuses it with a clear error
  const wrongIf = have.ifindex !== want;
  const wrongMode = mode !== 'auto' && have.mode !== mode;
  if (!wrongIf && !wrongMode) return null;
  unlinkSync(pin);
  return wrongIf
    ? `xdp: pinned attachment was on ifindex ${have.ifindex}, --interface is ${ifname}: detached it, attaching to ${ifname}`
    : `xdp: pinned attachment is ${have.mode}, --xdp-mode is ${mode}: detached it, re-attaching in ${mode} mode`;
}
