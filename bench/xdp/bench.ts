// Sets up the bench namespace (same lab as the table tests), runs measure.ts inside it on CPU 1, tears down.
import { spawnSync } from 'node:child_process';
import { setupLab, teardownLab } from '../../test/lib/xdp-lab.js';

const TAG = 'xdpb';
const { ns, pinRoot } = setupLab(TAG);
try {
  const r = spawnSync('taskset', ['-c', '1', 'nsenter', `--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx',
    new URL('./measure.ts', import.meta.url).pathname, pinRoot, ...process.argv.slice(2)], { stdio: 'inherit', timeout: 600_000 });
  process.exitCode = r.status ?? 1;
} finally {
  teardownLab(TAG);
}
