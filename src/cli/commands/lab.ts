// `gitlb lab up|down|status|clean`: the network-namespace lab (see docs/lab.md).
import { Option } from 'commander';
import { type CliCommand, type Command, defineCommand, intIn } from '../command.js';
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

interface LabOptions {
  config?: string;
  daemons: boolean;
  vipsOnLo: boolean;
  clients?: number;
  dryRun: boolean;
  stateDir: string;
  json: boolean;
  router: 'bird' | 'frr';
}

const log = (line: string) => process.stderr.write(`lab: ${line}\n`);

/** Each subcommand gets --state-dir; `result` receives its exit status. */
function sub(parent: Command, result: { code: number }, name: string, summary: string, run: (o: LabOptions) => Promise<number>): Command {
  return parent
    .command(name)
    .description(summary)
    .option('--state-dir <dir>', 'where the lab keeps its state, repositories and logs', DEFAULT_STATE_DIR)
    .action(async (_opts: unknown, self: Command) => {
      result.code = await run(self.opts() as LabOptions);
    });
}

export const command: CliCommand = {
  ...labDefinition(),
  build(result) {
    const cmd = labDefinition().build(result);
    sub(cmd, result, 'up', "build the lab from the config and start 'gitlb run' on every lb and backend node", up)
      .option('--config <dir>', `config directory (default ${DEFAULT_CONFIG_DIR})`)
      .option('--no-daemons', "do not start 'gitlb run' daemons (each backend then holds its VIPs on lo itself)")
      .option('--vips-on-lo', "put each backend's DSR VIPs on its lo even when daemons run (normally the backend daemon's job)", false)
      .option('--clients <n>', 'number of client addresses (default 5)', intIn(1, 200))
      .option('--dry-run', 'print the plan as JSON and build nothing', false)
      .addOption(new Option('--router <daemon>', "the router's BGP daemon when the config has BGP settings: BIRD, or FRR (bgpd + zebra)").choices(['bird', 'frr']).default('bird'));
    sub(cmd, result, 'down', "remove exactly what 'up' made (recorded in the state file): processes, namespaces, files", down);
    sub(cmd, result, 'status', "namespaces, addresses, processes, daemons and the router's ECMP routes", status).option('--json', 'status as JSON', false);
    sub(cmd, result, 'clean', 'remove stale namespaces and /sys/fs/bpf pins with the gitlb prefixes (their creating process is gone), and a dead lab', clean);
    return cmd;
  },
};

function labDefinition() {
  return defineCommand<LabOptions>({
    name: 'lab',
    summary: 'build, inspect and remove the network-namespace lab (up|down|status|clean)',
    description: `Builds a lab of network namespaces: a client network, a router with an ECMP route (L4 hash) to the VIPs over
the lb nodes, the lb nodes and backends of the config on one bridged segment, a real HTTP server and UDP echo
service on every backend that name the backend in each reply, and a Git server serving a copy of the config.`,
    exitStatus: "Exit status: 0 success ('status': the lab is up and every process it started runs), 1 runtime failure ('status': no lab, not up, or a lab process such as a daemon is dead), 2 usage error.",
    define: () => {},
  });
}

async function up(o: LabOptions): Promise<number> {
  if (o.dryRun) {
    const { loadConfigModel } = await import('../../lab/load-config.js');
    const model = await loadConfigModel(o.config ?? DEFAULT_CONFIG_DIR);
    process.stdout.write(JSON.stringify(planLab({ ...labSpecFromModel(model, o.clients), router: o.router }), null, 2) + '\n');
    return 0;
  }
  const state = await labUp({
    ...(o.config ? { configDir: o.config } : {}),
    ...(o.clients ? { clientCount: o.clients } : {}),
    daemons: o.daemons,
    router: o.router,
    ...(o.vipsOnLo ? { vipsOnLo: true } : {}),
    stateDir: o.stateDir,
    persistent: true,
    log,
  });
  // With BGP the VIPs have no route until every lb node's BIRD announces them, seconds after the daemons start:
  // return only once the lab forwards (or say which VIPs are missing).
  if (o.daemons && state.plan.bird && state.daemons.some((d) => d.started)) {
    const { loadConfigModel } = await import('../../lab/load-config.js');
    const { waitForAnnounced } = await import('../../demo/failover.js');
    const vips = (await loadConfigModel(state.configDir)).services.map((s) => s.spec.vip);
    const ms = await waitForAnnounced(state, vips, 30_000);
    log(ms === null ? `warning: after 30 s the router does not yet route every VIP over every lb node (see 'router ECMP' below)`
      : `router: every VIP (${vips.length}) learnt by BGP from ${state.plan.bird.lbs.length} lb nodes`);
  }
  const status = await labStatus(state.stateDir);
  if (status) process.stdout.write(formatLabStatus(status));
  return 0;
}

async function down(o: LabOptions): Promise<number> {
  const r = await labDown(o.stateDir);
  if (!r) {
    process.stdout.write(`no lab recorded in ${o.stateDir}; nothing to do\n`);
    return 0;
  }
  process.stdout.write(`lab down: stopped ${r.stopped} processes, removed ${r.namespaces.length} namespaces\n`);
  return 0;
}

async function status(o: LabOptions): Promise<number> {
  const s = await labStatus(o.stateDir);
  if (!s) {
    if (o.json) process.stdout.write('null\n');
    else process.stdout.write(`no lab recorded in ${o.stateDir}\n`);
    return 1;
  }
  process.stdout.write(o.json ? JSON.stringify(s, null, 2) + '\n' : formatLabStatus(s));
  // 0 only when the lab is up and every process it started still runs.
  return s.up && s.dead.length === 0 ? 0 : 1;
}

async function clean(o: LabOptions): Promise<number> {
  const r = await labClean(o.stateDir);
  if (r.lab) process.stdout.write(`removed dead lab ${r.lab}*\n`);
  process.stdout.write(r.namespaces.length ? `removed stale namespaces: ${r.namespaces.join(' ')}\n` : 'no stale namespaces\n');
  process.stdout.write(r.pins.length ? `removed stale pins under /sys/fs/bpf: ${r.pins.join(' ')}\n` : 'no stale pins\n');
  return 0;
}
