// Sets up the bench namespace (same lab as the table tests, plus neighbours for the bench's 100 reals), runs measure.ts inside it on CPU 1, tears down.
// XDP_BENCH_MEASURE names another measuring script of this directory to run there instead (real-stats-run uses it).
import { execFileSync, spawnSync } from 'node:child_process';
import { LAB, setupLab, teardownLab } from '../../test/lib/xdp-lab.js';
import { BENCH_REAL_COUNT, benchReal, benchRealMac } from './bench-reals.js';

const TAG = 'xdpb';
const { ns, pinRoot } = setupLab(TAG);
try {
  for (let i = 0; i < BENCH_REAL_COUNT; i++)
    execFileSync('ip', ['-n', ns, 'neigh', 'replace', benchReal(i), 'lladdr', benchRealMac(i), 'dev', LAB.lbA.name, 'nud', 'permanent']);
  const r = spawnSync('taskset', ['-c', '1', 'nsenter', `--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx',
    new URL(`./${process.env.XDP_BENCH_MEASURE ?? 'measure.ts'}`, import.meta.url).pathname, pinRoot, ...process.argv.slice(2)], { stdio: 'inherit', timeout: 600_000 });
  process.exitCode = r.status ?? 1;
} finally {
  teardownLab(TAG);
}
