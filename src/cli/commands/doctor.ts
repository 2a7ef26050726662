// `gitlb doctor`: preflight of a node — one line per check and a verdict (see src/reconciler/doctor/doctor.ts).
import { commandGitTimeoutOption, defineCommand, gitTimeoutMs, InvalidArgumentError, nodeName, Option, pathOption } from '../command.js';
import { runDoctor, type PostureOptions } from '../../reconciler/doctor/doctor.js';
import { DEFAULT_METRICS_LISTEN } from '../../reconciler/metrics/index.js';
import { parseListen } from '../../reconciler/triggers/webhook.js';

interface DoctorOptions extends PostureOptions {
  interface?: string;
  pinRoot: string;
  repo?: string;
  branch: string;
  node?: string;
  path: string;
  credentialsFile?: string;
  webhookSecretFile?: string;
  /** Seconds (`--git-timeout`, as in every other command that reads Git). */
  gitTimeout: number;
}

/** ADDR:PORT as gitlb run takes it (checked while parsing: a typo is a usage error). */
function listenSpec(flag: string, allowOff = false) {
  return (value: string): string => {
    if (allowOff && value === 'off') return value;
    try {
      parseListen(value, flag);
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
    return value;
  };
}

function port(text: string): number {
  const p = Number(text);
  if (!Number.isInteger(p) || p < 1 || p > 65535) throw new InvalidArgumentError(`'${text}' is not a port`);
  return p;
}

export const command = defineCommand<DoctorOptions>({
  name: 'doctor',
  summary: 'preflight checks of a node (kernel, BPF, bpffs, capabilities, interface, clock, Git, secrets, trust posture) and a verdict',
  description: `Checks what 'gitlb run' needs on this machine, one line each: kernel version and BPF features (the XDP and TC
objects are loaded through the verifier and closed again), the bpf filesystem under --pin-root, the capabilities
CAP_BPF CAP_NET_ADMIN CAP_PERFMON CAP_SYS_ADMIN, the interface (present, up, native or generic XDP), the clock (NTP),
the Git remote (reachable, the branch head validates, names --node on --interface), the webhook secret, and the
node's trust posture: the verification mode in force (local state, --trust), the trust root (local state,
--trust-from or none), peer authentication, and the address of every listener (metrics, webhook, peer channel),
with a warning for an unauthenticated one that is reachable beyond loopback. Nothing is attached, pinned or
written. Run it with the options 'gitlb run' gets.`,
  exitStatus: 'Exit status: 0 ready (warnings allowed), 1 a check failed, 2 usage error.',
  define: (cmd) =>
    cmd
      .option('--interface <if>', 'the interface gitlb run attaches to')
      .option('--pin-root <dir>', 'bpffs root of pinned programs and maps', '/sys/fs/bpf/gitlb')
      .option('--repo <url|dir>', 'config repository to reach')
      .option('--branch <name>', 'config branch', 'main')
      .option('--node <name>', "this node's name (checked against the config)", nodeName)
      .addOption(pathOption())
      .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
      .option('--webhook-secret-file <file>', 'file holding the webhook shared secret')
      .addOption(commandGitTimeoutOption('fetch'))
      .option('--cache-dir <dir>', "the node's Git cache and state, for its state.json (default /var/lib/gitlb/<node>)")
      .option('--trust <file>', 'root of trust for commit signatures, as gitlb run --trust')
      .option('--trust-from <commit>', 'as gitlb run --trust-from')
      .addOption(new Option('--role <role>', "the node's role (default: its Node document's)").choices(['lb', 'backend']))
      .option('--metrics <addr:port|off>', `as gitlb run --metrics (default ${DEFAULT_METRICS_LISTEN})`, listenSpec('--metrics', true))
      .option('--webhook <addr:port>', 'as gitlb run --webhook', listenSpec('--webhook'))
      .option('--peer-secret-file <file>', 'as gitlb run --peer-secret-file')
      .option('--peer-key <file>', 'as gitlb run --peer-key')
      .option('--peer-listen <addr:port>', 'as gitlb run --peer-listen', listenSpec('--peer-listen'))
      .option('--peer-port <port>', 'as gitlb run --peer-port', port),
  async run(o) {
    const results = await runDoctor({
      interface: o.interface,
      pinRoot: o.pinRoot,
      repo: o.repo,
      branch: o.branch,
      node: o.node,
      configPath: o.path,
      credentialsFile: o.credentialsFile,
      webhookSecretFile: o.webhookSecretFile,
      env: process.env,
      gitTimeoutMs: gitTimeoutMs(o.gitTimeout),
      cacheDir: o.cacheDir,
      trust: o.trust,
      trustFrom: o.trustFrom,
      role: o.role,
      metrics: o.metrics,
      webhook: o.webhook,
      peerSecretFile: o.peerSecretFile,
      peerKey: o.peerKey,
      peerListen: o.peerListen,
      peerPort: o.peerPort,
    });
    const width = Math.max(...results.map((r) => r.name.length));
    for (const r of results) process.stdout.write(`${r.level.toUpperCase().padEnd(4)}  ${r.name.padEnd(width)}  ${r.detail}\n`);
    const failed = results.filter((r) => r.level === 'fail').length;
    const warned = results.filter((r) => r.level === 'warn').length;
    process.stdout.write(failed ? `verdict: NOT READY (${failed} failed, ${warned} warnings)\n` : `verdict: ready${warned ? ` (${warned} warnings)` : ''}\n`);
    return failed ? 1 : 0;
  },
});
