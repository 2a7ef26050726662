// `gitlb doctor` in a network namespace: a node that can run (veth, served config repository, secret) is ready;
// a missing interface and an unreachable remote fail with one line each. Nothing is pinned or attached.
import test from 'ava';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cleanupRun, createNetns, exec, nsExec, nsName, nsSpawn, vethPair } from '../../src/lab/netns.js';
import { nodeScriptArgv } from '../../src/lab/processes.js';
import { commitFiles, configFiles, git, servedRepo } from '../reconcile-helpers.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const MAIN = join(root, 'src/cli/main.ts');
const NS = nsName('doc');
const PEER = nsName('docp');
const PIN_ROOT = `/sys/fs/bpf/gitlb-test-${process.pid}-doctor`;

test.after.always(async () => {
  await cleanupRun();
  rmSync(PIN_ROOT, { recursive: true, force: true });
});

test('gitlb doctor: ready on a good node, NOT READY with one line per failed check; attaches nothing', async (t) => {
  await createNetns(NS);
  await createNetns(PEER);
  await vethPair({ ns: NS, name: 'eth0', addrs: ['198.51.100.1/24'] }, { ns: PEER, name: 'eth1', addrs: ['198.51.100.2/24'] });
  const repo = await servedRepo();
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-doctor-'));
  try {
    await commitFiles(repo.work, configFiles(['lb-1'], ['198.51.100.2']), 'config');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    // The node reaches its Git server from its own namespace: serve the same repositories from inside it.
    const server = nsSpawn(NS, nodeScriptArgv('servers/git-server', ['--root', repo.root, '--host', '127.0.0.1', '--port', '0']), { cwd: root });
    const url = await new Promise<string>((ok, fail) => {
      let out = '';
      server.stdout!.on('data', (d) => {
        out += d;
        const m = /git server (\S+) serving/.exec(out);
        if (m) ok(`${m[1]}/config.git`);
      });
      server.once('exit', (code) => fail(new Error(`git server exited ${code}`)));
    });
    const secret = join(dir, 'secret');
    writeFileSync(secret, 's3cret-of-20-chars!\n');
    const doctor = (args: string[]) => nsExec(NS, [process.execPath, '--import', 'tsx', MAIN, 'doctor', '--pin-root', PIN_ROOT, ...args], { cwd: root, timeoutMs: 120_000 });
    const [good, bad] = await Promise.all([
      doctor(['--interface', 'eth0', '--repo', url, '--node', 'lb-1', '--webhook-secret-file', secret]),
      doctor(['--interface', 'eth9', '--repo', 'http://127.0.0.1:9/none.git', '--git-timeout', '5s']),
    ]);
    t.is(good.code, 0, good.stdout + good.stderr);
    for (const line of [
      /^OK {4}kernel +\d+\.\d+/m,
      /^OK {4}bpffs +/m,
      /^OK {4}capabilities +CAP_NET_ADMIN CAP_SYS_ADMIN CAP_PERFMON CAP_BPF$/m,
      /^OK {4}bpf lb +xdp_lb\.o loads/m,
      /^OK {4}interface +eth0: up, mtu 1500$/m,
      /^OK {4}xdp mode +eth0: driver veth supports native XDP/m,
      /^OK {4}git +http:\/\/127\.0\.0\.1:\d+\/config\.git: branch main at [0-9a-f]{12}$/m,
      /^OK {4}config +head [0-9a-f]{12} validates; Node 'lb-1' is lb on eth0$/m,
      /^OK {4}webhook secret +.*secret \(19 characters\)$/m,
      /^verdict: ready/m,
    ]) t.regex(good.stdout, line);
    t.is(bad.code, 1, bad.stdout + bad.stderr);
    t.regex(bad.stdout, /^FAIL {2}interface +eth9: no such interface in this network namespace$/m);
    t.regex(bad.stdout, /^FAIL {2}git +http:\/\/127\.0\.0\.1:9\/none\.git: /m);
    t.regex(bad.stdout, /^verdict: NOT READY \(2 failed, \d+ warnings\)$/m);
    t.false(existsSync(PIN_ROOT), 'nothing pinned');
    t.false((await exec(['ip', '-n', NS, '-d', 'link', 'show', 'dev', 'eth0'])).stdout.includes('prog/xdp'), 'nothing attached');
  } finally {
    await repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
