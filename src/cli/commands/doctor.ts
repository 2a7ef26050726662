// `gitlb doctor`: preflight of a node — one line per check and a verdict (see src/reconciler/doctor.ts).
import { commandGitTimeoutOption, defineCommand, gitTimeoutMs, nodeName, pathOption } from '../command.js';
import { runDoctor } from '../../reconciler/doctor.js';

interface DoctorOptions {
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

export const command = defineCommand<DoctorOptions>({
  name: 'doctor',
  summary: 'preflight checks of a node (kernel, BPF, bpffs, capabilities, interface, clock, Git, secrets) and a verdict',
  description: `Checks what 'gitlb run' needs on this machine, one line each: kernel version and BPF features (the XDP and TC
objects are loaded through the verifier and closed again), the bpf filesystem under --pin-root, the capabilities
CAP_BPF CAP_NET_ADMIN CAP_PERFMON CAP_SYS_ADMIN, the interface (present, up, native or generic XDP), the clock (NTP),
the Git remote (reachable, the branch head validates, names --node on --interface) and the webhook secret. Nothing
is attached, pinned or written. Run it with the options 'gitlb run' gets.`,
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
      .addOption(commandGitTimeoutOption('fetch')),
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
    });
    const width = Math.max(...results.map((r) => r.name.length));
    for (const r of results) process.stdout.write(`${r.level.toUpperCase().padEnd(4)}  ${r.name.padEnd(width)}  ${r.detail}\n`);
    const failed = results.filter((r) => r.level === 'fail').length;
    const warned = results.filter((r) => r.level === 'warn').length;
    process.stdout.write(failed ? `verdict: NOT READY (${failed} failed, ${warned} warnings)\n` : `verdict: ready${warned ? ` (${warned} warnings)` : ''}\n`);
    return failed ? 1 : 0;
  },
});
