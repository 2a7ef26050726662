// Stale BPF pins of dead test runs and benches: a run that was killed (SIGKILL, a crashed ava worker, a machine
// under load timing out) leaves its pins under /sys/fs/bpf, and pinned maps, programs and links keep their kernel
// memory (and a pinned link keeps its program attached) until someone unlinks them. Runs name their pins after
// their pid, like their namespaces (netns.ts runPrefix), in three forms:
//   glb<pid>-...              benches and netns tests (often the namespace's own name)
//   gitlb-test-glb<pid>-...   test pin roots built from runPrefix()
//   gitlb-test-<pid>-...      test pin roots built from process.pid
// `gitlb lab clean` removes an entry of /sys/fs/bpf of one of these forms whose pid is not alive. Anything else —
// the daemons' /sys/fs/bpf/gitlb (the data plane outlives the daemon), a lab's pins under it, names carrying no
// pid, other software's pins — is never touched.
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pidAlive } from './netns.js';

export const BPFFS_ROOT = '/sys/fs/bpf';

const PIN_FORMS = [/^glb(\d+)-./, /^gitlb-test-glb(\d+)-./, /^gitlb-test-(\d+)-./];

/** The pid a pin's name says created it (one of the forms above), or null: such a name is never removed. */
export function pinCreatorPid(name: string): number | null {
  for (const form of PIN_FORMS) {
    const m = form.exec(name);
    if (m) {
      const pid = Number(m[1]);
      return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
    }
  }
  return null;
}

export interface CleanPinsOptions {
  /** The bpffs directory to look in (tests of this module only; default /sys/fs/bpf). */
  root?: string;
  /** Report what would be removed without removing it. */
  dryRun?: boolean;
}

/** Removes the entries directly under the bpffs root whose name carries a pid that is not alive (never this
 * process's). Returns their names. A missing root (bpffs not mounted) has nothing stale. */
export function cleanStalePins(opts: CleanPinsOptions = {}): string[] {
  const root = opts.root ?? BPFFS_ROOT;
  if (!existsSync(root)) return [];
  const stale = readdirSync(root).filter((name) => {
    const pid = pinCreatorPid(name);
    return pid !== null && pid !== process.pid && !pidAlive(pid);
  }).sort();
  // unlinking a pin drops the kernel object once no fd holds it; a directory goes with everything pinned in it
  if (!opts.dryRun) for (const name of stale) rmSync(join(root, name), { recursive: true, force: true });
  return stale;
}
