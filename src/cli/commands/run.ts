// `gitlb run`: the GitOps daemon of one node (see docs/reconciler.md).
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type CliCommand, UsageError } from '../command.js';
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

const help = `usage: gitlb run --repo URL|DIR --node NAME [options]

Follows one branch of the config repository and keeps this node's data plane equal to it.
Writes status/<node>.yaml to the status branch after every change.

options:
  --repo URL|DIR            http(s) URL of the config repository, or a local repository path (development)
  --branch NAME             config branch (default main)
  --node NAME               this node's name (a Node document in the config)
  --role lb|backend         data plane to drive (default: the Node document's role at the branch head)
  --interface IF            interface to attach to (lb: optional; backend: required)
  --xdp-mode MODE           native | generic | auto (default auto)
  --pin-root DIR            bpffs root of pinned programs and maps (default /sys/fs/bpf/gitlb); node dir below it
  --cache-dir DIR           per-node Git cache and state (default /var/lib/gitlb/<node>)
  --credentials-file FILE   token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)
  --webhook ADDR:PORT       listen for push webhooks (secret: env GITLB_WEBHOOK_SECRET or --webhook-secret-file)
  --webhook-secret-file F   file holding the webhook shared secret
  --poll SPEC               poll the remote: seconds ("30") or cron ("*/30 * * * * *"); jittered
  --drift SPEC              drift check schedule (default 60 seconds)
  --status-branch NAME      override Cluster.spec.status.branch
  --no-status               do not write status to Git
  --no-health               lb nodes: do not run health checks (every real counts as healthy)
  --peer-poll SPEC          lb nodes: how often to read peers' health observations from the status branch
                            (consensus mode; seconds or cron, default 2)
  --once                    reconcile once, print the outcome and exit (exit 1 if the revision failed)
`;

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

export const command: CliCommand = {
  name: 'run',
  summary: 'run the GitOps reconciler of one node (fetch, validate, apply, status to Git)',
  help,
  async run(argv) {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        repo: { type: 'string' },
        branch: { type: 'string', default: 'main' },
        node: { type: 'string' },
        role: { type: 'string' },
        interface: { type: 'string' },
        'xdp-mode': { type: 'string', default: 'auto' },
        'pin-root': { type: 'string', default: '/sys/fs/bpf/gitlb' },
        'cache-dir': { type: 'string' },
        'credentials-file': { type: 'string' },
        webhook: { type: 'string' },
        'webhook-secret-file': { type: 'string' },
        poll: { type: 'string' },
        drift: { type: 'string' },
        'status-branch': { type: 'string' },
        'no-status': { type: 'boolean', default: false },
        once: { type: 'boolean', default: false },
        'no-health': { type: 'boolean', default: false },
        'peer-poll': { type: 'string', default: '2' },
      },
    });
    if (!values.repo) throw new UsageError('--repo is required');
    if (!values.node) throw new UsageError('--node is required');
    // The node name becomes part of paths (pin root, cache dir, status/<node>.yaml): only the schema's DNS label.
    if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(values.node)) throw new UsageError(`--node '${values.node}' is not a node name (lower-case DNS label)`);
    if (values.role && values.role !== 'lb' && values.role !== 'backend') throw new UsageError('--role must be lb or backend');
    if (!['native', 'generic', 'auto'].includes(values['xdp-mode']!)) throw new UsageError('--xdp-mode must be native, generic or auto');
    if (values.poll) validateSchedule(values.poll);
    if (values.drift) validateSchedule(values.drift);
    validateSchedule(values['peer-poll']!);
    let webhook;
    if (values.webhook) {
      const secret = values['webhook-secret-file']
        ? readFileSync(values['webhook-secret-file'], 'utf8').trim()
        : process.env.GITLB_WEBHOOK_SECRET;
      if (!secret) throw new UsageError('--webhook needs a secret: GITLB_WEBHOOK_SECRET or --webhook-secret-file');
      webhook = { listen: values.webhook, secret };
    }
    const node = values.node;
    const cacheDir = values['cache-dir'] ?? join('/var/lib/gitlb', node);
    const role = (values.role as 'lb' | 'backend' | undefined) ?? (await detectRole(values.repo, values.branch!, node, join(cacheDir, 'git'), loadCredentials({ file: values['credentials-file'] })));
    const open = () => openDataPlane(role, join(values['pin-root']!, node), values.interface, values['xdp-mode']!, cacheDir);
    const dataPlane = await open();
    // lb nodes check their reals; render leaves unhealthy ones out of the rings, and the post-apply gate can
    // fail a revision that costs too much healthy capacity (docs/health.md).
    const runHealth = role === 'lb' && !values['no-health'] && !values.once;
    // Peers' observations (consensus mode) come from their status files; the feed is started below.
    let peerFeed: PeerObservationFeed | null = null;
    const health = runHealth ? new HealthService({ node, log: console, peers: () => peerFeed?.current() ?? [] }) : null;
    const daemon = await startDaemon({
      repo: values.repo,
      branch: values.branch!,
      node,
      dataPlane,
      reopenDataPlane: open,
      cacheDir,
      credentialsFile: values['credentials-file'],
      webhook,
      poll: values.poll,
      drift: values.drift,
      statusBranch: values['status-branch'],
      writeStatus: !values['no-status'],
      ...(health && {
        health: () => health.view(),
        postApplyGate: health.postApplyGate({ maxCapacityLossShare: 0.5 }),
        onApplied: (model) => health.update(model),
        statusHealth: () => health.status(),
      }),
    });
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
          readAllStatuses(daemon.remote, values['status-branch'] ?? daemon.reconciler.statusBranch, (problem) =>
            console.warn(`health: peer status ignored: ${problem}`),
          ),
        onChange: () => daemon.refreshHealth('peer observations changed'),
        log: console,
      });
      peerFeed = feed;
      peerSchedule = everyExclusive(values['peer-poll']!, 'health: peer feed', async () => {
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
    await daemon.stop();
    peerSchedule?.stop();
    snatSweep?.stop();
    neighbourRounds?.stop();
    await health?.checker.stop();
    daemon.reconciler.dataPlane.close(); // pinned programs and maps stay: the data plane keeps forwarding
    return 0;
  },
};
