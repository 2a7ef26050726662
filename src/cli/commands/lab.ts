// `gitlb lab up|down|status|clean`: the network-namespace lab (see docs/lab.md).
import { parseArgs } from 'node:util';
import { type CliCommand, UsageError } from '../command.js';
import {
  DEFAULT_CONFIG_DIR,
  DEFAULT_STATE_DIR,
  formatLabStatus,
  labClean,
  labDown,
  labStatus,
  labUp,
} from '../../lab/lab.js';
import { labSpecFromModel, planLab } from '../../lab/topology.js';

const help = `usage: gitlb lab up [--config DIR] [--no-daemons] [--vips-on-lo] [--clients N] [--dry-run]
       gitlb lab down
       gitlb lab status [--json]
       gitlb lab clean

Builds a lab of network namespaces: a client network, a router with an ECMP route (L4 hash) to the VIPs over
the lb nodes, the lb nodes and backends of the config on one bridged segment, a real HTTP server and UDP echo
service on every backend that name the backend in each reply, and a Git server serving a copy of the config.

  up       build the lab from the config (default: sample-config-repo/) and start 'gitlb run' on every lb and
           backend node (unless --no-daemons; then each backend holds its VIPs on lo itself)
  down     remove exactly what 'up' made (recorded in the state file): processes, namespaces, files
  status   namespaces, addresses, processes, daemons and the router's ECMP routes
  clean    remove stale namespaces with the gitlb prefix (their creating process is gone), and a dead lab

options:
  --config DIR      config directory for 'up' (default ${DEFAULT_CONFIG_DIR})
  --no-daemons      do not start 'gitlb run' daemons
  --vips-on-lo      put each backend's DSR VIPs on its lo even when daemons run (normally the backend daemon's job)
  --clients N       number of client addresses (default 5)
  --dry-run         print the plan as JSON and build nothing
  --state-dir DIR   where the lab keeps its state, repositories and logs (default ${DEFAULT_STATE_DIR})
  --json            status as JSON
`;

export const command: CliCommand = {
  name: 'lab',
  summary: 'build, inspect and remove the network-namespace lab (up|down|status|clean)',
  help,
  async run(argv) {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        config: { type: 'string' },
        'no-daemons': { type: 'boolean', default: false },
        'vips-on-lo': { type: 'boolean', default: false },
        clients: { type: 'string' },
        'dry-run': { type: 'boolean', default: false },
        'state-dir': { type: 'string', default: DEFAULT_STATE_DIR },
        json: { type: 'boolean', default: false },
      },
    });
    const [sub, ...extra] = positionals;
    if (extra.length) throw new UsageError(`unexpected argument '${extra[0]}'`);
    const stateDir = values['state-dir']!;
    const log = (line: string) => process.stderr.write(`lab: ${line}\n`);
    switch (sub) {
      case 'up': {
        const clientCount = values.clients === undefined ? undefined : Number(values.clients);
        if (clientCount !== undefined && (!Number.isInteger(clientCount) || clientCount < 1 || clientCount > 200)) {
          throw new UsageError(`--clients must be an integer 1..200, got '${values.clients}'`);
        }
        if (values['dry-run']) {
          const { loadConfigModel } = await import('../../lab/load-config.js');
          const model = await loadConfigModel(values.config ?? DEFAULT_CONFIG_DIR);
          process.stdout.write(JSON.stringify(planLab(labSpecFromModel(model, clientCount)), null, 2) + '\n');
          return 0;
        }
        const state = await labUp({
          ...(values.config ? { configDir: values.config } : {}),
          ...(clientCount ? { clientCount } : {}),
          daemons: !values['no-daemons'],
          ...(values['vips-on-lo'] ? { vipsOnLo: true } : {}),
          stateDir,
          log,
        });
        const status = await labStatus(state.stateDir);
        if (status) process.stdout.write(formatLabStatus(status));
        return 0;
      }
      case 'down': {
        const r = await labDown(stateDir);
        if (!r) {
          process.stdout.write(`no lab recorded in ${stateDir}; nothing to do\n`);
          return 0;
        }
        process.stdout.write(`lab down: stopped ${r.stopped} processes, removed ${r.namespaces.length} namespaces\n`);
        return 0;
      }
      case 'status': {
        const s = await labStatus(stateDir);
        if (!s) {
          if (values.json) process.stdout.write('null\n');
          else process.stdout.write(`no lab recorded in ${stateDir}\n`);
          return 1;
        }
        process.stdout.write(values.json ? JSON.stringify(s, null, 2) + '\n' : formatLabStatus(s));
        return s.up ? 0 : 1;
      }
      case 'clean': {
        const r = await labClean(stateDir);
        if (r.lab) process.stdout.write(`removed dead lab ${r.lab}*\n`);
        process.stdout.write(r.namespaces.length ? `removed stale namespaces: ${r.namespaces.join(' ')}\n` : 'no stale namespaces\n');
        return 0;
      }
      case undefined:
        throw new UsageError('missing subcommand: up, down, status or clean');
      default:
        throw new UsageError(`unknown subcommand '${sub}': expected up, down, status or clean`);
    }
  },
};
