// `gitlb demo`: the guided tour behind `make demo` (see docs/demo.md).
import { parseArgs } from 'node:util';
import { type CliCommand, UsageError } from '../command.js';
import { DEFAULT_DEMO_STATE_DIR, runDemo } from '../../demo/run-demo.js';

export const command: CliCommand = {
  name: 'demo',
  summary: 'build the lab, show config, digests, traffic, a commit, a revert and a health drain, tear down',
  help: `usage: gitlb demo [--config DIR] [--requests N] [--state-dir DIR] [--xdp-mode generic|native|auto]

Builds the network-namespace lab (as 'gitlb lab up') with a 'gitlb run' daemon on every node, then narrates:
the config and its Maglev digests (equal on both lb nodes), HTTP traffic spread by weight, a commit adding a
backend with its 'gitlb plan' and the new spread, the status branch, a 'git revert', and a backend killed and
drained by health checks. Every command shown runs for real. The lab is removed at the end, on error and on
Ctrl-C. Exit status 0 when every check passed, 1 otherwise.

  --config DIR      config directory served by the lab Git server (default sample-config-repo/)
  --requests N      HTTP requests per spread measurement (default 200)
  --state-dir DIR   lab state directory (default ${DEFAULT_DEMO_STATE_DIR})
  --xdp-mode MODE   XDP attach mode of the lb daemons (default generic: native XDP on the lab's veth links adds
                    ~100 ms per packet on a busy machine; see docs/demo.md)
`,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        config: { type: 'string' },
        requests: { type: 'string' },
        'state-dir': { type: 'string' },
        'xdp-mode': { type: 'string', default: 'generic' },
      },
    });
    const requests = values.requests === undefined ? undefined : Number(values.requests);
    if (requests !== undefined && (!Number.isInteger(requests) || requests < 10 || requests > 5000)) {
      throw new UsageError(`--requests must be an integer 10..5000, got '${values.requests}'`);
    }
    const xdpMode = values['xdp-mode'] as 'native' | 'generic' | 'auto';
    if (!['native', 'generic', 'auto'].includes(xdpMode)) throw new UsageError(`--xdp-mode must be native, generic or auto, not '${xdpMode}'`);
    return runDemo({
      xdpMode,
      ...(values.config ? { configDir: values.config } : {}),
      ...(requests ? { requests } : {}),
      ...(values['state-dir'] ? { stateDir: values['state-dir'] } : {}),
    });
  },
};
