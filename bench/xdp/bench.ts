// Sets up the bench namespace (same lab as the table tests, plus neighbours for the bench's 100 reals), runs measure.ts inside it on CPU 1, tears down.
// XDP_BENCH_MEASURE names another measuring script of this directory to run there instead (real-stats-run uses it).
// XDP_BENCH_NOISE=cache runs bench/xdp/noise.ts on the same CPU while it measures (XDP_BENCH_NOISE_MIB, default 8).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { LAB, setupLab, teardownLab } from '../../test/lib/xdp-lab.js';
import { BENCH_REAL_COUNT, benchReal, benchRealMac } from './bench-reals.js';

const TAG = 'xdpb';
// checked before the lab exists: a bad value must not leave the namespace and pins behind
if (process.env.XDP_BENCH_NOISE && process.env.XDP_BENCH_NOISE !== 'cache') throw new Error(`XDP_BENCH_NOISE=${process.env.XDP_BENCH_NOISE}: only 'cache' is defined`);
const { ns, pinRoot } = setupLab(TAG);
const noiseMib = Number(process.env.XDP_BENCH_NOISE_MIB ?? 8);
const noise = process.env.XDP_BENCH_NOISE === 'cache'
  ? spawn('taskset', ['-c', '1', process.execPath, '--import', 'tsx', new URL('./noise.ts', import.meta.url).pathname, String(noiseMib)], { stdio: 'ignore' })
  : null;
if (noise) console.log(`background load: bench/xdp/noise.ts (pid ${noise.pid}) walking ${noiseMib} MiB on CPU 1, the measurements' CPU, at the same priority`);
try {
  for (let i = 0; i < BENCH_REAL_COUNT; i++)
    execFileSync('ip', ['-n', ns, 'neigh', 'replace', benchReal(i), 'lladdr', benchRealMac(i), 'dev', LAB.lbA.name, 'nud', 'permanent']);
  const r = spawnSync('taskset', ['-c', '1', 'nsenter', `--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx',
    new URL(`./${process.env.XDP_BENCH_MEASURE ?? 'measure.ts'}`, import.meta.url).pathname, pinRoot, ...process.argv.slice(2)], { stdio: 'inherit', timeout: 600_000 });
  process.exitCode = r.status ?? 1;
} finally {
  noise?.kill();
  teardownLab(TAG);
}
