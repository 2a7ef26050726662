// `gitlb demo`: the guided tour behind `make demo` (see docs/demo.md).
import { defineCommand, intIn, Option } from '../command.js';
import { DEFAULT_DEMO_STATE_DIR, runDemo } from '../../demo/run-demo.js';

interface DemoOptions {
  config?: string;
  requests?: number;
  stateDir?: string;
  xdpMode: 'native' | 'generic' | 'auto';
}

export const command = defineCommand<DemoOptions>({
  name: 'demo',
  summary: 'build the lab, show config, digests, traffic, a commit, a revert and a health drain, tear down',
  description: `Builds the network-namespace lab (as 'gitlb lab up') with a 'gitlb run' daemon on every node, then narrates:
the config and its Maglev digests (equal on both lb nodes), HTTP traffic spread by weight, the same counts seen
by Prometheus, a commit adding a backend with its 'gitlb plan' and the new spread, the status branch, a 'git
revert', a backend killed and drained by health checks, and (with BGP settings) an lb node drained by commit.
Every command shown runs for real. The lab is removed at the end, on error and on
Ctrl-C.`,
  exitStatus: 'Exit status: 0 every check passed, 1 a check or step failed, 2 usage error.',
  define: (cmd) =>
    cmd
      .option('--config <dir>', 'config directory served by the lab Git server (default sample-config-repo/)')
      .option('--requests <n>', 'HTTP requests per spread measurement (default 200)', intIn(10, 5000))
      .option('--state-dir <dir>', `lab state directory (default ${DEFAULT_DEMO_STATE_DIR})`)
      .addOption(
        new Option('--xdp-mode <mode>', 'XDP attach mode of the lb daemons (auto: native where the daemon sees it forward, else generic; see docs/datapath.md)')
          .choices(['generic', 'native', 'auto'])
          .default('auto'),
      ),
  async run(opts) {
    return runDemo({
      xdpMode: opts.xdpMode,
      ...(opts.config ? { configDir: opts.config } : {}),
      ...(opts.requests ? { requests: opts.requests } : {}),
      ...(opts.stateDir ? { stateDir: opts.stateDir } : {}),
    });
  },
});
