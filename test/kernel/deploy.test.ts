// deploy/ is code: `make install` gives a working tree and a unit systemd accepts; the DaemonSet's arguments are
// accepted by `gitlb run`; the Dockerfile's runtime stage copies what exists; the CI snippets' gitlb commands work
// on a real pull-request-shaped repository.
import test from 'ava';
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';
import { gitlbInProcess, tempDir, writeTree, git } from '../helpers/cli-repo.js';
import { configFiles } from '../reconcile-helpers.js';
import { command as runCommand } from '../../src/cli/commands/run.js';
import { startMetricsServer } from '../../src/reconciler/metrics/server.js';
import { parseListen } from '../../src/reconciler/triggers/webhook.js';
import { Registry } from 'prom-client';

const run = promisify(execFile);
const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const read = (p: string) => readFileSync(join(root, p), 'utf8');
const CAPS = ['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_PERFMON', 'CAP_SYS_ADMIN'];

test('make install stages a runnable tree, the unit and a private env file; systemd-analyze verify accepts the unit', async (t) => {
  const dest = await tempDir('install');
  try {
    await run('make', ['-s', 'install-tree', `DESTDIR=${dest.path}`], { cwd: root, timeout: 300_000, maxBuffer: 1 << 24 });
    const prefix = join(dest.path, 'opt/gitlb');
    for (const p of ['bin/gitlb', 'dist/cli/main.js', 'build/bpf/xdp_lb.o', 'build/bpf/tc_backend.o', 'src/bpf/napi/build/Release/gitlb_bpf.node', 'schemas/service.schema.json', 'node_modules/commander']) {
      t.true(existsSync(join(prefix, p)), p);
    }
    t.false(existsSync(join(prefix, 'node_modules/ava')), 'development packages are pruned');
    t.is(statSync(join(dest.path, 'etc/gitlb/gitlb.env')).mode & 0o777, 0o600);
    const v = spawnSync(join(prefix, 'bin/gitlb'), ['validate', join(root, 'sample-config-repo')], { encoding: 'utf8' });
    t.is(v.status, 0, v.stderr);
    t.regex(v.stdout, /^valid: 6 services/m);

    const unit = readFileSync(join(dest.path, 'etc/systemd/system/gitlb.service'), 'utf8');
    const set = (key: string) => [...unit.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1]!);
    t.deepEqual(set('CapabilityBoundingSet')[0]!.split(' ').sort(), CAPS);
    t.deepEqual(set('AmbientCapabilities')[0]!.split(' ').sort(), CAPS);
    t.deepEqual(set('ProtectSystem'), ['strict']);
    t.deepEqual(set('EnvironmentFile'), ['/etc/gitlb/gitlb.env']);
    for (const p of ['/var/lib/gitlb', '/sys/fs/bpf']) t.true(set('ReadWritePaths')[0]!.split(' ').includes(p), p);
    t.regex(set('ExecStart')[0]!, /^\/opt\/gitlb\/bin\/gitlb run /);
    // A stop keeps the data plane unless GITLB_DOWN_ON_STOP=1: the stop command does nothing by default.
    const stop = set('ExecStopPost')[0]!.replace(/^\/bin\/sh -c '(.*)'$/, '$1');
    const kept = spawnSync('/bin/sh', ['-c', stop], { env: { GITLB_DOWN_ON_STOP: '0', GITLB_NODE: 'lb-1' }, encoding: 'utf8' });
    t.deepEqual([kept.status, kept.stdout, kept.stderr], [0, '', '']);
    t.regex(stop, /exec \/opt\/gitlb\/bin\/gitlb down --node "\$GITLB_NODE"/);

    // `make deps` installs systemd (systemd-analyze): a missing tool fails here rather than skipping the check.
    t.is(spawnSync('systemd-analyze', ['--version']).status, 0, 'systemd-analyze is installed by make deps');
    // verify checks that the executables exist: point the copy at the staged tree.
    const staged = join(dest.path, 'gitlb.service');
    writeFileSync(staged, unit.replaceAll('/opt/gitlb', prefix));
    const verify = spawnSync('systemd-analyze', ['verify', staged], { encoding: 'utf8' });
    t.is(verify.status, 0, verify.stderr);
    t.is(verify.stderr.trim(), '', 'no warnings');
  } finally {
    await dest.remove();
  }
});

test('the DaemonSet: host network, bpffs and state as hostPath, only the four capabilities, /healthz readiness, args gitlb run accepts', (t) => {
  const docs = parseAllDocuments(read('deploy/kubernetes/daemonset.yaml')).map((d) => d.toJS());
  const ds = docs.find((d) => d.kind === 'DaemonSet');
  const pod = ds.spec.template.spec;
  t.true(pod.hostNetwork);
  const c = pod.containers[0];
  t.deepEqual(c.securityContext.capabilities, { drop: ['ALL'], add: ['BPF', 'NET_ADMIN', 'PERFMON', 'SYS_ADMIN'] });
  t.false(c.securityContext.privileged);
  t.deepEqual(c.readinessProbe.httpGet, { path: '/healthz', port: 'metrics' });
  t.is(c.ports.find((p: { name: string }) => p.name === 'metrics').containerPort, 9462);
  const hostPaths = Object.fromEntries(pod.volumes.filter((v: { hostPath?: unknown }) => v.hostPath).map((v: { name: string; hostPath: { path: string } }) => [v.name, v.hostPath.path]));
  t.deepEqual(hostPaths, { bpffs: '/sys/fs/bpf', state: '/var/lib/gitlb' });
  const secrets = c.env.filter((e: { valueFrom?: { secretKeyRef?: unknown } }) => e.valueFrom?.secretKeyRef).map((e: { name: string }) => e.name);
  t.deepEqual(secrets.sort(), ['GITLB_GIT_TOKEN', 'GITLB_WEBHOOK_SECRET']);
  // Kubernetes expands $(VAR) from env; the result must parse as `gitlb run` options.
  const args = expandArgs(c, { GITLB_REPO: 'https://git.example.com/x.git', GITLB_NODE: 'lb-1', GITLB_INTERFACE: 'eth0', HOST_IP: '192.0.2.7' });
  t.is(args[0], 'run');
  const parsed = runCommand.parse(args.slice(1)).opts;
  t.like(parsed, { node: 'lb-1', interface: 'eth0', pinRoot: '/sys/fs/bpf/gitlb', metrics: '192.0.2.7:9462', webhook: '192.0.2.7:9000' });
  // No listener on every interface of the host (hostNetwork): each binds the node's address only.
  t.false(args.some((a) => /=(0\.0\.0\.0|\[?::\]?):/.test(a)), args.join(' '));
  const secret = parseAllDocuments(read('deploy/kubernetes/secret.example.yaml')).map((d) => d.toJS());
  t.deepEqual(Object.keys(secret.find((d) => d.kind === 'Secret').stringData).sort(), ['git-token', 'peer-secret', 'webhook-secret']);
  // Peer votes authenticated by default: the peer secret is a file mounted from the Secret.
  const mount = c.volumeMounts.find((m: { name: string }) => m.name === 'peer-secret');
  const volume = pod.volumes.find((v: { name: string }) => v.name === 'peer-secret');
  t.is(volume.secret.secretName, 'gitlb');
  t.deepEqual(volume.secret.items, [{ key: 'peer-secret', path: 'secret' }]);
  t.is(parsed['peerSecretFile'], `${mount.mountPath}/secret`);
});

type Container = { args: string[]; env: { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[]; ports: { name: string; containerPort: number }[]; readinessProbe: { httpGet: { path: string; port: string } } };

/** The container's args as Kubernetes expands them: $(VAR) from the env values given. */
function expandArgs(c: Container, env: Record<string, string>): string[] {
  return c.args.map((a) => a.replace(/\$\((\w+)\)/g, (_, v: string) => env[v] ?? ''));
}

test("the DaemonSet's readiness probe reaches /healthz: --metrics listens on the node's IP (downward API status.hostIP) at the probed port", async (t) => {
  const ds = parseAllDocuments(read('deploy/kubernetes/daemonset.yaml')).map((d) => d.toJS()).find((d) => d.kind === 'DaemonSet');
  t.true(ds.spec.template.spec.hostNetwork, 'the pod IP the kubelet probes is the node IP');
  const c: Container = ds.spec.template.spec.containers[0];
  const hostIp = c.env.find((e) => e.name === 'HOST_IP');
  t.is(hostIp?.valueFrom?.fieldRef?.fieldPath, 'status.hostIP');
  const probe = c.readinessProbe.httpGet;
  const probedPort = c.ports.find((p) => p.name === probe.port)!.containerPort;
  // The kubelet of a node whose IP is 127.0.0.1 (the only address this test may serve on): the daemon's metrics
  // server, started from the expanded --metrics, must answer the probe's path at that address and port.
  const { metrics } = runCommand.parse(expandArgs(c, { GITLB_REPO: 'https://git.example.com/x.git', GITLB_NODE: 'lb-1', GITLB_INTERFACE: 'eth0', HOST_IP: '127.0.0.1' }).slice(1)).opts;
  const { host, port } = parseListen(metrics as string, '--metrics');
  t.deepEqual([host, port], ['127.0.0.1', probedPort]);
  // The probed port may be taken on a shared test machine: serve on any free one, same address.
  let ready: string | null = 'no revision applied yet';
  const server = await startMetricsServer({ listen: `${host}:0`, registry: new Registry(), notReady: () => ready });
  try {
    const before = await fetch(`${server.url}${probe.path}`);
    t.is(before.status, 503, 'not ready before a revision is applied');
    ready = null;
    t.is((await fetch(`${server.url}${probe.path}`)).status, 200);
  } finally {
    await server.close();
  }
});

test('the Dockerfile: a build stage and a runtime stage that copies only built artefacts that make build produces', (t) => {
  const text = read('Dockerfile');
  const stages = [...text.matchAll(/^FROM \S+ AS (\w+)$/gm)].map((m) => m[1]);
  t.deepEqual(stages, ['build', 'runtime']);
  const runtime = text.slice(text.indexOf('AS runtime'));
  t.notRegex(runtime, /clang|g\+\+|llvm|libbpf-dev/, 'no compilers in the runtime image');
  const copies = [...runtime.matchAll(/^COPY --from=build (.+) \S+$/gm)].flatMap((m) => m[1]!.split(' '));
  t.true(copies.length >= 7);
  for (const src of copies) t.true(existsSync(join(root, src.replace(/^\/src\//, ''))), `${src} exists after make build`);
  t.regex(text, /^ENTRYPOINT \["\/opt\/gitlb\/bin\/gitlb"\]$/m);
});

test('the CI snippets validate and post a markdown plan: their gitlb commands run on a pull-request-shaped repository', async (t) => {
  const dir = await tempDir('ci');
  try {
    const origin = join(dir.path, 'origin');
    await writeTree(origin, configFiles(['lb-1'], ['198.51.100.1', '198.51.100.2']));
    await git(origin, 'init', '-q', '-b', 'main');
    await git(origin, 'add', '-A');
    await git(origin, 'commit', '-qm', 'base');
    const clone = join(dir.path, 'clone');
    await git(dir.path, 'clone', '-q', origin, clone);
    await git(clone, 'checkout', '-qb', 'change');
    await writeTree(clone, { 'services/web.yaml': configFiles(['lb-1'], ['198.51.100.1', '198.51.100.2', '198.51.100.3'])['services/web.yaml']! });
    await git(clone, 'commit', '-qam', 'add a real');

    const vars: Record<string, string> = { GITHUB_BASE_REF: 'main', CI_MERGE_REQUEST_TARGET_BRANCH_NAME: 'main' };
    const snippets = { 'github-actions.yml': parse(read('deploy/ci/github-actions.yml')), 'gitlab-ci.yml': parse(read('deploy/ci/gitlab-ci.yml')) };
    const lines: Record<string, string[]> = {
      'github-actions.yml': snippets['github-actions.yml'].jobs.plan.steps.map((s: { run?: string }) => s.run ?? ''),
      'gitlab-ci.yml': snippets['gitlab-ci.yml']['gitlb-plan'].script,
    };
    for (const [file, steps] of Object.entries(lines)) {
      const commands = steps
        .map((l) => /(?:"\$GITLB_IMAGE"|^gitlb) (validate .*|plan .*?)(?: > (\S+))?$/.exec(l.trim()))
        .filter((m): m is RegExpExecArray => m !== null);
      t.deepEqual(commands.map((m) => m[1]!.split(' ')[0]), ['validate', 'plan'], file);
      for (const m of commands) {
        const args = m[1]!.split(' ').map((a) => a.replace(/^"(.*)"$/, '$1').replace(/\$(\w+)/g, (_, v: string) => vars[v] ?? `$${v}`));
        const r = await gitlbInProcess(args.map((a) => (a === '.' ? clone : a)));
        t.is(r.code, 0, `${file}: gitlb ${args.join(' ')}: ${r.stderr}`);
        if (args[0] === 'plan') {
          t.is(m[2], 'plan.md', file);
          t.regex(r.stdout, /^### gitlb plan: services 1 changed/, file);
          t.regex(r.stdout, /198\.51\.100\.3 added/, file);
        }
      }
    }
    t.regex(lines['github-actions.yml'].join('\n'), /gh pr comment .* --body-file plan\.md/);
    t.regex(lines['gitlab-ci.yml'].join('\n'), /merge_requests\/\$CI_MERGE_REQUEST_IID\/notes/);
  } finally {
    await dir.remove();
  }
});
