// Bounded work before refusal: `gitlb validate` of a hostile config is refused by the counts taken before parsing
// (src/render/config/prescan.ts), within 256 MiB of peak RSS and 2 s of CPU, and names the file and the limit.
// The bound is what is asserted, not a speed: the child's peak RSS and CPU time come from /usr/bin/time (GNU), CPU
// rather than wall time because the machine is shared (wall time is logged beside it). The benign side: the
// sample config and a large config just below the limits still validate.
import test from 'ava';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LIMITS } from '../../src/render/config/limits.js';

const root = join(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'gitlb');
const MiB = 1024 * 1024;

interface Measured { code: number; stdout: string; rssKiB: number; cpuS: number; wallS: number }

/** bin/gitlb (the built dist/, as operators run it) under GNU time: exit status, stdout, peak RSS, CPU and wall time. */
function measured(args: string[]): Promise<Measured> {
  return new Promise((resolve, reject) => {
    execFile('/usr/bin/time', ['-f', 'GITLB_TIME %M %U %S %e', bin, ...args], { cwd: root, timeout: 120_000, maxBuffer: 64 * MiB },
      (err, stdout, stderr) => {
        const m = /GITLB_TIME (\d+) ([\d.]+) ([\d.]+) ([\d.]+)/.exec(stderr);
        if (!m) return reject(new Error(`no figures from /usr/bin/time: ${stderr.slice(-500)}`));
        resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, rssKiB: Number(m[1]), cpuS: Number(m[2]) + Number(m[3]), wallS: Number(m[4]) });
      });
  });
}

const dirs: string[] = [];
test.after.always(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

/** The sample config plus `files` (path -> text) in a fresh temporary directory. */
function repo(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-validate-bounds-'));
  dirs.push(dir);
  cpSync(join(root, 'sample-config-repo'), dir, { recursive: true });
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

/**
 * `services` SNAT services of `reals` reals each, one file per service; the reals as one flow sequence, the
 * densest plain form (89 x 4096 of them fit in 8 MiB).
 */
function bigServices(services: number, reals: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (let s = 0; s < services; s++) {
    const list = Array.from({ length: reals }, (_, r) => `{address: 10.${s}.${r >> 8}.${r & 255}}`).join(',');
    out[`services/big${s}.yaml`] = ['apiVersion: gitlb/v1', 'kind: Service', `metadata: { name: big${s} }`, 'spec:',
      `  vip: 203.0.113.${100 + (s % 100)}`, `  ports: [{ port: ${1000 + s}, protocol: TCP }]`, '  dispatch: { mode: snat }',
      `  reals: [${list}]`, ''].join('\n');
  }
  return out;
}

const RSS_BOUND_KIB = 256 * 1024;
const CPU_BOUND_S = 2;

test('an 8 MB over-capacity config (89 services x 4096 reals) is refused before parsing, under 256 MiB peak RSS', async (t) => {
  const files = bigServices(89, 4096);
  const bytes = Object.values(files).reduce((n, s) => n + s.length, 0);
  t.true(bytes > 7.5 * MiB && bytes < LIMITS.maxTotalBytes, `${bytes} bytes: under the byte cap, so the counts must refuse it`);
  const r = await measured(['validate', repo(files)]);
  t.log(`${(bytes / MiB).toFixed(1)} MiB: peak RSS ${(r.rssKiB / 1024).toFixed(0)} MiB, CPU ${r.cpuS.toFixed(2)} s, wall ${r.wallS.toFixed(2)} s`);
  t.is(r.code, 1);
  // three entries per real in this form: the entries count is passed first (the reals count: test/integration/config-reals-limit)
  t.regex(r.stdout, new RegExp(`/services/big\\d+\\.yaml:1:1: error: with this file the repository holds more than ${LIMITS.maxYamlEntries} YAML entries in total; refused before parsing\\n`));
  t.true(r.rssKiB < RSS_BOUND_KIB, `peak RSS ${r.rssKiB} KiB`);
  t.true(r.cpuS < CPU_BOUND_S, `CPU ${r.cpuS} s`);
});

test('8 MiB of tiny YAML documents are refused in under 2 s, in big files and in many small ones', async (t) => {
  const doc = '---\na: 1\n';
  const perFile = (bytes: number) => doc.repeat(Math.floor(bytes / doc.length));
  const cases: [string, Record<string, string>, RegExp][] = [
    ['8 files of 1 MiB', Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`services/tiny${i}.yaml`, perFile(MiB - 4096)])),
      new RegExp(`/services/tiny0\\.yaml:2001:1: error: more than ${LIMITS.maxDocumentsPerFile} YAML documents in one file; refused before parsing\\n`)],
    // Each file under the per-file count: the revision's total refuses them.
    ['900 files of 9 KiB', Object.fromEntries(Array.from({ length: 900 }, (_, i) => [`services/tiny${String(i).padStart(3, '0')}.yaml`, perFile(900 * doc.length)])),
      new RegExp(`/services/tiny\\d+\\.yaml:1:1: error: with this file the repository holds more than ${LIMITS.maxDocuments} YAML documents in total; refused before parsing\\n`)],
  ];
  for (const [name, files, expected] of cases) {
    const r = await measured(['validate', repo(files)]);
    t.log(`${name}: peak RSS ${(r.rssKiB / 1024).toFixed(0)} MiB, CPU ${r.cpuS.toFixed(2)} s, wall ${r.wallS.toFixed(2)} s`);
    t.is(r.code, 1, name);
    t.regex(r.stdout, expected, name);
    t.true(r.cpuS < CPU_BOUND_S, `${name}: CPU ${r.cpuS} s`);
    t.true(r.rssKiB < RSS_BOUND_KIB, `${name}: peak RSS ${r.rssKiB} KiB`);
  }
});

test('benign: the sample config and a large config just below the limits (15 services x 4096 reals) validate', async (t) => {
  const sample = await measured(['validate', join(root, 'sample-config-repo')]);
  t.is(sample.stdout, 'valid: 6 services, 5 nodes, 0 warnings\n');
  t.is(sample.code, 0);
  const large = await measured(['validate', repo(bigServices(15, 4096))]);
  t.log(`15 x 4096 reals: peak RSS ${(large.rssKiB / 1024).toFixed(0)} MiB, CPU ${large.cpuS.toFixed(2)} s, wall ${large.wallS.toFixed(2)} s`);
  t.is(large.stdout.split('\n').filter((l) => l.includes(': error: ')).join('\n'), '');
  t.regex(large.stdout, /^valid: 21 services, 5 nodes/m);
  t.is(large.code, 0);
});
