// VIP ownership on a backend node. For `l2` and `ipip` DSR the packets a backend receives are addressed to the
// VIP itself, so the VIP must be a local address. This module makes DesiredState.localVips true on the host:
// it adds each VIP as a /32 or /128 to a dedicated device — a `gitlb0` dummy interface when the kernel has
// dummy devices, otherwise `lo` — stops the node's interface from answering ARP for them (arp_ignore=1,
// arp_announce=2), relaxes a strict rp_filter to loose, and undoes all of it when the VIPs go away.
//
// It touches nothing it did not create: what it created (the device, each address, each sysctl with its
// previous value) is recorded in a state file *before* the change is made, and only recorded things are ever
// removed or restored. An address that was already there is reported as `foreign` and left alone.
import { runFile, type FileResult } from './run-file.js';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { DataPlane, ExecuteOptions, Op } from '../../bpf/dataplane/index.js';
import type { DesiredState } from '../../render/state.js';
import { canonicalIp } from '../../render/ip.js';

export const VIP_DEVICE = 'gitlb0';

export interface BackendVipsOptions {
  /** Where ownership is recorded, e.g. /run/gitlb/<node>/backend-vips.json. */
  stateFile: string;
  /** The node's interface (Node.spec.interface): gets arp_ignore/arp_announce and loose rp_filter. */
  nodeInterface: string;
  /** 'auto' (default): the gitlb0 dummy if the kernel can make one, else 'lo'. Or a device name to use. */
  device?: string;
  /** Run `ip`/`sysctl` inside this named network namespace (tests, lab). Default: our own namespace. */
  netns?: string;
}

export interface BackendVipsReport {
  device: string | null;
  added: string[];
  removed: string[];
  /** Desired VIPs already present on the device but not created by us: left as they are. */
  foreign: string[];
  /** Sysctls set (key -> value) and restored (key -> previous value) by this run. */
  sysctlsSet: Record<string, string>;
  sysctlsRestored: Record<string, string>;
  deviceCreated: boolean;
  deviceRemoved: boolean;
}

interface OwnershipState {
  version: 1;
  device: string | null;
  createdDevice: boolean;
  /** Addresses (canonical text, no prefix length) we added to `device`. */
  addresses: string[];
  /** sysctl key -> { value we set, value before us }. */
  sysctls: Record<string, { set: string; previous: string }>;
}

const EMPTY_STATE: OwnershipState = { version: 1, device: null, createdDevice: false, addresses: [], sysctls: {} };

class Host {
  constructor(private readonly netns?: string) {}

  private exec(argv: string[]): Promise<FileResult> {
    const full = this.netns ? ['ip', 'netns', 'exec', this.netns, ...argv] : argv;
    return runFile(full[0]!, full.slice(1), 15_000);
  }

  async run(argv: string[]): Promise<string> {
    const r = await this.exec(argv);
    if (r.code !== 0) throw new Error(`${argv.join(' ')} failed (exit ${r.code})${this.netns ? ` in netns ${this.netns}` : ''}: ${r.stderr.trim()}`);
    return r.stdout;
  }

  async tryRun(argv: string[]): Promise<{ ok: boolean; stderr: string }> {
    const r = await this.exec(argv);
    return { ok: r.code === 0, stderr: r.stderr.trim() };
  }

  async linkExists(dev: string): Promise<boolean> {
    return (await this.tryRun(['ip', 'link', 'show', 'dev', dev])).ok;
  }

  /** Addresses on `dev`, canonical text without prefix length. */
  async addresses(dev: string): Promise<string[]> {
    const out = await this.run(['ip', '-j', 'addr', 'show', 'dev', dev]);
    const parsed = JSON.parse(out || '[]') as Array<{ addr_info?: Array<{ local?: string }> }>;
    return parsed.flatMap((l) => (l.addr_info ?? []).map((a) => a.local).filter((a): a is string => !!a));
  }

  async sysctlGet(key: string): Promise<string> {
    return (await this.run(['sysctl', '-n', key])).trim();
  }

  async sysctlSet(key: string, value: string): Promise<void> {
    await this.run(['sysctl', '-q', '-w', `${key}=${value}`]);
  }
}

async function loadState(path: string): Promise<OwnershipState> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return structuredClone(EMPTY_STATE);
    throw e;
  }
  const s = JSON.parse(text) as OwnershipState;
  if (s.version !== 1 || !Array.isArray(s.addresses)) throw new Error(`${path}: not a gitlb backend-vips state file (version 1)`);
  return s;
}

/** Atomic write (temp file + rename), or removal when nothing is owned any more. */
async function saveState(path: string, s: OwnershipState): Promise<void> {
  if (!s.device && s.addresses.length === 0 && Object.keys(s.sysctls).length === 0) {
    await rm(path, { force: true });
    return;
  }
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, `${JSON.stringify(s, null, 2)}\n`);
  await rename(tmp, path);
}

/** sysctl keys in slash form, so interface names containing dots (eth0.100) stay one path element. */
function confKey(family: 'ipv4', dev: string, name: string): string {
  return `net/${family}/conf/${dev}/${name}`;
}

function prefixLen(addr: string): number {
  return addr.includes(':') ? 128 : 32;
}

/** Linux interface names (IFNAMSIZ 16): the same rule as the node schema. They end up in `ip` argv and in sysctl
 * key paths (net/ipv4/conf/<dev>/...), so a name with '/' or a leading '.' could name a different sysctl. */
const IFNAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;

function assertIfname(name: string, what: string): void {
  if (!IFNAME.test(name)) throw new Error(`${what} '${name}' is not a valid interface name`);
}

/** VIPs must be canonical addresses (DesiredState.localVips): nothing else reaches `ip addr`. */
function assertCanonicalAddress(addr: string): void {
  if (canonicalIp(addr) !== addr) throw new Error(`backend VIP '${addr}' is not a canonical IP address`);
}

/**
 * Makes the VIPs on the device equal `localVips` (canonical addresses, as in DesiredState.localVips), within
 * what this module owns. Idempotent; safe to call on every apply. `reconcileBackendVips([], opts)` undoes
 * everything it ever did (device, addresses, sysctls).
 */
export async function reconcileBackendVips(localVips: string[], opts: BackendVipsOptions): Promise<BackendVipsReport> {
  assertIfname(opts.nodeInterface, 'node interface');
  if (opts.device !== undefined && opts.device !== 'auto') assertIfname(opts.device, 'backend VIP device');
  localVips.forEach(assertCanonicalAddress);
  const host = new Host(opts.netns);
  const state = await loadState(opts.stateFile);
  const want = [...new Set(localVips)].sort();
  const report: BackendVipsReport = {
    device: state.device, added: [], removed: [], foreign: [], sysctlsSet: {}, sysctlsRestored: {},
    deviceCreated: false, deviceRemoved: false,
  };

  // 1. The device: chosen once and remembered, so a later run removes addresses from where it put them.
  if (!state.device && want.length > 0) {
    state.device = await chooseDevice(host, opts.device ?? 'auto', state, opts.stateFile);
    report.deviceCreated = state.createdDevice;
  }
  const dev = state.device;
  report.device = dev;

  if (dev) {
    const present = new Set(await host.addresses(dev));
    const owned = new Set(state.addresses);
    // 2. Add what is missing (record first: a crash after the record only leaves a no-op removal behind).
    for (const vip of want) {
      if (present.has(vip)) {
        if (!owned.has(vip)) report.foreign.push(vip);
        continue;
      }
      state.addresses = [...new Set([...state.addresses, vip])].sort();
      await saveState(opts.stateFile, state);
      const extra = vip.includes(':') ? ['nodad'] : [];
      await host.run(['ip', 'addr', 'add', `${vip}/${prefixLen(vip)}`, 'dev', dev, ...extra]);
      report.added.push(vip);
    }
    // 3. Remove what we added and is no longer wanted.
    for (const vip of state.addresses.filter((a) => !want.includes(a))) {
      if (present.has(vip)) await host.run(['ip', 'addr', 'del', `${vip}/${prefixLen(vip)}`, 'dev', dev]);
      state.addresses = state.addresses.filter((a) => a !== vip);
      await saveState(opts.stateFile, state);
      report.removed.push(vip);
    }
  }

  // 4. ARP and reverse-path filtering on the node's interface, while IPv4 VIPs are local.
  const needArp = want.some((v) => !v.includes(':'));
  await reconcileSysctls(host, state, opts, needArp, report);

  // 5. The device goes when it holds nothing of ours and we made it.
  if (dev && want.length === 0 && state.addresses.length === 0) {
    if (state.createdDevice && (await host.linkExists(dev))) {
      await host.run(['ip', 'link', 'del', dev]);
      report.deviceRemoved = true;
    }
    state.device = null;
    state.createdDevice = false;
  }
  await saveState(opts.stateFile, state);
  return report;
}

async function chooseDevice(host: Host, wanted: string, state: OwnershipState, stateFile: string): Promise<string> {
  if (wanted !== 'auto') {
    if (!(await host.linkExists(wanted))) throw new Error(`backend VIP device '${wanted}' does not exist`);
    return wanted;
  }
  // An existing gitlb0 is used but not owned: someone made it, it is not ours to delete.
  if (await host.linkExists(VIP_DEVICE)) return VIP_DEVICE;
  state.device = VIP_DEVICE;
  state.createdDevice = true;
  await saveState(stateFile, state);
  const made = await host.tryRun(['ip', 'link', 'add', VIP_DEVICE, 'type', 'dummy']);
  if (made.ok) {
    await host.run(['ip', 'link', 'set', VIP_DEVICE, 'up']);
    return VIP_DEVICE;
  }
  // No dummy driver (no loadable modules on some hosts): the loopback device holds the VIPs instead.
  state.device = null;
  state.createdDevice = false;
  await saveState(stateFile, state);
  return 'lo';
}

async function reconcileSysctls(host: Host, state: OwnershipState, opts: BackendVipsOptions, need: boolean, report: BackendVipsReport): Promise<void> {
  const ifc = opts.nodeInterface;
  // value we need, and whether a current value already satisfies it (effective value is max(all, dev)).
  const wanted: Array<{ key: string; value: string; satisfied: (cur: string) => boolean }> = [
    { key: confKey('ipv4', ifc, 'arp_ignore'), value: '1', satisfied: (c) => Number(c) >= 1 },
    { key: confKey('ipv4', ifc, 'arp_announce'), value: '2', satisfied: (c) => Number(c) >= 2 },
    // Strict (1) drops packets whose source would not be routed back out of the same interface; loose is enough.
    { key: confKey('ipv4', ifc, 'rp_filter'), value: '2', satisfied: (c) => c !== '1' },
  ];
  if (need) {
    for (const w of wanted) {
      const cur = await host.sysctlGet(w.key);
      const ours = state.sysctls[w.key];
      if (ours) {
        // Ours already; after a reboot (state kept, kernel reset) it needs setting again, original kept.
        if (!w.satisfied(cur)) {
          await host.sysctlSet(w.key, ours.set);
          report.sysctlsSet[w.key] = ours.set;
        }
        continue;
      }
      if (w.satisfied(cur)) continue;
      state.sysctls[w.key] = { set: w.value, previous: cur };
      await saveState(opts.stateFile, state);
      await host.sysctlSet(w.key, w.value);
      report.sysctlsSet[w.key] = w.value;
    }
    return;
  }
  for (const [key, rec] of Object.entries(state.sysctls)) {
    // Restore only if nobody changed it after us; either way it is no longer ours.
    const cur = await host.sysctlGet(key).catch(() => null); // the interface may be gone
    if (cur === rec.set) {
      await host.sysctlSet(key, rec.previous);
      report.sysctlsRestored[key] = rec.previous;
    }
    delete state.sysctls[key];
    await saveState(opts.stateFile, state);
  }
}

/**
 * A backend DataPlane whose execute() also keeps the local VIPs right (those of ExecuteOptions.desired, which
 * converge passes), in make-before-break order: VIPs that a new revision adds are made local before the maps send
 * traffic to them; VIPs it drops are released only after the maps no longer do. If the map execute fails, VIPs
 * added for it are released again and the error propagates.
 */
export function withBackendVips(dp: DataPlane, opts: BackendVipsOptions): DataPlane {
  let applied: string[] | null = null; // localVips of the last successful execute (null: not known in this process)
  const execute = async (ops: Op[], exec?: ExecuteOptions) => {
    const want = exec?.desired?.localVips;
    if (!want) return dp.execute(ops, exec);
    const before = applied ?? (await ownedVips(opts.stateFile));
    await reconcileBackendVips([...new Set([...before, ...want])], opts);
    let report;
    try {
      report = await dp.execute(ops, exec);
    } catch (e) {
      await reconcileBackendVips(before, opts).catch(() => undefined); // best effort; the apply error is what matters
      throw e;
    }
    await reconcileBackendVips(want, opts);
    applied = [...want];
    return report;
  };
  return {
    ...(dp.target && { target: dp.target }),
    execute,
    readLive: (o) => dp.readLive(o),
    tableSizes: () => dp.tableSizes(),
    counters: () => dp.counters(),
    close: () => dp.close(),
  };
}

/** The VIPs the state file says we added (what a previous daemon left local). */
async function ownedVips(stateFile: string): Promise<string[]> {
  return (await loadState(stateFile)).addresses;
}
