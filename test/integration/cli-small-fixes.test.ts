// Small things a new user met: missing directories and files named by their option, doctor's URL printed once,
// `--path` help with one default, an indentation error at the key's column, history in time order.
import test from 'ava';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGitHttpServer } from '../../src/lab/git-http-server.js';
import { git, gitlbInProcess as gitlb } from '../helpers/cli-repo.js';

test.serial('plan --base-dir and verify --trust name the option and the path of what is missing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-small-'));
  try {
    const p = await gitlb(['plan', '--base-dir', join(dir, 'nope'), '--head-dir', dir]);
    t.is(p.code, 1);
    t.is(p.stderr, `gitlb plan: --base-dir ${join(dir, 'nope')}: no such directory\n`);
    const h = await gitlb(['plan', '--base-dir', dir, '--head-dir', join(dir, 'nope')]);
    t.is(h.stderr, `gitlb plan: --head-dir ${join(dir, 'nope')}: no such directory\n`);
    const v = await gitlb(['verify', '--trust', join(dir, 'keys')]);
    t.is(v.code, 1);
    t.is(v.stderr, `gitlb verify: --trust ${join(dir, 'keys')}: no such file\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('--path help shows its default once', async (t) => {
  for (const cmd of ['run', 'status', 'doctor', 'history', 'down']) {
    const h = await gitlb([cmd, '--help']);
    const help = h.stdout.replace(/\s+/g, ' ');
    t.regex(help, /--path <dir> subdirectory of the repository that holds gitlb's config \(default: the root\)/, cmd);
    t.notRegex(help, /\(default: ""\)|\(default: the root\) \(default/, cmd);
  }
});

test.serial('a key indented one space too far is reported at the key, not at column 1', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-small-'));
  try {
    writeFileSync(join(dir, 'web.yaml'), 'apiVersion: gitlb.dev/v1\nkind: Service\nmetadata:\n  name: web\n spec:\n  vip: 203.0.113.10\n');
    const r = await gitlb(['validate', dir]);
    t.is(r.code, 1);
    t.regex(r.stdout, /web\.yaml:5:2: error: invalid YAML: All mapping items must start at the same column/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('doctor names a failing remote once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-small-'));
  const served = await startGitHttpServer({ projectRoot: dir });
  try {
    const r = await gitlb(['doctor', '--repo', `${served.url}/nope.git`]);
    const line = r.stdout.split('\n').find((l) => /\bgit\b/.test(l) && l.includes('nope.git'))!;
    t.truthy(line, r.stdout);
    t.is(line.split(`${served.url}/nope.git`).length - 1, 1, line);
  } finally {
    await served.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial('history is in the order the nodes applied, whatever order their status pushes landed in', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-small-'));
  try {
    mkdirSync(join(dir, 'status'));
    await git(dir, 'init', '-q', '-b', 'gitlb-status');
    const write = async (node: string, rev: string, at: string) => {
      writeFileSync(join(dir, 'status', `${node}.yaml`), `node: ${node}\nrole: lb\nappliedRevision: ${rev}\nappliedAt: ${at}\nupdatedAt: ${at}\nservices: []\n`);
      await git(dir, 'add', '-A');
      await git(dir, '-c', `user.name=${node}`, 'commit', '-qm', `status(${node})`, `--author=${node} <${node}@gitlb.invalid>`);
    };
    // lb-1's push landed first but lb-2 applied earlier.
    await write('lb-1', 'a'.repeat(40), '2026-11-29T10:00:05Z');
    await write('lb-2', 'a'.repeat(40), '2026-11-29T10:00:01Z');
    const r = await gitlb(['history', '--repo', dir, '--status-branch', 'gitlb-status', '--json']);
    t.is(r.code, 0, r.stderr);
    t.deepEqual((JSON.parse(r.stdout) as { node: string }[]).map((e) => e.node), ['lb-2', 'lb-1']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
