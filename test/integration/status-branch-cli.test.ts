// `gitlb status` finds the status branch the config names (Cluster.spec.status.branch) without being told.
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const MAIN = join(import.meta.dirname, '..', '..', 'src', 'cli', 'main.ts');
const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...args], { cwd }).toString();

test('status and history read the branch named by the Cluster document', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-sb-'));
  try {
    const repo = join(dir, 'repo');
    cpSync(join(import.meta.dirname, '..', '..', 'sample-config-repo'), repo, { recursive: true });
    const cluster = join(repo, 'cluster.yaml');
    writeFileSync(cluster, readFileSync(cluster, 'utf8').replace('branch: gitlb-status', 'branch: lb-status'));
    git(repo, 'init', '-q', '-b', 'main');
    git(repo, 'add', '-A');
    git(repo, 'commit', '-qm', 'config');
    const rev = git(repo, 'rev-parse', 'HEAD').trim();
    git(repo, 'checkout', '-q', '--orphan', 'lb-status');
    git(repo, 'rm', '-rqf', '.');
    mkdirSync(join(repo, 'status'));
    writeFileSync(join(repo, 'status', 'lb-1.yaml'), `node: lb-1\nrole: lb\nappliedRevision: ${rev}\nappliedAt: 2026-11-29T10:00:00Z\nservices: []\n`);
    git(repo, 'add', '-A');
    git(repo, 'commit', '-qm', 'status(lb-1): applied', '--author', 'lb-1 <lb-1@gitlb.invalid>');
    git(repo, 'checkout', '-q', 'main');
    // The other four nodes of the sample wrote no status: exit 1, but lb-1's row comes from branch lb-status.
    const st = spawnSync(process.execPath, ['--import', 'tsx', MAIN, 'status', '--repo', repo], { encoding: 'utf8' });
    t.is(st.status, 1, st.stderr);
    t.regex(st.stdout, new RegExp(`lb-1\\s+lb\\s+\\S+\\s+${rev.slice(0, 12)}`));
    const hist = execFileSync(process.execPath, ['--import', 'tsx', MAIN, 'history', '--repo', repo]).toString();
    t.regex(hist, new RegExp(`lb-1\\s+${rev.slice(0, 12)}`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
