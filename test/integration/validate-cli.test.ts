// `gitlb validate` end to end: the real CLI in a child process, its stdout and exit status.
import test from 'ava';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');
const main = join(root, 'src', 'cli', 'main.ts');
const fixtures = join(root, 'test', 'fixtures', 'config');

function gitlb(args: string[], cwd = root): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', main, ...args], { cwd, timeout: 100_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr });
    });
  });
}

test('the sample config repo is valid: exit 0', async (t) => {
  const r = await gitlb(['validate', 'sample-config-repo']);
  t.is(r.stdout, 'valid: 6 services, 5 nodes, 0 warnings\n');
  t.is(r.code, 0);
});

test('an invalid repo in the current directory: exact lines, count, exit 1', async (t) => {
  const dir = join(fixtures, 'invalid', 'health-check');
  const expected = readFileSync(join(dir, 'expected.txt'), 'utf8');
  const r = await gitlb(['validate'], dir);
  // The summary counts what the lines above it say (the fixture grows as checks are added).
  const count = (severity: string) => expected.split('\n').filter((l) => l.includes(`: ${severity}: `)).length;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  t.true(count('error') > 0);
  t.is(r.stdout, `${expected}invalid: ${plural(count('error'), 'error')}, ${plural(count('warning'), 'warning')}\n`);
  t.is(r.code, 1);
});

test('paths are shown under DIR; schema and semantic errors and warnings together', async (t) => {
  const rel = 'test/fixtures/config/invalid/table-size';
  const expected = readFileSync(join(root, rel, 'expected.txt'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => `${rel}/${l}\n`)
    .join('');
  const r = await gitlb(['validate', rel]);
  t.is(r.stdout, `${expected}invalid: 3 errors, 3 warnings\n`);
  t.is(r.code, 1);
});

test('warnings alone keep exit 0', async (t) => {
  const r = await gitlb(['validate', 'test/fixtures/config/valid/warnings']);
  t.is(r.code, 0);
  t.regex(r.stdout, /^test\/fixtures\/config\/valid\/warnings\/config\.yaml:33:3: warning: spec\.reals: all reals are disabled/m);
  t.regex(r.stdout, /^test\/fixtures\/config\/valid\/warnings\/config\.yaml:29:1: warning: spec\.healthCheck: none given, so no real of this service is checked/m);
  t.true(r.stdout.endsWith('valid: 3 services, 2 nodes, 7 warnings\n'));
});

test('--format json', async (t) => {
  const r = await gitlb(['validate', '--format', 'json', 'test/fixtures/config/invalid/two-clusters']);
  t.is(r.code, 1);
  t.deepEqual(JSON.parse(r.stdout), {
    valid: false,
    errors: 1,
    warnings: 0,
    diagnostics: [
      {
        severity: 'error',
        file: 'test/fixtures/config/invalid/two-clusters/more.yaml',
        line: 2,
        col: 7,
        message: 'more than one Cluster document (the first is at cluster.yaml:2:7)',
      },
    ],
  });
});

test('usage errors exit 2; --help exits 0', async (t) => {
  const cases = [['validate', '--format', 'xml'], ['validate', 'no/such/dir'], ['validate', 'a', 'b'], ['validate', '--bogus']];
  const results = await Promise.all(cases.map((args) => gitlb(args)));
  for (const [i, r] of results.entries()) {
    const args = cases[i]!;
    t.is(r.code, 2, args.join(' '));
    t.is(r.stdout, '', args.join(' '));
    t.regex(r.stderr, /^gitlb validate: /, args.join(' '));
  }
  const h = await gitlb(['validate', '--help']);
  t.is(h.code, 0);
  t.regex(h.stdout, /^Usage: gitlb validate \[options\] \[DIR\]/);
  t.regex(h.stdout, /Exit status: 0 valid .*1 invalid.*2 usage error/);
});
