// Which local lb node's pinned data plane a command reads (`gitlb top`, `gitlb capture`): the one named, or the
// only lb node pinned under the pin root.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { UsageError } from './command.js';
import { isLbPinRoot } from '../bpf/dataplane/pinned-stats.js';
import { netnsExecPinProblem } from '../bpf/bpffs.js';

export function lbPinDir(o: { node?: string; pinRoot: string }): { node: string; dir: string } {
  // Under `ip netns exec` /sys/fs/bpf is a fresh, empty sysfs directory: say that, not "nothing pinned".
  const hidden = netnsExecPinProblem(o.pinRoot);
  if (hidden) throw new Error(hidden);
  if (o.node) {
    const dir = join(o.pinRoot, o.node);
    if (!isLbPinRoot(dir)) throw new Error(`no lb data plane pinned in ${dir}`);
    return { node: o.node, dir };
  }
  let names: string[] = [];
  try {
    names = readdirSync(o.pinRoot).filter((n) => isLbPinRoot(join(o.pinRoot, n)));
  } catch {
    /* no pin root: reported below */
  }
  if (names.length === 1) return { node: names[0]!, dir: join(o.pinRoot, names[0]!) };
  if (names.length === 0) throw new Error(`no lb data plane pinned under ${o.pinRoot} (is gitlb run running here? --pin-root, --node)`);
  throw new UsageError(`several lb nodes are pinned under ${o.pinRoot} (${names.join(', ')}): pick one with --node`);
}
