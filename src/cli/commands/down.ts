// `gitlb down --node NAME`: remove a node's data plane on purpose (stopping `gitlb run` leaves it forwarding),
// and record that in the node's status file when the repository is given.
import { join } from 'node:path';
import { addBirdOptions, birdConfigFile, type Command, commandGitTimeoutOption, defineCommand, nodeName, pathOption } from '../command.js';
import { withdrawAllNow } from '../../reconciler/bgp/withdraw-now.js';
import { lastAppliedModel } from '../../reconciler/state/served-model.js';
import { loadCredentials } from '../../reconciler/source/credentials.js';
import { isUrl, openRemote } from '../../reconciler/source/git-remote.js';
import { readRevisionFiles } from '../../reconciler/source/git-objects.js';
import { parseConfig } from '../../render/config/index.js';
import type { ConfigModel } from '../../render/model.js';
import { statusBranchOptions } from '../status-options.js';
import { takeNodeDown } from '../../reconciler/decommission/node-down.js';
import { withStatusBranch } from '../../reconciler/status/open-status-remote.js';
import { readAllStatuses } from '../../reconciler/status/status-report.js';
import { StatusWriter } from '../../reconciler/status/status-writer.js';
import { downStatus } from '../../reconciler/status/conditions.js';

interface DownOptions {
  node: string;
  pinRoot: string;
  cacheDir?: string;
  interface?: string;
  repo?: string;
  branch: string;
  statusBranch?: string;
  credentialsFile?: string;
  path: string;
  /** Seconds (`--git-timeout`): the deadline of each fetch and push of the status write. */
  gitTimeout: number;
  birdConfig?: string;
  birdSocket: string;
}

/** The config the node served: its last applied revision from its Git cache, else the branch head of --repo. */
async function servedModel(o: DownOptions, cacheDir: string): Promise<{ model: ConfigModel | null; from: string }> {
  const gitdir = o.repo && !isUrl(o.repo) ? o.repo : join(cacheDir, 'git');
  const applied = await lastAppliedModel({ cacheDir, gitdir, node: o.node, branch: o.branch, configPath: o.path });
  if (applied) return { model: applied, from: `the revision ${o.node} last applied` };
  if (!o.repo) return { model: null, from: '' };
  const remote = openRemote(o.repo, { cacheDir: join(cacheDir, 'git'), credentials: loadCredentials({ file: o.credentialsFile }), timeoutMs: o.gitTimeout * 1000 });
  const head = await remote.fetch(o.branch, { depth: 1 });
  return { model: head ? (parseConfig(await readRevisionFiles(remote.gitdir, head, o.path)).model ?? null) : null, from: `the head of ${o.branch}` };
}

/**
 * BIRD keeps announcing what the daemon last wrote: withdraw every VIP the way `gitlb run --withdraw-on-exit` does,
 * before the data plane goes. Throws when BIRD should be told and cannot be (down then removes nothing).
 */
async function withdrawBgp(o: DownOptions, cacheDir: string, cmd: Command): Promise<string> {
  if (o.birdSocket === 'off') return 'BGP: not driven (--bird-socket off)';
  const explicit = ['birdConfig', 'birdSocket'].some((k) => cmd.getOptionValueSource(k) === 'cli');
  let served: { model: ConfigModel | null; from: string };
  try {
    served = await servedModel(o, cacheDir);
  } catch (err) {
    if (explicit) throw new Error(`cannot withdraw by BGP: reading the config: ${(err as Error).message}`);
    return `BGP: not told: cannot read the config (${(err as Error).message})`;
  }
  const { model, from } = served;
  if (!model) {
    const why = `no config known for ${o.node} (no applied revision in ${cacheDir}${o.repo ? `, nothing at the head of ${o.branch}` : ', no --repo'})`;
    if (explicit) throw new Error(`cannot withdraw by BGP: ${why}`);
    return `BGP: not told: ${why}`;
  }
  const configFile = birdConfigFile(o.birdConfig, cacheDir);
  const vips = await withdrawAllNow({ node: o.node, model, configFile, birdSocket: o.birdSocket });
  if (vips === null) {
    if (explicit) throw new Error(`cannot withdraw by BGP: ${from} gives ${o.node} no BGP settings`);
    return `BGP: not told: ${from} gives ${o.node} no BGP settings`;
  }
  return `BGP: withdrew ${vips.length} VIP(s) (${vips.join(' ') || 'none'}): wrote ${configFile}, BIRD reloaded (${o.birdSocket})`;
}

export const command = defineCommand<DownOptions>({
  name: 'down',
  summary: "remove a node's data plane on purpose: detach XDP/TC, unpin maps, remove its VIPs, record it in status",
  description: `Stopping 'gitlb run' leaves the data plane forwarding (pinned under --pin-root/<node>); 'gitlb down' removes it:
the VIPs the node added to a local device (backend nodes; needs --interface), then every pin of the node — the
pinned XDP and TC links are the last reference to the attachments, so the programs detach, which is checked.
Stop the daemon first: a link still held by a running process is refused before anything is removed. With
--repo, the node's status file records it (Ready=False, reason Decommissioned, nothing served). A node still
named by the config is applied again by the next 'gitlb run'; remove it from the config to keep it down.

lb nodes with BGP: BIRD keeps announcing what the daemon last wrote, so down first withdraws every VIP, as
'gitlb run --withdraw-on-exit' does: it writes --bird-config (default <cache-dir>/bird-gitlb.conf) from the
config the node served (its last applied revision in --cache-dir, else the head of --repo) with no VIP announced
and reloads BIRD through --bird-socket. Give the same --bird-config and --bird-socket as to 'gitlb run'. If BIRD
cannot be told, down fails (exit 1) and removes nothing; --bird-socket off skips BGP.

Nothing under --pin-root/<node> may just be the wrong --pin-root: when the node looks alive (gitlb's XDP program
on --interface, a 'gitlb run --node <node>' process with the same --cache-dir) down fails (exit 1) and records
nothing; otherwise it says that nothing was found there and what it recorded.`,
  exitStatus: 'Exit status: 0 removed (or nothing to remove), 1 runtime failure (BIRD could not be told to withdraw, nothing pinned but the node looks alive, a process holds a link, a link stayed attached, Git), 2 usage error.',
  define: (cmd) => {
    cmd
      .requiredOption('--node <name>', 'the node to take down', nodeName)
      .option('--pin-root <dir>', 'bpffs root of pinned programs and maps; node dir below it', '/sys/fs/bpf/gitlb')
      .option('--cache-dir <dir>', 'the node\'s state directory (default /var/lib/gitlb/<node>)')
      .option('--interface <if>', 'the node\'s interface (backend nodes: to remove the VIPs it added)')
      .option('--repo <url|dir>', 'config repository: record the removal in status/<node>.yaml')
      .option('--branch <name>', 'config branch (to find the status branch)', 'main')
      .option('--status-branch <name>', 'status branch (default: from the Cluster, else gitlb-status)')
      .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
      .addOption(pathOption())
      .addOption(commandGitTimeoutOption('fetch and push'));
    addBirdOptions(cmd);
  },
  async run(o, _args, cmd) {
    const cacheDir = o.cacheDir ?? join('/var/lib/gitlb', o.node);
    process.stdout.write(`${await withdrawBgp(o, cacheDir, cmd)}\n`);
    const r = await takeNodeDown({ node: o.node, pinRoot: o.pinRoot, cacheDir, interface: o.interface });
    if (r.nothingToDo) {
      process.stdout.write(`gitlb down: ${o.node} has no data plane under ${r.pinDir}; nothing to remove (nothing found at that pin root, and no sign of a running ${o.node}: no gitlb run process${o.interface ? `, no gitlb XDP program on ${o.interface}` : ''})\n`);
    } else {
      if (r.vips.length) process.stdout.write(`removed VIPs: ${r.vips.join(' ')}\n`);
      if (r.snatAddresses.length) process.stdout.write(`removed SNAT addresses served for lost lb nodes: ${r.snatAddresses.join(' ')}\n`);
      for (const l of r.links) process.stdout.write(`detached ${l}\n`);
      process.stdout.write(`unpinned ${r.pins.length} objects under ${r.pinDir}\n`);
    }
    if (o.repo) {
      const now = new Date().toISOString();
      const what = r.nothingToDo ? `no data plane found under ${r.pinDir} (gitlb down removed nothing)` : `data plane removed by gitlb down (${r.links.length} links detached)`;
      await withStatusBranch(
        statusBranchOptions({ ...o, repo: o.repo }),
        async (remote, statusBranch) => {
          const prev = (await readAllStatuses(remote, statusBranch)).find((s) => s.node === o.node);
          await new StatusWriter({ remote, branch: statusBranch, node: o.node }).write(downStatus(prev, o.node, o.branch, what, now), 'gitlb down');
          process.stdout.write(`recorded in status/${o.node}.yaml on ${statusBranch}: Ready=False/Decommissioned (${what})\n`);
        },
      );
    }
    return 0;
  },
});
