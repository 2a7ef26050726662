// Sets up the SNAT bench namespace (the XDP lab plus a route back to the clients and neighbours for eight
// reals), runs snat-measure.ts (or SNAT_BENCH_MEASURE, e.g. snat-variants.ts) inside it on CPU 1, tears down.
import { execFileSync, spawnSync } from 'node:child_process';
import { LAB, setupLab, teardownLab } from '../../test/lib/xdp-lab.js';
import { BENCH_REALS, benchRealMac } from './snat-measure-state.js';

const TAG = 'snatb';
const { ns, pinRoot } = setupLab(TAG);
try {
  const ip = (...a: string[]) => execFileSync('ip', ['-n', ns, ...a], { stdio: ['ignore', 'ignore', 'pipe'] });
  ip('route', 'add', '192.0.2.0/25', 'via', '198.51.100.254', 'dev', LAB.lbA.name);
  BENCH_REALS.forEach((a, i) => ip('neigh', 'replace', a, 'lladdr', benchRealMac(i), 'dev', LAB.lbA.name, 'nud', 'permanent'));
  const r = spawnSync('taskset', ['-c', '1', 'nsenter', `--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx',
    new URL(`./${process.env.SNAT_BENCH_MEASURE ?? 'snat-measure.ts'}`, import.meta.url).pathname, pinRoot, ...process.argv.slice(2)], { stdio: 'inherit', timeout: 600_000 });
  process.exitCode = r.status ?? 1;
} finally {
  teardownLab(TAG);
}
