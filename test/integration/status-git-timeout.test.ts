// `gitlb status` and `gitlb history` against a slow Git server: `--git-timeout` gives them more time, the config
// branch is fetched once, and a failed fetch of it is reported (not taken as "no config", which would read the
// default status branch instead). The server is git's own http-backend behind a proxy that holds chosen requests.
import test from 'ava';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGitHttpServer } from '../../src/lab/git-http-server.js';
import { git, gitlbInProcess as gitlb } from '../helpers/cli-repo.js';
import { slowProxy } from '../helpers/slow-git-proxy.js';

test('status and history: --git-timeout gives a slow server more time; the config branch is fetched once; its fetch failing is reported', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-slow-'));
  const served = await startGitHttpServer({ projectRoot: join(dir, 'root') , receivePack: false }).catch((e) => {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  const proxy = await slowProxy(served.url);
  try {
    // The config names its own status branch, so a fallback to gitlb-status would read nothing.
    const work = join(dir, 'work');
    cpSync(join(import.meta.dirname, '..', '..', 'sample-config-repo'), work, { recursive: true });
    const cluster = join(work, 'cluster.yaml');
    writeFileSync(cluster, readFileSync(cluster, 'utf8').replace('branch: gitlb-status', 'branch: lb-status'));
    await git(work, 'init', '-q', '-b', 'main');
    await git(work, 'add', '-A');
    await git(work, 'commit', '-qm', 'config');
    const rev = await git(work, 'rev-parse', 'HEAD');
    await git(work, 'checkout', '-q', '--orphan', 'lb-status');
    await git(work, 'rm', '-rqf', '.');
    mkdirSync(join(work, 'status'));
    writeFileSync(join(work, 'status', 'lb-1.yaml'), `node: lb-1\nrole: lb\nappliedRevision: ${rev}\nappliedAt: 2026-11-29T10:00:00Z\nservices: []\n`);
    await git(work, 'add', '-A');
    await git(work, 'commit', '-qm', 'status(lb-1): applied', '--author', 'lb-1 <lb-1@gitlb.invalid>');
    mkdirSync(join(dir, 'root'));
    await git(dir, 'clone', '-q', '--bare', work, join(dir, 'root', 'config.git'));
    const repo = `${proxy.url}/config.git`;
    const lb1Row = new RegExp(`lb-1\\s+lb\\s+\\S+\\s+${rev.slice(0, 12)}`);

    // Every fetch held 1.5 s: a 0.5 s deadline fails (and says so), a 60 s one reads the status.
    proxy.hold(() => true, 1500);
    const short = await gitlb(['status', '--repo', repo, '--git-timeout', '0.5']);
    t.is(short.code, 1, short.stderr);
    // The URL once: the deadline's message names it, the remote does not name it again in front.
    t.is(short.stderr, `gitlb status: fetch of main from ${repo} timed out after 500 ms\n`);
    t.is(short.stdout, '');
    proxy.hold(() => true, 1500);
    const long = await gitlb(['status', '--repo', repo, '--git-timeout', '60']);
    t.is(long.code, 1, long.stderr); // the sample's other four nodes wrote no status
    t.regex(long.stdout, lb1Row);
    t.is(proxy.fetches, 2, 'one fetch of the config branch (status branch and head), one of the status branch');
    proxy.hold(() => true, 1500);
    const hist = await gitlb(['history', '--repo', repo, '--git-timeout', '60']);
    t.is(hist.code, 0, hist.stderr);
    t.regex(hist.stdout, new RegExp(`lb-1\\s+${rev.slice(0, 12)}`));
    proxy.hold(() => true, 1500);
    const histShort = await gitlb(['history', '--repo', repo, '--git-timeout', '0.5']);
    t.is(histShort.code, 1);
    t.regex(histShort.stderr, /timed out after 500 ms/);

    // Only the first fetch (the config branch) is slow: its timeout is the error, not a silent read of gitlb-status.
    proxy.hold((n) => n === 1, 1500);
    const first = await gitlb(['status', '--repo', repo, '--git-timeout', '0.5']);
    t.is(first.code, 1);
    t.regex(first.stderr, /fetch of main from .* timed out after 500 ms/);
    t.is(first.stdout, '');
  } finally {
    await proxy.close();
    await served.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
