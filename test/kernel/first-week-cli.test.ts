// Issue 17, as a new user meets it: each rough edge through the CLI (in process: the same dispatcher as bin/gitlb),
// on real directories and real Git repositories.
import test from 'ava';
import { mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gitlbInProcess as gitlb, tempDir, writeTree, git } from '../helpers/cli-repo.js';
import { configFiles as repoFiles, servedRepo, commitFiles, tempDir as tempPath } from '../reconcile-helpers.js';

const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-firstweek`;
test.after.always(() => rmSync(PIN_BASE, { recursive: true, force: true }));

const webReals = ['198.51.100.1', '198.51.100.2', '198.51.100.3'];
const files = () => repoFiles(['lb-1'], webReals);

test.serial('--path DIR: a config beside other YAML validates, renders and plans from its subdirectory only', async (t) => {
  const dir = await tempDir('path');
  try {
    await writeTree(dir.path, { 'ci/pipeline.yaml': 'stages: [test]\n', ...Object.fromEntries(Object.entries(files()).map(([p, c]) => [`lb/${p}`, c])) });
    const whole = await gitlb(['validate', dir.path]);
    t.is(whole.code, 1);
    t.regex(whole.stdout, /ci\/pipeline\.yaml:1:1: error: missing required field 'kind'/);
    const sub = await gitlb(['validate', dir.path, '--path', 'lb']);
    t.is(sub.code, 0, sub.stdout);
    t.regex(sub.stdout, /^valid: 1 service, 1 node/m);
    const rendered = await gitlb(['render', dir.path, '--path', 'lb/', '--node', 'lb-1', '--format', 'json']);
    t.is(rendered.code, 0, rendered.stderr);
    t.is(JSON.parse(rendered.stdout).node, 'lb-1');
    const escape = await gitlb(['validate', dir.path, '--path', '../x']);
    t.is(escape.code, 2);
    t.regex(escape.stderr, /--path.*must stay inside the repository/);

    await git(dir.path, 'init', '-q', '-b', 'main');
    await git(dir.path, 'add', '-A');
    await git(dir.path, 'commit', '-qm', 'base');
    writeFileSync(join(dir.path, 'lb/services/web.yaml'), repoFiles(['lb-1'], webReals.slice(1))['services/web.yaml']!);
    await git(dir.path, 'commit', '-qam', 'drop a real');
    const plan = await gitlb(['plan', '--repo', dir.path, '--path', 'lb', '--base', 'HEAD~1', '--head', 'HEAD']);
    t.is(plan.code, 0, plan.stderr);
    t.regex(plan.stdout, /real 198\.51\.100\.1 removed/);
    const noPath = await gitlb(['plan', '--repo', dir.path, '--base', 'HEAD~1', '--head', 'HEAD']);
    t.is(noPath.code, 1, 'without --path the CI file makes the head invalid');
    const missing = await gitlb(['plan', '--repo', dir.path, '--path', 'nope', '--base', 'HEAD~1', '--head', 'HEAD']);
    t.is(missing.code, 1);
    t.regex(missing.stderr, /config path 'nope' is not a directory in revision/);
  } finally {
    await dir.remove();
  }
});

test.serial('gitlb run/status/history --path, history shows author and subject, an unknown --node is an error', async (t) => {
  const repo = await servedRepo();
  const cache = await tempPath('firstweek-run');
  try {
    const inLb = (f: Record<string, string>) => Object.fromEntries(Object.entries(f).map(([p, c]) => [`lb/${p}`, c]));
    await commitFiles(repo.work, { 'ci/pipeline.yaml': 'stages: [test]\n', ...inLb(files()) }, 'ignored');
    await git(repo.work, 'commit', '-q', '--allow-empty', '--author', 'Alice Example <alice@example.invalid>', '-m', 'web: three reals\n\nbody text');
    const head = await git(repo.work, 'rev-parse', 'HEAD');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const run = await gitlb(['run', '--repo', repo.url, '--path', 'lb', '--node', 'lb-1', '--role', 'lb', '--pin-root', PIN_BASE, '--cache-dir', cache, '--once']);
    t.is(run.code, 0, run.stderr + run.stdout);
    t.regex(run.stdout, new RegExp(`applied ${head}`));

    const status = await gitlb(['status', '--repo', repo.url, '--path', 'lb', '--format', 'json']);
    t.is(JSON.parse(status.stdout).nodes[0].applied, head, status.stderr);
    t.is(status.code, 0, status.stdout);
    const history = await gitlb(['history', '--repo', repo.url, '--path', 'lb']);
    t.is(history.code, 0, history.stderr);
    t.regex(history.stdout, /AUTHOR\s+SUBJECT/);
    t.regex(history.stdout, new RegExp(`lb-1\\s+${head.slice(0, 12)}\\s+\\w{12}\\s+Alice Example <alice@example\\.invalid>\\s+web: three reals\\s+\\(not verified\\)\\n`)); // SIGNED BY: no verification configured
    const unknown = await gitlb(['history', '--repo', repo.url, '--path', 'lb', '--node', 'nosuch']);
    t.is(unknown.code, 1);
    t.regex(unknown.stderr, /gitlb history: no node 'nosuch' in the config of branch 'main'/);
    const known = await gitlb(['history', '--repo', repo.url, '--path', 'lb', '--node', 'lb-1', '--json']);
    t.is(known.code, 0);
    t.is(JSON.parse(known.stdout)[0].subject, 'web: three reals');
  } finally {
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});

test.serial('a VIP:port claimed twice is reported at both places; a tab is reported on its line; an empty file warns', async (t) => {
  const dir = await tempDir('diag');
  try {
    const f = files();
    await writeTree(dir.path, {
      ...f,
      'services/api.yaml': f['services/web.yaml']!.replace('name: web', 'name: api'),
      'services/empty.yaml': '# retired\n',
    });
    const dup = await gitlb(['validate', dir.path]);
    t.is(dup.code, 1);
    const lines = dup.stdout.trim().split('\n');
    t.true(lines.some((l) => /services\/web\.yaml:\d+:\d+: error: spec\.ports\[0\]: 203\.0\.113\.10:80\/TCP is already served by service 'api' \(.*services\/api\.yaml:\d+:\d+\)/.test(l)), dup.stdout);
    t.true(lines.some((l) => /services\/api\.yaml:\d+:\d+: error: spec\.ports\[0\]: 203\.0\.113\.10:80\/TCP is also claimed by service 'web' \(.*services\/web\.yaml:\d+:\d+\)/.test(l)), dup.stdout);
    t.true(lines.some((l) => /services\/empty\.yaml:1:1: warning: no YAML document in this file/.test(l)), dup.stdout);
    t.regex(lines.at(-1)!, /^invalid: 2 errors, \d+ warnings?$/); // one clash, reported at both claimants
    t.false(lines.some((l) => / note: /.test(l) && / error: /.test(l)), 'a note is not counted as an error');

    rmSync(join(dir.path, 'services/api.yaml'));
    const web = f['services/web.yaml']!.split('\n');
    const dispatch = web.findIndex((l) => l.startsWith('  dispatch:'));
    web[dispatch] = web[dispatch]!.replace(/^ +/, '\t');
    writeFileSync(join(dir.path, 'services/web.yaml'), web.join('\n'));
    const tab = await gitlb(['validate', dir.path]);
    t.is(tab.code, 1);
    t.regex(tab.stdout, new RegExp(`^${dir.path}/services/web\\.yaml:${dispatch + 1}:1: error: invalid YAML: a tab in the indentation`, 'm'));
    t.notRegex(tab.stdout, new RegExp(`web\\.yaml:(?!${dispatch + 1}:)\\d+:\\d+: error`), 'no error on another line');
  } finally {
    await dir.remove();
  }
});

test.serial('a YAML symlink is refused the same way from a directory (validate) and from Git objects (plan, the daemon)', async (t) => {
  const dir = await tempDir('symlink');
  try {
    await writeTree(dir.path, files());
    mkdirSync(join(dir.path, 'shared'));
    writeFileSync(join(dir.path, 'shared/web.txt'), files()['services/web.yaml']!);
    rmSync(join(dir.path, 'services/web.yaml'));
    symlinkSync('../shared/web.txt', join(dir.path, 'services/web.yaml'));
    const fromDir = await gitlb(['validate', dir.path]);
    t.is(fromDir.code, 1);
    const message = "error: a symbolic link (to '../shared/web.txt'): config files must be regular files";
    t.true(fromDir.stdout.includes(`services/web.yaml:1:1: ${message}`), fromDir.stdout);
    await git(dir.path, 'init', '-q', '-b', 'main');
    await git(dir.path, 'add', '-A');
    await git(dir.path, 'commit', '-qm', 'linked');
    const fromGit = await gitlb(['plan', '--repo', dir.path, '--base', 'HEAD', '--head', 'HEAD']);
    t.is(fromGit.code, 1);
    t.true(fromGit.stdout.includes(`services/web.yaml:1:1: ${message}`), fromGit.stdout);
  } finally {
    await dir.remove();
  }
});

test.serial('gitlb init DIR writes a repository that validates, with schema modelines and a README; never overwrites', async (t) => {
  const dir = await tempDir('init');
  try {
    const target = join(dir.path, 'lb-config');
    const r = await gitlb(['init', target]);
    t.is(r.code, 0, r.stderr);
    const v = await gitlb(['validate', target]);
    t.is(v.code, 0, v.stdout);
    t.regex(v.stdout, /^valid: 1 service, 2 nodes, 0 warnings/);
    const { readFileSync, existsSync } = await import('node:fs');
    t.regex(readFileSync(join(target, 'services/web.yaml'), 'utf8'), /^# yaml-language-server: \$schema=\.\.\/schemas\/service\.schema\.json/);
    t.true(existsSync(join(target, 'schemas/service.schema.json')));
    t.regex(readFileSync(join(target, 'README.md'), 'utf8'), /gitlb validate/);
    const again = await gitlb(['init', target]);
    t.is(again.code, 1);
    t.true(again.stderr.includes(`gitlb init: refusing to overwrite ${join(target, 'cluster.yaml')}, `), again.stderr);

    // One existing file (a team's own schema) in an otherwise empty DIR: named, untouched, and nothing else written.
    const other = join(dir.path, 'other');
    mkdirSync(join(other, 'schemas'), { recursive: true });
    writeFileSync(join(other, 'schemas/node.schema.json'), 'ours\n');
    const refused = await gitlb(['init', other]);
    t.is(refused.code, 1);
    t.is(refused.stderr, `gitlb init: refusing to overwrite ${join(other, 'schemas/node.schema.json')}; nothing written\n`);
    t.is(readFileSync(join(other, 'schemas/node.schema.json'), 'utf8'), 'ours\n');
    t.deepEqual(readdirSync(other, { recursive: true }).sort(), ['schemas', 'schemas/node.schema.json']);
    const help = await gitlb(['init', '--help']);
    t.regex(help.stdout, /1 DIR already holds one of the files \(nothing written\)/);
  } finally {
    await dir.remove();
  }
});

test.serial('plan: health-check changes field by field; a new Maglev identity port is explained', async (t) => {
  const a = await tempDir('plan-a');
  const b = await tempDir('plan-b');
  try {
    const base = files();
    base['services/web.yaml'] = base['services/web.yaml']!.replace('  reals:', '  healthCheck: { type: tcp, interval: 2s, fall: 3 }\n  reals:');
    await writeTree(a.path, base);
    const head = { ...base };
    head['services/web.yaml'] = base['services/web.yaml']!.replace('port: 80,', 'port: 8080,').replace('interval: 2s', 'interval: 5s');
    await writeTree(b.path, head);
    const r = await gitlb(['plan', '--base-dir', a.path, '--head-dir', b.path]);
    t.is(r.code, 0, r.stderr + r.stdout);
    t.regex(r.stdout, /^ {2}healthCheck\.intervalMs: 2000 -> 5000$/m);
    t.regex(r.stdout, /^ {2}healthCheck\.port: 80 -> 8080$/m);
    t.notRegex(r.stdout, /healthCheck: \{/, 'no JSON blob');
    t.regex(r.stdout, /maglev identity port: 80\/TCP -> 8080\/TCP/);
    t.regex(r.stdout, /why: The Maglev identity port changed \(80\/TCP -> 8080\/TCP\).*\d+\.\d% of new connections land on a different real/);
    const md = await gitlb(['plan', '--base-dir', a.path, '--head-dir', b.path, '--format', 'markdown']);
    t.regex(md.stdout, /- The Maglev identity port changed/);
  } finally {
    await a.remove();
    await b.remove();
  }
});

test.serial('--credentials-file: a missing file, a directory and an empty file are errors naming the option and the file', async (t) => {
  const dir = await tempDir('creds');
  try {
    const empty = join(dir.path, 'token');
    writeFileSync(empty, '\n# nothing\n');
    const cases: [string, RegExp][] = [
      [join(dir.path, 'missing'), /--credentials-file .*missing: cannot read: no such file/],
      [dir.path, /--credentials-file .*creds-\w+: cannot read: is a directory/],
      [empty, /--credentials-file .*token: the file is empty/],
    ];
    for (const [file, message] of cases) {
      const r = await gitlb(['status', '--repo', 'http://127.0.0.1:9/x.git', '--credentials-file', file]);
      t.is(r.code, 1, file);
      t.regex(r.stderr, message);
    }
  } finally {
    await dir.remove();
  }
});
