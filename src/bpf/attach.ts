// Attaching programs to interfaces: XDP and TC through BPF links (pinned so they outlive the
// process), TC through clsact filters where tcx is missing, and queries of what is attached.
// Never replaces a program that is not ours: that is an EEXIST error naming what is there.
import { existsSync, renameSync, rmSync, unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import { native } from './addon.js';
import { ensurePinDir } from './bpffs.js';
import { bpfError, named, type BpfError } from './errors.js';

/** What attaching needs from a loaded program. */
export interface ProgramRef { readonly name: string; readonly fd: number }

const XDP_FLAGS = { generic: 1 << 1, native: 1 << 2 } as const;
const LINK_TYPE_XDP = 6;
const LINK_TYPE_TCX = 11;
const XDP_ATTACH_MODES = ['none', 'native', 'generic', 'offload', 'multi'] as const;

/** What every attachment (XDP or TC) reports and can do. */
interface LinkAttachment {
  ifindex: number;
  linkId: number;
  pinPath?: string;
  /** True when an existing pinned link of ours was switched to this program (no detach gap). */
  replaced: boolean;
  /** Detaches the program and removes the pin. */
  detach(): void;
  /** Closes our fd only; a pinned link stays attached. */
  close(): void;
}

/**
 * How attachXdp replaced an attachment of ours (the link pinned at pinPath):
 * - 'program': same interface and mode, the link now runs the new program (bpf_link_update with the old program
 *   as the expected one); no gap.
 * - 'interface': the link was on another interface; the new one is attached first, then the old one detached.
 * - 'mode': other mode on the same interface. The kernel never runs native and generic XDP on one device at once,
 *   so the old link is detached and the new one created right after: a gap of two syscalls.
 */
export type XdpReplacement = 'program' | 'interface' | 'mode';

export interface XdpAttachment extends LinkAttachment {
  mode: 'native' | 'generic';
  /** What was replaced; null when nothing of ours was attached. */
  replacement: { how: XdpReplacement; ifindex: number; mode: 'native' | 'generic' } | null;
}

export interface TcAttachOptions {
  /** 'tcx' links (kernel >= 6.6), 'clsact' qdisc + cls_bpf filter, or 'auto' (tcx, else clsact). */
  api?: 'tcx' | 'clsact' | 'auto';
  /** clsact filter identity (ours is the filter at this handle/priority); defaults 1 / 0xc0de. */
  handle?: number;
  priority?: number;
}

export interface TcAttachment extends LinkAttachment {
  api: 'tcx' | 'clsact';
  direction: 'ingress' | 'egress';
}

function linkAttachment(fd: number, pinPath: string | undefined) {
  let open = true;
  return {
    detach(): void {
      if (!open) return;
      try {
        native().linkDetach(fd);
      } finally {
        open = false;
        native().closeFd(fd);
        if (pinPath && existsSync(pinPath)) unlinkSync(pinPath);
      }
    },
    close(): void {
      if (!open) return;
      open = false;
      native().closeFd(fd);
    },
  };
}

interface OwnLink { fd: number; id: number; ifindex: number; progId: number }

/**
 * Opens a pinned link if `pinPath` holds one of the expected kind on `ifindex` (null: on any interface); throws
 * EEXIST if it is something else.
 */
function openOwnPinnedLink(pinPath: string | undefined, linkType: number, ifindex: number | null, attachType?: number): OwnLink | null {
  if (!pinPath || !existsSync(pinPath)) return null;
  const fd = native().objGet(pinPath);
  try {
    let li;
    try {
      li = native().linkInfo(fd);
    } catch (e) {
      throw bpfError('EEXIST', `pin ${pinPath} is not a BPF link (${(e as Error).message}); refusing to overwrite it`);
    }
    if (li.type === linkType && li.ifindex === 0) {
      // Our link outlived its interface (device deleted/recreated): the pin is stale.
      native().closeFd(fd);
      unlinkSync(pinPath);
      return null;
    }
    if (li.type !== linkType || (ifindex !== null && li.ifindex !== ifindex) || (attachType !== undefined && li.attachType !== attachType))
      throw bpfError('EEXIST', `pin ${pinPath} holds link ${li.id} (type ${li.type}, ifindex ${li.ifindex}), not ours for ifindex ${ifindex}`);
    return { fd, id: li.id, ifindex: li.ifindex, progId: li.progId };
  } catch (e) {
    native().closeFd(fd);
    throw e;
  }
}

/**
 * Switches our pinned link `own` to `prog` atomically; closes it when the kernel refuses. The program read from
 * the link is named as the expected one (BPF_F_REPLACE): should another process swap the link in between, the
 * update fails (EPERM) instead of replacing what it did not inspect.
 */
function updateOwnLink(own: OwnLink, prog: ProgramRef, what: string): void {
  const n = native();
  try {
    const old = named(`program '${prog.name}': ${what} runs program ${own.progId}`, () => n.progGetFdById(own.progId));
    try {
      named(`program '${prog.name}': update ${what}`, () => n.linkUpdate(own.fd, prog.fd, old));
    } finally {
      n.closeFd(old);
    }
  } catch (e) {
    n.closeFd(own.fd);
    throw e;
  }
}

/** Pins the link just created (when there is a pin path); a link that cannot be pinned is detached again. */
function pinNewLink(fd: number, prog: ProgramRef, pinPath: string | undefined, what: string): void {
  try {
    if (pinPath) {
      ensurePinDir(dirname(pinPath));
      named(`program '${prog.name}': pin ${what}`, () => native().objPin(fd, pinPath));
    }
  } catch (e) {
    native().linkDetach(fd);
    native().closeFd(fd);
    throw e;
  }
}

/**
 * Attaches to `ifname` through a BPF link. With `pinPath`, the link is pinned (it survives this process) and an
 * existing pinned link of ours there is replaced (see XdpReplacement): its program switched atomically when it is
 * on `ifname` in the mode asked for ('auto' keeps the mode it has), else attached anew in as short a gap as the
 * kernel allows. Any other XDP program on the interface is refused with EEXIST, never replaced.
 * 'auto' tries native then generic and reports the mode it got.
 */
export function attachXdp(prog: ProgramRef, ifname: string, mode: 'native' | 'generic' | 'auto' = 'auto', pinPath?: string): XdpAttachment {
  const n = native();
  const ifindex = named(`program '${prog.name}'`, () => n.ifNameToIndex(ifname));
  const own = openOwnPinnedLink(pinPath, LINK_TYPE_XDP, null);
  if (own !== null) {
    const ownMode = linkXdpMode(own);
    if (own.ifindex === ifindex && (mode === 'auto' || mode === ownMode)) {
      updateOwnLink(own, prog, `XDP link on ${ifname}`);
      return { mode: ownMode, ifindex, linkId: own.id, pinPath, replaced: true,
        replacement: { how: 'program', ifindex, mode: ownMode }, ...linkAttachment(own.fd, pinPath) };
    }
    try {
      return replaceXdpLink(prog, ifname, ifindex, mode, pinPath!, own, ownMode);
    } finally {
      n.closeFd(own.fd);
    }
  }
  refuseForeignXdp(prog, ifname);
  const { fd, mode: got } = createXdpLink(prog, ifname, ifindex, mode);
  pinNewLink(fd, prog, pinPath, 'XDP link');
  return { mode: got, ifindex, linkId: n.linkInfo(fd).id, pinPath, replaced: false, replacement: null, ...linkAttachment(fd, pinPath) };
}

/** The mode our XDP link runs in: the kernel reports a program per mode, and ours is the one with the link's program. */
function linkXdpMode(own: OwnLink): 'native' | 'generic' {
  return native().xdpQuery(own.ifindex).skbProgId === own.progId ? 'generic' : 'native';
}

function refuseForeignXdp(prog: ProgramRef, ifname: string): void {
  const current = queryXdp(ifname);
  if (current)
    throw bpfError('EEXIST', `program '${prog.name}': ${ifname} already runs XDP program ${current.progId}` +
      `${current.name ? ` '${current.name}'` : ''} (${current.mode}); refusing to replace it`, { attached: current });
}

/** Creates an XDP link in `mode` ('auto': native, else generic); the last refusal is thrown. */
function createXdpLink(prog: ProgramRef, ifname: string, ifindex: number, mode: 'native' | 'generic' | 'auto'):
  { fd: number; mode: 'native' | 'generic' } {
  const n = native();
  const tries: Array<'native' | 'generic'> = mode === 'auto' ? ['native', 'generic'] : [mode];
  let lastErr: unknown;
  for (const m of tries) {
    try {
      return { fd: named(`program '${prog.name}': attach XDP (${m}) to ${ifname}`, () =>
        n.linkCreate(prog.fd, ifindex, n.attachXdp, XDP_FLAGS[m])), mode: m };
    } catch (e) {
      lastErr = e;
    }
  }
  throw lastErr;
}

/**
 * Replaces our link `own` (on another interface, or in another mode) by a new link of `prog`, pinned at `pinPath`.
 * The new link is pinned beside the old pin and renamed over it (bpffs renames atomically; its names cannot hold a dot), so the pin never names
 * nothing. Another interface: make-before-break. Same interface, other mode: the kernel refuses a native and a
 * generic program on one device at once ("Native and generic XDP can't be active at the same time"), so the old
 * link is detached and the new one created right after, nothing else in between; if the new mode is refused, the
 * program goes back in the old mode and the refusal is thrown.
 */
function replaceXdpLink(prog: ProgramRef, ifname: string, ifindex: number, mode: 'native' | 'generic' | 'auto', pinPath: string,
  own: OwnLink, ownMode: 'native' | 'generic'): XdpAttachment {
  const n = native();
  const next = `${pinPath}_next`;
  rmSync(next, { force: true }); // left by a crash between pin and rename: ours, and superseded now
  let created: { fd: number; mode: 'native' | 'generic' };
  let how: XdpReplacement;
  if (own.ifindex !== ifindex) {
    refuseForeignXdp(prog, ifname);
    created = createXdpLink(prog, ifname, ifindex, mode);
    how = 'interface';
  } else {
    how = 'mode';
    named(`program '${prog.name}': detach ${ownMode} XDP link on ${ifname}`, () => n.linkDetach(own.fd));
    try {
      created = createXdpLink(prog, ifname, ifindex, mode);
    } catch (e) {
      const back = n.linkCreate(prog.fd, ifindex, n.attachXdp, XDP_FLAGS[ownMode]);
      pinNewLink(back, prog, next, 'XDP link');
      renameSync(next, pinPath);
      n.closeFd(back);
      throw Object.assign(e as Error, { message: `${(e as Error).message}; the program stays attached in ${ownMode} mode` });
    }
  }
  pinNewLink(created.fd, prog, next, 'XDP link');
  renameSync(next, pinPath);
  // the old link's last reference may be a process of the previous run still holding its fd: detach it explicitly
  if (how === 'interface') n.linkDetach(own.fd);
  return { mode: created.mode, ifindex, linkId: n.linkInfo(created.fd).id, pinPath, replaced: false,
    replacement: { how, ifindex: own.ifindex, mode: ownMode }, ...linkAttachment(created.fd, pinPath) };
}

/**
 * Attaches as TC on ingress or egress. Default api 'auto': a tcx link (kernel >= 6.6, no qdisc
 * needed; pinned at `pinPath` so it survives the process, an existing pinned link of ours is
 * switched atomically), falling back to a clsact filter on older kernels (see attachClsact).
 * tcx: programs of others on the hook keep running; a program with our name that is not behind
 * our pin is refused with EEXIST (a leftover instance would process packets twice).
 */
export function attachTc(prog: ProgramRef, ifname: string, direction: 'ingress' | 'egress', pinPath?: string, opts: TcAttachOptions = {}): TcAttachment {
  const n = native();
  const ifindex = named(`program '${prog.name}'`, () => n.ifNameToIndex(ifname));
  const api = opts.api ?? 'auto';
  if (api === 'clsact') return attachClsact(prog, ifname, ifindex, direction, opts);
  try {
    return attachTcx(prog, ifname, ifindex, direction, pinPath);
  } catch (e) {
    // kernels before 6.6 reject the tcx attach type with EINVAL
    if (api === 'auto' && (e as BpfError).code === 'EINVAL' && !(e as { attached?: unknown }).attached)
      return attachClsact(prog, ifname, ifindex, direction, opts);
    throw e;
  }
}

/**
 * clsact + direct-action cls_bpf filter at (handle, priority). The filter lives in the kernel
 * without a pin; close() keeps it, detach() removes it. A filter of ours (same program name)
 * at that slot is replaced; anything else there is refused with EEXIST.
 */
function attachClsact(prog: ProgramRef, ifname: string, ifindex: number, direction: 'ingress' | 'egress', opts: TcAttachOptions): TcAttachment {
  const n = native();
  const handle = opts.handle ?? 1;
  const priority = opts.priority ?? 0xc0de;
  const ingress = direction === 'ingress';
  const existing = named(`program '${prog.name}': query clsact ${direction} on ${ifname}`, () =>
    n.tcClsactQuery(ifindex, ingress, handle, priority));
  let replaced = false;
  if (existing !== null) {
    const info = n.progInfoById(existing);
    if (info?.name !== prog.name.slice(0, 15))
      throw bpfError('EEXIST', `program '${prog.name}': ${ifname} ${direction} filter ${handle}/${priority} runs program ` +
        `${existing} '${info?.name ?? '?'}'; refusing to replace it`, { attached: { progId: existing, name: info?.name } });
    replaced = true;
  }
  named(`program '${prog.name}': attach clsact ${direction} to ${ifname}`, () =>
    n.tcClsactAttach(prog.fd, ifindex, ingress, handle, priority, replaced));
  let attached = true;
  return {
    api: 'clsact', direction, ifindex, linkId: 0, replaced,
    detach(): void {
      if (!attached) return;
      attached = false;
      named(`clsact ${direction} filter on ${ifname}`, () => n.tcClsactDetach(ifindex, ingress, handle, priority));
    },
    close(): void {},
  };
}

function attachTcx(prog: ProgramRef, ifname: string, ifindex: number, direction: 'ingress' | 'egress', pinPath?: string): TcAttachment {
  const n = native();
  const attachType = tcxAttachType(direction);
  const own = openOwnPinnedLink(pinPath, LINK_TYPE_TCX, ifindex, attachType);
  if (own !== null) {
    updateOwnLink(own, prog, `TC link on ${ifname}`);
    return { api: 'tcx', direction, ifindex, linkId: own.id, pinPath, replaced: true, ...linkAttachment(own.fd, pinPath) };
  }
  const same = queryTc(ifname, direction).find((p) => p.name === prog.name.slice(0, 15));
  if (same)
    throw bpfError('EEXIST', `program '${prog.name}': ${ifname} ${direction} already runs program ${same.progId} ` +
      `'${same.name}' not pinned at ${pinPath ?? '(no pin)'}; refusing to attach a second copy`, { attached: same });
  const fd = named(`program '${prog.name}': attach TC ${direction} to ${ifname}`, () =>
    n.linkCreate(prog.fd, ifindex, attachType, 0));
  pinNewLink(fd, prog, pinPath, 'TC link');
  return { api: 'tcx', direction, ifindex, linkId: n.linkInfo(fd).id, pinPath, replaced: false, ...linkAttachment(fd, pinPath) };
}

const tcxAttachType = (direction: 'ingress' | 'egress') =>
  direction === 'ingress' ? native().attachTcxIngress : native().attachTcxEgress;

/** The XDP program on `ifname`, or null. Foreign programs are reported too (name from the kernel). */
export function queryXdp(ifname: string): { progId: number; mode: string; name?: string } | null {
  const n = native();
  const ifindex = n.ifNameToIndex(ifname);
  const q = n.xdpQuery(ifindex);
  const progId = q.progId || q.drvProgId || q.skbProgId || q.hwProgId;
  if (!progId) return null;
  const info = n.progInfoById(progId);
  return { progId, mode: XDP_ATTACH_MODES[q.attachMode] ?? String(q.attachMode), name: info?.name };
}

/** Programs on the tcx ingress/egress hook of `ifname`, in run order. */
export function queryTc(ifname: string, direction: 'ingress' | 'egress'): Array<{ progId: number; name?: string }> {
  const n = native();
  const ifindex = n.ifNameToIndex(ifname);
  return n.progQuery(ifindex, tcxAttachType(direction)).map((progId) => ({ progId, name: n.progInfoById(progId)?.name }));
}

/** The program of a clsact filter at (handle, priority) on `ifname`, or null. */
export function queryTcClsact(ifname: string, direction: 'ingress' | 'egress', handle = 1, priority = 0xc0de):
  { progId: number; name?: string } | null {
  const n = native();
  const progId = n.tcClsactQuery(n.ifNameToIndex(ifname), direction === 'ingress', handle, priority);
  return progId === null ? null : { progId, name: n.progInfoById(progId)?.name };
}

/** Detaches and unpins a link pinned at `pinPath` (e.g. `gitlb down`); false when nothing is pinned there. */
export function detachPinnedLink(pinPath: string): boolean {
  if (!existsSync(pinPath)) return false;
  const n = native();
  const fd = n.objGet(pinPath);
  try {
    n.linkDetach(fd);
  } finally {
    n.closeFd(fd);
    unlinkSync(pinPath);
  }
  return true;
}

/**
 * Where the XDP link pinned at `pinPath` is attached: its ifindex and the mode the kernel reports for that
 * interface, with the link's id and the id of the program it runs. Null when nothing is pinned there or the pin is not an XDP link.
 */
export function pinnedXdpLink(pinPath: string): { ifindex: number; mode: string; linkId: number; progId: number } | null {
  if (!existsSync(pinPath)) return null;
  const n = native();
  const fd = n.objGet(pinPath);
  try {
    const li = n.linkInfo(fd);
    if (li.type !== LINK_TYPE_XDP) return null;
    const mode = li.ifindex ? (XDP_ATTACH_MODES[n.xdpQuery(li.ifindex).attachMode] ?? 'none') : 'none';
    return { ifindex: li.ifindex, mode, linkId: li.id, progId: li.progId };
  } finally {
    n.closeFd(fd);
  }
}

/** The ifindex of `ifname` (throws ENODEV-style errors naming the interface). */
export function interfaceIndex(ifname: string): number {
  return named(`interface '${ifname}'`, () => native().ifNameToIndex(ifname));
}
