// `gitlb run`: the GitOps daemon of one node (see docs/reconciler.md).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Command, defineCommand, InvalidArgumentError, Option, UsageError } from '../command.js';
import { startDaemon } from '../../reconciler/daemon.js';
import { startSchedule, validateSchedule } from '../../reconciler/triggers/schedule.js';
import { readAllStatuses } from '../../reconciler/status/status-report.js';
import { PeerObservationFeed } from '../../reconciler/health/peer-feed.js';
import { agreementMode } from '../../reconciler/health/agreement.js';
import { detectRole } from '../../reconciler/node-role.js';
import { loadCredentials } from '../../reconciler/source/credentials.js';
import type { DataPlane, LbDataPlaneHandle } from '../../bpf/dataplane/index.js';
import { sweepSnat } from '../../bpf/dataplane/snat.js';
import { refreshNeighbours } from '../../reconciler/neighbours.js';
import type { DesiredState } from '../../render/state.js';
import { HealthService } from '../../reconciler/health/service.js';
import { BgpAnnouncer } from '../../reconciler/bgp/announcer.js';
import { bgpNode } from '../../render/bgp/bird.js';

interface RunOptions {
  repo: string;
  branch: string;
  node: string;
  role?: 'lb' | 'backend';
  interface?: string;
  xdpMode: 'native' | 'generic' | 'auto';
  pinRoot: string;
  cacheDir?: string;
  credentialsFile?: string;
  webhook?: string;
  webhookSecretFile?: string;
  poll?: string;
  drift?: string;
  statusBranch?: string;
  status: boolean;
  health: boolean;
  peerPoll: string;
  birdConfig?: string;
  birdSocket: string;
  withdrawOnExit: boolean;
  once: boolean;
}

/** Schedules are checked while parsing, so a typo is a usage error before anything starts. */
function schedule(spec: string): string {
  try {
    validateSchedule(spec);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return spec;
}

function nodeName(name: string): string {
  // The node name becomes part of paths (pin root, cache dir, status/<node>.yaml): only the schema's DNS label.
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) throw new InvalidArgumentError(`'${name}' is not a node name (lower-case DNS label)`);
  return name;
}

function defineRun(cmd: Command): void {
  cmd
    .requiredOption('--repo <url|dir>', 'http(s) URL of the config repository, or a local repository path (development)')
    .option('--branch <name>', 'config branch', 'main')
    .requiredOption('--node <name>', "this node's name (a Node document in the config)", nodeName)
    .addOption(new Option('--role <role>', "data plane to drive (default: the Node document's role at the branch head)").choices(['lb', 'backend']))
    .option('--interface <if>', 'interface to attach to (lb: optional; backend: required)')
    .addOption(new Option('--xdp-mode <mode>', 'XDP attach mode').choices(['native', 'generic', 'auto']).default('auto'))
    .option('--pin-root <dir>', 'bpffs root of pinned programs and maps; node dir below it', '/sys/fs/bpf/gitlb')
    .option('--cache-dir <dir>', 'per-node Git cache and state (default /var/lib/gitlb/<node>)')
    .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
    .option('--webhook <addr:port>', 'listen for push webhooks (secret: env GITLB_WEBHOOK_SECRET or --webhook-secret-file)')
    .option('--webhook-secret-file <file>', 'file holding the webhook shared secret')
    .option('--poll <spec>', 'poll the remote: seconds ("30") or cron ("*/30 * * * * *"); jittered', schedule)
    .option('--drift <spec>', 'drift check schedule (default 60 seconds)', schedule)
    .option('--status-branch <name>', 'override Cluster.spec.status.branch')
    .option('--no-status', 'do not write status to Git')
    .option('--no-health', 'lb nodes: do not run health checks (every real counts as healthy)')
    .option('--peer-poll <spec>', "lb nodes: how often to read peers' health observations from the status branch (consensus mode)", schedule, '2')
    .option('--bird-config <file>', "lb nodes with BGP: the generated BIRD file to write, included by BIRD's main configuration (default <cache-dir>/bird-gitlb.conf; docs/bgp.md)")
    .option('--bird-socket <path>', "BIRD's control socket for birdc configure", '/run/bird/bird.ctl')
    .option('--withdraw-on-exit', 'on SIGTERM/SIGINT, withdraw every VIP by BGP before exiting (without it the routes stay and the pinned data plane keeps forwarding)', false)
    .option('--once', 'reconcile once, print the outcome and exit (exit 1 if the revision failed)', false);
}

async function openDataPlane(role: 'lb' | 'backend', pinRoot: string, iface: string | undefined, xdpMode: string, stateDir?: string): Promise<DataPlane> {
  if (role === 'backend') {
    if (!iface) throw new UsageError('--interface is required for a backend node');
    const { openBackendDataPlane } = await import('../../bpf/backend/index.js');
    const dp = await openBackendDataPlane({ pinRoot, interface: iface });
    if (!stateDir) return dp;
    // l2/ipip VIPs must be local addresses on a backend: added and released around each apply.
    const { withBackendVips } = await import('../../reconciler/backend-vips.js');
    return withBackendVips(dp, { stateFile: join(stateDir, 'backend-vips.json'), nodeInterface: iface });
  }
  const { openLbDataPlane } = await import('../../bpf/dataplane/index.js');
  return openLbDataPlane({ pinRoot, interface: iface, xdpMode: xdpMode as 'native' | 'generic' | 'auto' });
}

/**
 * Runs `task` on a schedule, skipping a tick while the previous run is still going, so a slow dependency (the
 * Git server, `ip`) never piles up work. Errors are logged with `what`; they never stop the schedule.
 */
function everyExclusive(spec: string, what: string, task: () => Promise<void>): { stop(): void; now(): void } {
  let running = false;
  const tick = () => {
    if (running) return;
    running = true;
    task()
      .catch((err) => console.warn(`${what}: ${(err as Error).message}`))
      .finally(() => (running = false));
  };
  return { ...startSchedule({ spec, onTick: tick }), now: tick };
}

/** Every 5 s, make sure each real of the applied state has a usable neighbour entry (or its next hop has). */
function startNeighbourRefresh(desired: () => DesiredState | null): { stop(): void } {
  const rounds = everyExclusive('5', 'neighbours', async () => {
    const nudged = await refreshNeighbours(desired()?.reals.map((r) => r.address) ?? []);
    if (nudged.length) console.log(`neighbours: resolving ${nudged.join(', ')}`);
  });
  setTimeout(rounds.now, 500).unref();
  return rounds;
}

/** Every 10 s, delete expired SNAT translations of the current lb data plane (docs/datapath.md, SNAT). */
function startSnatSweep(current: () => DataPlane): { stop(): void } {
  return startSchedule({
    spec: '10',
    onTick: () => {
      const dp = current() as Partial<LbDataPlaneHandle>;
      const obj = dp.object?.();
      if (!obj) return;
      try {
        const n = sweepSnat(obj);
        if (n > 0) console.log(`snat: swept ${n} expired translations`);
      } catch (err) {
        console.warn(`snat: sweep failed: ${(err as Error).message}`);
      }
    },
  });
}

export const command = defineCommand<RunOptions>({
  name: 'run',
  summary: 'run the GitOps reconciler of one node (fetch, validate, apply, status to Git)',
  description: `Follows one branch of the config repository and keeps this node's data plane equal to it.
Writes status/<node>.yaml to the status branch after every change.`,
  exitStatus: `Exit status: 0 stopped by SIGINT/SIGTERM (the data plane stays pinned and forwarding) or, with --once, the
revision applied; 1 runtime failure (with --once: the revision failed); 2 usage error.`,
  define: defineRun,
  async run(values) {
    let webhook;
    if (values.webhook) {
      const secret = values.webhookSecretFile ? readFileSync(values.webhookSecretFile, 'utf8').trim() : process.env.GITLB_WEBHOOK_SECRET;
      if (!secret) throw new UsageError('--webhook needs a secret: GITLB_WEBHOOK_SECRET or --webhook-secret-file');
      webhook = { listen: values.webhook, secret };
    }
    const node = values.node;
    const cacheDir = values.cacheDir ?? join('/var/lib/gitlb', node);
    const role = values.role ?? (await detectRole(values.repo, values.branch, node, join(cacheDir, 'git'), loadCredentials({ file: values.credentialsFile })));
    const open = () => openDataPlane(role, join(values.pinRoot, node), values.interface, values.xdpMode, cacheDir);
    const dataPlane = await open();
    // lb nodes check their reals; render leaves unhealthy ones out of the rings, and the post-apply gate can
    // fail a revision that costs too much healthy capacity (docs/health.md).
    const runHealth = role === 'lb' && values.health && !values.once;
    // Peers' observations (consensus mode) come from their status files; the feed is started below.
    let peerFeed: PeerObservationFeed | null = null;
    // lb nodes announce their VIPs through BIRD when the config has BGP settings (docs/bgp.md).
    const bgp =
      role === 'lb' && !values.once
        ? new BgpAnnouncer({
            node,
            configFile: values.birdConfig ?? join(cacheDir, 'bird-gitlb.conf'),
            birdSocket: values.birdSocket,
            interface: values.interface,
            applied: () => ({ model: daemon.reconciler.appliedConfig, desired: daemon.reconciler.desired }),
            log: console,
          })
        : null;
    const health = runHealth ? new HealthService({ node, log: console, peers: () => peerFeed?.current() ?? [] }) : null;
    const daemon = await startDaemon({
      repo: values.repo,
      branch: values.branch,
      node,
      dataPlane,
      reopenDataPlane: open,
      cacheDir,
      credentialsFile: values.credentialsFile,
      webhook,
      poll: values.poll,
      drift: values.drift,
      statusBranch: values.statusBranch,
      writeStatus: values.status,
      ...(health && {
        health: () => health.view(),
        postApplyGate: health.postApplyGate({ maxCapacityLossShare: 0.5 }),
        onApplied: (model) => health.update(model),
        statusHealth: () => health.status(),
      }),
      ...(bgp && { statusBgp: () => (bgpNode(daemon.reconciler.appliedConfig, node) ? bgp.status() : null) }),
    });
    bgp?.start();
    health?.onChange(() => daemon.refreshHealth('health change'));
    // XDP cannot resolve next hops: keep the reals' neighbour entries usable (src/reconciler/neighbours.ts).
    const neighbourRounds = role === 'lb' && !values.once ? startNeighbourRefresh(() => daemon.reconciler.desired) : null;
    // SNAT translations are plain hash entries (never silently evicted): expired ones are swept here.
    const snatSweep = role === 'lb' && !values.once ? startSnatSweep(() => daemon.reconciler.dataPlane) : null;
    let peerSchedule: { stop(): void } | null = null;
    if (health) {
      const feed = new PeerObservationFeed({
        node,
        readStatuses: () =>
          readAllStatuses(daemon.remote, values.statusBranch ?? daemon.reconciler.statusBranch, (problem) =>
            console.warn(`health: peer status ignored: ${problem}`),
          ),
        onChange: () => daemon.refreshHealth('peer observations changed'),
        log: console,
      });
      peerFeed = feed;
      peerSchedule = everyExclusive(values.peerPoll, 'health: peer feed', async () => {
        const model = daemon.reconciler.appliedConfig;
        // Only consensus mode votes with peers; in local mode reading their status would be wasted load.
        if (model && agreementMode(model).mode === 'consensus') await feed.refresh();
      });
    }
    if (values.once) {
      await daemon.idle();
      await daemon.stop();
      daemon.reconciler.dataPlane.close();
      const s = daemon.reconciler.snapshot();
      process.stdout.write(`applied ${s.appliedRevision ?? '(none)'}; last attempt ${s.lastAttempt?.result ?? '-'}${s.lastAttempt?.reason ? `: ${s.lastAttempt.reason}` : ''}\n`);
      return s.lastAttempt?.result === 'failed' ? 1 : 0;
    }
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
    // Withdraw first, so the routers move new flows away while this node still forwards what arrives.
    if (values.withdrawOnExit) await bgp?.withdrawAll();
    bgp?.stop();
    await daemon.stop();
    peerSchedule?.stop();
    snatSweep?.stop();
    neighbourRounds?.stop();
    await health?.checker.stop();
    daemon.reconciler.dataPlane.close(); // pinned programs and maps stay: the data plane keeps forwarding
    return 0;
  },
});
