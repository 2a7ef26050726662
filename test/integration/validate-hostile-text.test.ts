// `gitlb validate` (bin/gitlb, as operators run it) facing a hostile checkout: config text with terminal escapes is
// printed escaped, and a --path that is a symbolic link leading out of the repository is refused, while a link
// that stays inside, and a plain subdirectory, still validate.
import test from 'ava';
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'gitlb');

function gitlb(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(bin, args, { cwd: root, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr });
    });
  });
}

const dirs: string[] = [];
test.after.always(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'gitlb-validate-hostile-'));
  dirs.push(d);
  return d;
}

test('config values with terminal escapes are printed escaped (text and JSON); the file is still named', async (t) => {
  const repo = tmp();
  cpSync(join(root, 'sample-config-repo'), repo, { recursive: true });
  writeFileSync(join(repo, 'services', 'evil.yaml'),
    'apiVersion: gitlb/v1\nkind: "Serv\\e]0;pwned\\aice\\e[2J"\nmetadata: {name: "x\\u202Eyz"}\nspec: {}\n');
  const text = await gitlb(['validate', repo]);
  t.is(text.code, 1);
  t.false(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/.test(text.stdout), JSON.stringify(text.stdout));
  t.true(text.stdout.includes(`${join(repo, 'services', 'evil.yaml')}:2:7: error: kind: unknown kind 'Serv\\x1b]0;pwned\\x07ice\\x1b[2J'`), text.stdout);
  const json = await gitlb(['validate', '--format', 'json', repo]);
  t.false(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/.test(json.stdout));
  const parsed = JSON.parse(json.stdout) as { diagnostics: { message: string }[] };
  t.true(parsed.diagnostics.some((d) => d.message.includes('\\x1b]0;pwned\\x07ice')));
  // Benign: the sample config's output is unchanged.
  const sample = await gitlb(['validate', join(root, 'sample-config-repo')]);
  t.deepEqual([sample.code, sample.stdout], [0, 'valid: 6 services, 5 nodes, 0 warnings\n']);
});

test('--path through a symbolic link out of the repository is refused; a link inside it and a plain directory validate', async (t) => {
  const outside = tmp();
  cpSync(join(root, 'sample-config-repo'), outside, { recursive: true });
  const repo = tmp();
  cpSync(join(root, 'sample-config-repo'), join(repo, 'real'), { recursive: true });
  symlinkSync(outside, join(repo, 'out'));
  symlinkSync('real', join(repo, 'in'));
  const out = await gitlb(['validate', '--path', 'out', repo]);
  t.is(out.code, 2);
  t.is(out.stdout, '');
  t.true(out.stderr.includes(`--path out: leads outside ${repo} (a symbolic link, to `) && out.stderr.includes('refused'), out.stderr);
  // The same through a link in the middle of the path.
  const nested = await gitlb(['validate', '--path', 'out/services', repo]);
  t.is(nested.code, 2);
  for (const path of ['in', 'real']) {
    const r = await gitlb(['validate', '--path', path, repo]);
    t.deepEqual([r.code, r.stdout], [0, 'valid: 6 services, 5 nodes, 0 warnings\n'], path);
  }
});
