// bpffs handling: pins only work on a bpf filesystem. /sys/fs/bpf is mounted on
// demand; any other pin root must already be on bpffs (tests mount their own).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readlinkSync, statfsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

const BPF_FS_MAGIC = 0xcafe4a11;
export const DEFAULT_BPFFS = '/sys/fs/bpf';

function codedError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

export function isBpffs(path: string): boolean {
  try {
    return statfsSync(path).type === BPF_FS_MAGIC;
  } catch {
    return false;
  }
}

/** Mounts a bpf filesystem at `dir` (created if missing) unless one is there already. */
export function mountBpffs(dir: string): void {
  if (isBpffs(dir)) return;
  mkdirSync(dir, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'bpf', 'bpf', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (e) {
    throw codedError('EPERM', `mount -t bpf at ${dir} failed: ${String((e as { stderr?: Buffer }).stderr ?? e).trim()}`);
  }
}

export function unmountBpffs(dir: string): void {
  if (!isBpffs(dir)) return;
  execFileSync('umount', [dir], { stdio: 'ignore' });
}

function nearestExisting(path: string): string {
  let p = resolve(path);
  while (!existsSync(p)) p = dirname(p);
  return p;
}

/**
 * True when this process runs under `ip netns exec`, which unshares the mount namespace and
 * mounts a fresh sysfs on /sys named after the namespace (source is not "sysfs").
 */
export function inIpNetnsExecMounts(): boolean {
  try {
    if (readlinkSync('/proc/self/ns/mnt') !== readlinkSync('/proc/1/ns/mnt')) return true;
  } catch {
    /* /proc/1 may be unreadable in containers: fall back to the /sys mount source */
  }
  try {
    const sys = readFileSync('/proc/self/mounts', 'utf8').split('\n').map((l) => l.split(' '))
      .filter((f) => f[1] === '/sys' && f[2] === 'sysfs');
    const last = sys[sys.length - 1];
    return last !== undefined && last[0] !== 'sysfs' && last[0] !== 'none';
  } catch {
    return false;
  }
}

/**
 * Why pins under `dir` cannot be seen from this process, when the reason is `ip netns exec`: it remounts /sys, so
 * /sys/fs/bpf here is an empty directory of a fresh sysfs, not the host's bpffs where the daemon pinned. Null when
 * `dir` is not below /sys/fs/bpf, that is on bpffs here, or the process is not under `ip netns exec`. Used by
 * `gitlb run` (ensurePinDir), `gitlb doctor` and `gitlb top`, so all three explain it the same way.
 */
export function netnsExecPinProblem(dir: string): string | null {
  const abs = resolve(dir);
  if (abs !== DEFAULT_BPFFS && !abs.startsWith(`${DEFAULT_BPFFS}/`)) return null;
  if (isBpffs(nearestExisting(abs)) || !inIpNetnsExecMounts()) return null;
  return `${DEFAULT_BPFFS} is not the host's bpffs in this mount namespace (ip netns exec remounts /sys), so the ` +
    `pins under ${abs} are not visible here. Enter the namespace with \`nsenter --net=/run/netns/NS\` (network ` +
    `only, keeps /sys), or pin on a bpffs mounted outside /sys before entering it: \`mkdir -p /run/gitlb/bpffs && ` +
    `mount -t bpf bpf /run/gitlb/bpffs\`, then --pin-root /run/gitlb/bpffs/gitlb`;
}

/**
 * Makes `dir` usable as a pin directory: mounts /sys/fs/bpf if `dir` is below it
 * and it is not mounted, then creates the directory. Refuses directories that are
 * not on bpffs (pinning there would fail with a less helpful EPERM).
 */
export function ensurePinDir(dir: string): string {
  const abs = resolve(dir);
  if (!isBpffs(nearestExisting(abs))) {
    if (abs === DEFAULT_BPFFS || abs.startsWith(`${DEFAULT_BPFFS}/`)) {
      // `ip netns exec` gives the process a fresh /sys; a bpffs mounted there would die with
      // the process and take the pins with it, which defeats pinning. Say so instead.
      const problem = netnsExecPinProblem(abs);
      if (problem) throw codedError('EXDEV', `${problem} (a bpffs mounted on /sys/fs/bpf here would vanish with the process, and the pins with it)`);
      mountBpffs(DEFAULT_BPFFS);
    }
    if (!isBpffs(nearestExisting(abs)))
      throw codedError('EINVAL', `pin directory ${abs} is not on a bpf filesystem (mount -t bpf bpf <dir>)`);
  }
  mkdirSync(abs, { recursive: true });
  return abs;
}
