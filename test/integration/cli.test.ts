// The `gitlb` command line as a whole: exit statuses, help texts, a closed output pipe, shell completion.
import test from 'ava';
import { spawn, execFile } from 'node:child_process';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gitlb, gitlbInProcess as inProcess } from '../helpers/cli-repo.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const main = join(root, 'src/cli/main.ts');

test('every command documents exit statuses 0, 1 and 2 in its --help; usage errors exit 2, runtime failures 1', async (t) => {
  const top = await inProcess(['--help']);
  t.is(top.code, 0);
  const names = [...top.stdout.matchAll(/^ {2}([a-z]+) /gm)].map((m) => m[1]!).filter((n) => n !== 'help');
  for (const name of ['validate', 'render', 'plan', 'run', 'status', 'history', 'lab', 'completion']) t.true(names.includes(name), name);
  for (const name of names) {
    const h = await inProcess([name, '--help']);
    t.is(h.code, 0, name);
    t.regex(h.stdout, new RegExp(`^Usage: gitlb ${name} `), name);
    t.regex(h.stdout, /Exit status: 0 [^]*1 [^]*2 usage error/, name);
  }
  t.is((await inProcess([])).code, 2);
  const unknownCmd = await inProcess(['nosuch']);
  t.is(unknownCmd.code, 2);
  t.regex(unknownCmd.stderr, /^gitlb: unknown command 'nosuch'/);
  const unknownOpt = await inProcess(['plan', '--bogus']);
  t.is(unknownOpt.code, 2);
  t.regex(unknownOpt.stderr, /^gitlb plan: unknown option '--bogus'\n\(see: gitlb plan --help\)/);
  const missing = await inProcess(['render', '.']);
  t.is(missing.code, 2);
  t.regex(missing.stderr, /required option '--node <name>' not specified/);
  const labNoSub = await inProcess(['lab']);
  t.is(labNoSub.code, 2, 'a missing subcommand is a usage error');
  const failure = await inProcess(['plan', '--repo', '/nonexistent/repo', '--base', 'a', '--head', 'b']);
  t.is(failure.code, 1, 'an unreadable repository is a runtime failure, not a usage error');
  t.regex(failure.stderr, /^gitlb plan: /);
  // The same through a real process (bin/gitlb's path runs the same runCli).
  const spawned = await gitlb(['plan', '--repo', '/nonexistent/repo', '--base', 'a', '--head', 'b']);
  t.is(spawned.code, 1);
});

/** Runs the CLI with its stdout read end closed before it writes anything, as `gitlb … | head -0` would. */
function withClosedStdout(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ['--import', 'tsx', main, ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', fail);
    child.on('close', (code) => done({ code, stderr }));
  });
}

test('a closed output pipe ends every kind of command quietly (no EPIPE stack trace)', async (t) => {
  const cases = [
    ['validate', 'sample-config-repo'],
    ['render', 'sample-config-repo', '--node', 'lb-1', '--tables'],
    ['plan', '--base-dir', 'sample-config-repo', '--head-dir', 'sample-config-repo'],
  ];
  const results = await Promise.all(cases.map(withClosedStdout));
  for (const [i, r] of results.entries()) {
    t.is(r.stderr, '', cases[i]!.join(' '));
    t.is(r.code, 0, cases[i]!.join(' '));
  }
});

function complete(script: string, words: string[]): Promise<string[]> {
  const cword = words.length - 1;
  const program = `${script}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${cword}; _gitlb; printf '%s\\n' "\${COMPREPLY[@]}"`;
  return new Promise((done, fail) =>
    execFile('bash', ['--norc', '--noprofile', '-c', program], { cwd: root }, (err, stdout) => (err ? fail(err) : done(stdout.split('\n').filter(Boolean)))),
  );
}

test('gitlb completion bash completes commands, options, option choices and subcommands in a real bash', async (t) => {
  const r = await gitlb(['completion', 'bash']);
  t.is(r.code, 0, r.stderr);
  t.deepEqual(await complete(r.stdout, ['gitlb', 'pl']), ['plan']);
  t.deepEqual(await complete(r.stdout, ['gitlb', 'plan', '--format', '']), ['text', 'markdown', 'json']);
  t.deepEqual((await complete(r.stdout, ['gitlb', 'plan', '--base-'])).sort(), ['--base-dir']);
  t.deepEqual((await complete(r.stdout, ['gitlb', 'lab', ''])).filter((w) => !w.startsWith('-')).sort(), ['clean', 'down', 'status', 'up']);
  t.true((await complete(r.stdout, ['gitlb', 'run', '--'])).includes('--credentials-file'));
  const bad = await gitlb(['completion', 'fish']);
  t.is(bad.code, 2);
});
