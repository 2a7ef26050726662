// `--interface` and `--xdp-mode` given at start win over the attachment a previous run left pinned. The data plane
// replaces its pinned XDP link itself (src/bpf/attach.ts, XdpReplacement) once the new program is loaded: on
// another interface it attaches there before detaching the old one; in another mode on the same interface the
// kernel allows only one of native/generic at a time, so it detaches and re-attaches back to back (a gap of two
// syscalls, not of a program load). This module only says, before the data plane opens, what is about to happen.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { interfaceIndex, pinnedXdpLink } from '../../bpf/attach.js';
import { LINK_PIN } from '../../bpf/dataplane/index.js';

/** What the data plane will do to the pinned attachment (for the log), or null when it already matches. */
export function reconcilePinnedXdp(pinDir: string, ifname: string, mode: 'native' | 'generic' | 'auto'): string | null {
  const pin = join(pinDir, LINK_PIN);
  if (!existsSync(pin)) return null;
  const want = interfaceIndex(ifname);
  const have = pinnedXdpLink(pin);
  if (!have) return null; // not an XDP link: the data plane refuses it with a clear error
  const wrongIf = have.ifindex !== want;
  const wrongMode = mode !== 'auto' && have.mode !== mode;
  if (!wrongIf && !wrongMode) return null;
  return wrongIf
    ? `xdp: pinned attachment was on ifindex ${have.ifindex}, --interface is ${ifname}: attaching to ${ifname}, then detaching the old one`
    : `xdp: pinned attachment is ${have.mode}, --xdp-mode is ${mode}: re-attaching in ${mode} mode (detach and attach back to back: ` +
      'the kernel runs one XDP mode at a time)';
}
