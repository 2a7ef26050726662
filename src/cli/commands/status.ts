// `gitlb status`: does every node serve the branch head, recently, with agreeing tables? One line per node, the
// details that need a look, a verdict, and an exit status a script or a probe can act on.
import { defineCommand, duration, formatOption, Option } from '../command.js';
import { addStatusReadOptions, statusBranchOptions, type StatusReadOptions } from '../status-options.js';
import { withStatusBranch, type ConfigTip } from '../../reconciler/status/open-status-remote.js';
import { readAllStatuses } from '../../reconciler/status/status-report.js';
import { assessStatus, formatStatusVerdict } from '../../reconciler/status/assess.js';
import { readCommitInfo, readRevisionFiles } from '../../reconciler/source/git-objects.js';
import type { GitRemote } from '../../reconciler/source/git-remote.js';
import { parseConfig } from '../../render/config/index.js';
import { escapeControl } from '../../render/escape.js';

interface StatusOptions extends StatusReadOptions {
  format: 'text' | 'json';
  behindGrace: number;
  staleAfter: number;
  ignoreDegraded: boolean;
}

/** The config branch's head, its commit time and the nodes its config names. */
async function configHead(remote: GitRemote, configTip: ConfigTip, path: string) {
  const oid = await configTip();
  if (!oid) return { head: null, nodes: [] };
  const info = await readCommitInfo(remote.gitdir, oid);
  const { model } = parseConfig(await readRevisionFiles(remote.gitdir, oid, path));
  return {
    head: { oid, committedAt: new Date(info.committedAt * 1000) },
    nodes: model?.nodes.map((n) => ({ name: n.metadata.name, role: n.spec.role })) ?? [],
  };
}

export const command = defineCommand<StatusOptions>({
  name: 'status',
  summary: 'is every node serving the branch head, recently, with agreeing tables? (exit 1 when not)',
  description: `Reads status/<node>.yaml of every node from the status branch (--status-branch, else the config
branch's Cluster.spec.status.branch, else gitlb-status) and judges it against the head of the config branch and
the clock. Columns: NODE, ROLE, XDP (attach mode in use: native, generic, or generic (fallback) when native
could not forward), APPLIED revision, BRANCH (head, or behind for how long since the head was
committed; DOWN taken down; STOPPED its daemon stopped), UPDATED (age of the status file; STALE past --stale-after),
DIGESTS (agree or differ with the Maglev table digests of the other lb nodes at the same applied revision and with
the same reals down; behind: the others serve another revision; not compared: the others at its revision report
other reals down, e.g. its file predates a health flip), READY (the Ready condition), UNHEALTHY (active reals its
health checks report down), LAST ERROR. Below: unhealthy reals per service, warnings (force-push, decommission),
conditions that are not fine, and a verdict listing every problem. Nodes the config names that wrote no status are
listed as problems; so is an lb node whose status predates a health flip another reports (it cannot reach Git), and
an lb node another lb node has not heard on the peer channel for 10 s (docs/health.md, "Status layout").`,
  exitStatus: `Exit status: 0 OK; 1 on any problem: a node failed its last attempt, is degraded (reals down, drift repaired;
not with --ignore-degraded), is behind the branch longer than --behind-grace, is stale, wrote no status, was stopped or
taken down (gitlb down) while the config still names it, cannot write its status since a health flip (consensus mode),
is silent on the peer channel to another lb node, lb nodes at one revision and health view hold different digests, or the lb nodes serve different revisions longer
than --behind-grace (also when the status cannot be read); 2 usage error.`,
  define: (cmd) =>
    addStatusReadOptions(cmd)
      .addOption(formatOption(['text', 'json'], 'text', 'text, or JSON {ok, head, problems, nodes[] with each node\'s verdict and status}'))
      .addOption(new Option('--behind-grace <duration>', 'how long a node may serve an older revision than the head').argParser(duration).default(120_000, '2m'))
      .addOption(
        new Option('--stale-after <duration>', 'a status file older than this is stale (nodes rewrite it at least every 5m)').argParser(duration).default(900_000, '15m'),
      )
      .addOption(new Option('--ignore-degraded', 'degraded nodes (reals down, drift repaired) are shown but do not make the exit status 1').default(false)),
  async run(opts) {
    const now = new Date();
    const { statuses, config } = await withStatusBranch(statusBranchOptions(opts), async (r, statusBranch, configTip) => ({
      statuses: await readAllStatuses(r, statusBranch, (problem) => process.stderr.write(`gitlb status: skipped ${escapeControl(problem)}\n`)),
      config: await configHead(r, configTip, opts.path),
    }),
    );
    const verdict = assessStatus({
      statuses,
      head: config.head,
      configNodes: config.nodes,
      now,
      behindGraceMs: opts.behindGrace,
      staleAfterMs: opts.staleAfter,
      ignoreDegraded: opts.ignoreDegraded,
    });
    const json = opts.json || opts.format === 'json';
    if (json) {
      const byNode = new Map(statuses.map((s) => [s.node, s]));
      const nodes = verdict.nodes.map((n) => ({ ...n, status: byNode.get(n.node) ?? null }));
      process.stdout.write(JSON.stringify({ ...verdict, nodes }, null, 2) + '\n');
    } else {
      process.stdout.write(formatStatusVerdict(verdict, now));
    }
    return verdict.ok ? 0 : 1;
  },
});
