// `gitlb run`: the GitOps daemon of one node (see docs/reconciler.md). This file only parses flags; the daemon
// is assembled in src/reconciler/node-daemon.ts.
import { readSecretFile, sharedSecretProblem } from '../../reconciler/secrets/secret-file.js';
import { DEFAULT_PEER_PORT, loadPeerKeyFile, loadPeerSecretFile } from '../../reconciler/peer/index.js';
import { join } from 'node:path';
import { addBirdOptions, birdConfigFile, type Command, defineCommand, gitTimeoutMs, gitTimeoutOption, InvalidArgumentError, nodeName, Option, pathOption, UsageError } from '../command.js';
import { startNodeDaemon, StartError, type NodeDaemonOptions } from '../../reconciler/node-daemon.js';
import { validateSchedule } from '../../reconciler/triggers/schedule.js';
import { DEFAULT_GIT_TIMEOUT_MS } from '../../reconciler/source/deadline.js';
import { createLogger, LOG_LEVELS, type LogFormat, type LogLevel } from '../../reconciler/log/logger.js';
import { DEFAULT_METRICS_LISTEN, NodeMetrics, startMetricsServer, type MetricsServer } from '../../reconciler/metrics/index.js';
import { nodeHooks } from '../../reconciler/metrics/hooks.js';
import { loadTrustFile, loadSigningKeyFile } from '../../reconciler/verify/load.js';
import { errorCode } from '../../errors.js';
import { SYNC_RING_BOUNDS, checkSyncRingBytes } from '../../bpf/dataplane/flow-events.js';
import { REJOIN_BOUND_DEFAULT_MS } from '../../reconciler/flows/rejoin-gate.js';
import { HAND_BACK_BOUND_DEFAULT_MS } from '../../reconciler/flows/snat-takeover.js';

/** Flags that pass to the daemon unchanged share NodeDaemonOptions' declarations; the rest are raw flag values. */
interface RunOptions extends Pick<NodeDaemonOptions,
  'repo' | 'branch' | 'node' | 'role' | 'interface' | 'xdpMode' | 'pinRoot' | 'credentialsFile' | 'drift' | 'statusBranch' |
  'health' | 'passiveHealth' | 'peerPoll' | 'trustFrom' | 'allowRewindTo' | 'once' | 'flowSync'> {
  /** --flow-sync-ring, in bytes */
  flowSyncRing?: number;
  /** --rejoin-hold, in seconds */
  rejoinHold: number;
  /** --snat-handback-limit, in seconds */
  snatHandbackLimit: number;
  cacheDir?: string;
  webhook?: string;
  webhookSecretFile?: string;
  poll: string;
  gitTimeout: number;
  status: boolean;
  peerSecretFile?: string;
  peerKey?: string;
  peerListen?: string;
  peerPort: number;
  birdConfig?: string;
  birdSocket: string;
  withdrawOnExit: boolean;
  metrics?: string;
  logFormat?: LogFormat;
  logLevel: LogLevel;
  trust?: string;
  signingKey?: string;
  path: string;
}

/** A full commit id: an abbreviation could name a different commit once the repository grows. */
function commitId(text: string): string {
  if (!/^[0-9a-f]{40}$/.test(text)) throw new InvalidArgumentError('expected a full 40-character commit id');
  return text;
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

function pollSpec(spec: string): string {
  return spec === 'off' ? spec : schedule(spec);
}

/** --flow-sync-ring: bytes (a power of two within the ring's bounds), with an optional K or M suffix. */
function ringBytes(text: string): number {
  const m = /^([0-9]+)([KM]?)$/i.exec(text);
  const n = m ? Number(m[1]) * (m[2]!.toUpperCase() === 'M' ? 1 << 20 : m[2] ? 1 << 10 : 1) : NaN;
  try {
    return checkSyncRingBytes(n);
  } catch (err) {
    throw new InvalidArgumentError(`'${text}': ${(err as Error).message}`);
  }
}

/** --rejoin-hold, --snat-handback-limit: whole seconds, 0 to 3600 (commander puts the flag's name in front). */
export function holdSeconds(text: string): number {
  const n = Number(text);
  if (!/^[0-9]+$/.test(text) || n > 3600) throw new InvalidArgumentError(`'${text}' is not a number of seconds from 0 to 3600`);
  return n;
}

function port(text: string): number {
  const p = Number(text);
  if (!Number.isInteger(p) || p < 1 || p > 65535) throw new InvalidArgumentError(`'${text}' is not a port`);
  return p;
}

function defineRun(cmd: Command): void {
  cmd
    .requiredOption('--repo <url|dir>', 'http(s) URL of the config repository, or a local repository path (development)')
    .option('--branch <name>', 'config branch', 'main')
    .addOption(pathOption())
    .requiredOption('--node <name>', "this node's name (a Node document in the config)", nodeName)
    .addOption(new Option('--role <role>', "data plane to drive (default: the Node document's role at the branch head, else lb)").choices(['lb', 'backend']))
    .option('--interface <if>', "interface to attach to (lb: optional; backend: required); must equal the Node document's; wins over an attachment pinned by an earlier run")
    .addOption(new Option('--xdp-mode <mode>', 'XDP attach mode; native/generic win over a pinned attachment').choices(['native', 'generic', 'auto']).default('auto'))
    .option('--pin-root <dir>', 'bpffs root of pinned programs and maps; node dir below it', '/sys/fs/bpf/gitlb')
    .option('--cache-dir <dir>', 'per-node Git cache and state (default /var/lib/gitlb/<node>)')
    .option('--credentials-file <file>', 'token, or username=/token= lines (env GITLB_GIT_TOKEN, GITLB_GIT_USERNAME win)')
    .option('--poll <spec|off>', 'poll the remote: seconds ("30") or cron ("*/30 * * * * *"), jittered up to 10%; "off" needs --webhook or a local repository', pollSpec, '30')
    .option('--webhook <addr:port>', 'also listen for push webhooks (secret: env GITLB_WEBHOOK_SECRET or --webhook-secret-file)')
    .option('--webhook-secret-file <file>', 'file holding the webhook shared secret')
    .addOption(gitTimeoutOption())
    .option('--drift <spec>', 'drift check schedule (default 60 seconds)', schedule)
    .option('--status-branch <name>', 'override Cluster.spec.status.branch')
    .option('--no-status', 'do not write status to Git')
    .option('--no-health', 'lb nodes: do not run health checks (every real counts as healthy)')
    .option('--no-passive-health', 'lb nodes: do not use the reals\' traffic counters to check a real at once when its new connections go unanswered (active checks only; docs/health.md)')
    .option('--peer-poll <spec>', "lb nodes with a peer channel: how often to ask the other lb nodes for their health observations (votes in consensus mode; in every mode a peer unheard for 10 s is reported silent)", schedule, '2')
    .option('--peer-secret-file <file>', "lb nodes: the cluster's peer secret (at least 32 random bytes: head -c 32 /dev/urandom | base64); authenticates every message between lb daemons (consensus votes, --flow-sync); consensus mode is refused without it or --peer-key")
    .option('--peer-key <file>', "lb nodes, instead of --peer-secret-file: this node's own ed25519 key (unencrypted OpenSSH private key); every peer message is signed with it and checked against the sender's Node spec.peerKey, so no shared secret exists")
    .option('--peer-listen <addr:port>', "where the peer channel listens (default: this node's first address at --peer-port)")
    .option('--peer-port <port>', 'the port every lb daemon listens on for peers', port, DEFAULT_PEER_PORT)
    .option('--flow-sync', 'lb nodes: share connection-table entries and SNAT translations with the other lb nodes over the peer channel (needs --peer-key or --peer-secret-file), so a flow ECMP moves to another lb node keeps its real; off by default', false)
    .option('--flow-sync-ring <bytes>', `lb nodes with --flow-sync: the ring xdp_lb publishes new entries into (a power of two, 4K to 256M, K and M suffixes; default ${SYNC_RING_BOUNDS.default >> 20}M); a full ring loses records (counted) and the sync rescans the tables`, ringBytes)
    .option('--rejoin-hold <seconds>', `lb nodes with --flow-sync and BGP that start with empty maps (a reboot, pins lost): hold every VIP's announcement until each sync peer has sent its whole table, at most this long (0: announce at once; docs/bgp.md)`, holdSeconds, REJOIN_BOUND_DEFAULT_MS / 1000)
    .option('--snat-handback-limit <seconds>', `lb nodes with --flow-sync: a lost lb node's SNAT address taken over here is kept, once that node answers again, until its sync has spoken and the copies of its own translations it asked for reached it, at most this long; then it is given back with a warning (0: give it back as soon as the node answers; docs/bgp.md)`, holdSeconds, HAND_BACK_BOUND_DEFAULT_MS / 1000);
  addBirdOptions(cmd)
    .option('--withdraw-on-exit', 'on SIGTERM/SIGINT, withdraw every VIP by BGP before exiting (without it the routes stay and the pinned data plane keeps forwarding)', false)
    .option('--metrics <addr:port|off>', `Prometheus /metrics and /healthz (default ${DEFAULT_METRICS_LISTEN}; when that default port is taken the daemon runs without metrics and says so)`)
    .addOption(new Option('--log-format <format>', 'log lines on stderr (default: text on a terminal, json otherwise)').choices(['text', 'json']))
    .addOption(new Option('--log-level <level>', 'least severe level logged').choices([...LOG_LEVELS]).default('info'))
    .option('--trust <file>', 'root of trust for commit signatures: SSH allowed_signers lines and/or armored OpenPGP public keys; every new commit must then be signed (docs/verification.md)')
    .option('--trust-from <commit>', 'full id of a commit whose history counts as verified while this node has no local state (<cache-dir>/state.json) of its own (repositories with unsigned history from before signing)', commitId)
    .option('--allow-rewind-to <commit>', 'under verification mode enforce, allow the branch to be rewound to this commit (its full 40-character id) or a descendant of it, which must still verify, may not lower the policy and may not add a signer; without it a tip that does not descend from the last verified revision is refused (NonFastForward)', commitId)
    .option('--signing-key <file>', "sign this node's status and automatic-revert commits (unencrypted OpenSSH or OpenPGP private key)")
    .option('--once', 'reconcile once, print the outcome and exit', false);
}

export const command = defineCommand<RunOptions>({
  name: 'run',
  summary: 'run the GitOps reconciler of one node (fetch, validate, apply, status to Git)',
  description: `Follows one branch of the config repository and keeps this node's data plane equal to it.
Writes status/<node>.yaml to the status branch after every change. Failed fetches are recorded in status
(condition Ready=False, reason FetchFailed) and retried with exponential backoff (1 s doubling up to 5 min)
besides the poll.`,
  exitStatus: `Exit status: 0 stopped by SIGINT/SIGTERM (the data plane stays pinned and forwarding) or, with --once, the
head applied, unchanged or this node decommissioned; 1 runtime failure (with --once: the fetch or the revision
failed); 2 usage error, or a start-up conflict (--interface differs from the Node document).`,
  define: defineRun,
  async run(values) {
    let webhook;
    if (values.webhook) {
      const secret = values.webhookSecretFile ? readSecretFile(values.webhookSecretFile, '--webhook-secret-file').trim() : process.env.GITLB_WEBHOOK_SECRET;
      if (!secret) throw new UsageError('--webhook needs a secret: GITLB_WEBHOOK_SECRET or --webhook-secret-file');
      const short = sharedSecretProblem(secret, 'webhook secret');
      if (short) throw new UsageError(short);
      webhook = { listen: values.webhook, secret };
    }
    // A weak or unreadable peer secret stops the start, naming the file (auth.ts: the rule).
    if (process.env.GITLB_PEER_SECRET && !values.peerSecretFile)
      throw new UsageError('GITLB_PEER_SECRET is no longer read: put the peer secret in a file (mode 0600) and give --peer-secret-file FILE');
    if (values.peerSecretFile && values.peerKey) throw new UsageError('--peer-secret-file and --peer-key exclude each other: give one');
    let peerAuth;
    let peerKey;
    try {
      peerAuth = values.peerSecretFile ? loadPeerSecretFile(values.peerSecretFile) : undefined;
      peerKey = values.peerKey ? loadPeerKeyFile(values.peerKey) : undefined;
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    const poll = values.poll === 'off' ? undefined : values.poll;
    if (!poll && !webhook && /^https?:\/\//i.test(values.repo))
      throw new UsageError('--poll off needs --webhook: otherwise nothing would ever fetch the branch again');
    // Key files first: a broken trust root or signing key is a startup error before anything is attached.
    const trust = values.trust ? await loadTrustFile(values.trust) : null;
    const signer = values.signingKey ? await loadSigningKeyFile(values.signingKey) : undefined;
    const node = values.node;
    const cacheDir = values.cacheDir ?? join('/var/lib/gitlb', node);
    let served: () => string | null = () => null;
    const log = createLogger({ node, format: values.logFormat, level: values.logLevel, revision: () => served() });
    if (trust) log.info(`verification: trust root ${values.trust}: ${trust.ssh.length} SSH and ${trust.pgp.length} OpenPGP keys`);
    if (signer) log.info(`signing own commits with ${signer.describe}`);
    const metricsListen = values.metrics ?? DEFAULT_METRICS_LISTEN;
    let current: { desired: () => import('../../render/state.js').DesiredState | null } | null = null;
    const metrics = values.once || metricsListen === 'off' ? null
      : new NodeMetrics({ node, pinRoot: join(values.pinRoot, node), desired: () => current?.desired() ?? null });
    const hooks = nodeHooks(metrics, log);
    served = hooks.servedRevision;
    let metricsServer: MetricsServer | null = null;
    if (metrics) {
      try {
        metricsServer = await startMetricsServer({
          listen: metricsListen, registry: metrics.registry,
          notReady: () => (!hooks.isStarted() ? 'starting' : hooks.servedRevision() ? null : 'no revision applied yet'),
          onError: (err) => log.warn(`metrics: ${err.message}`, { stage: 'metrics' }),
        });
        log.info(`metrics on ${metricsServer.url}/metrics`, { stage: 'metrics' });
      } catch (err) {
        if (values.metrics !== undefined || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') {
          // a bad --metrics value names the option already; a failing bind (EADDRNOTAVAIL...) gets it in front
          const msg = (err as Error).message;
          throw new UsageError(errorCode(err) === 'InvalidOption' ? msg : `--metrics ${metricsListen}: ${msg}`);
        }
        log.warn(`metrics: default address ${metricsListen} is in use; running without metrics (pass --metrics ADDR:PORT)`, { stage: 'metrics' });
      }
    }
    let nd;
    try {
      nd = await startNodeDaemon({
        repo: values.repo,
        branch: values.branch,
        node,
        role: values.role,
        interface: values.interface,
        xdpMode: values.xdpMode,
        pinRoot: values.pinRoot,
        cacheDir,
        credentialsFile: values.credentialsFile,
        webhook,
        poll: values.once ? undefined : poll,
        drift: values.drift,
        statusBranch: values.statusBranch,
        writeStatus: values.status,
        health: values.health,
        passiveHealth: values.passiveHealth,
        peerPoll: values.peerPoll,
        ...((peerAuth || peerKey) && { peer: { auth: peerAuth, key: peerKey, port: values.peerPort, listen: values.peerListen } }),
        flowSync: values.flowSync,
        ...(values.flowSyncRing !== undefined && { flowSyncRingBytes: values.flowSyncRing }),
        rejoinHoldMs: values.rejoinHold * 1000,
        snatHandbackLimitMs: values.snatHandbackLimit * 1000,
        gitTimeoutMs: gitTimeoutMs(values.gitTimeout),
        configPath: values.path,
        bird: values.birdSocket === 'off' ? undefined : { configFile: birdConfigFile(values.birdConfig, cacheDir), socket: values.birdSocket, withdrawOnExit: values.withdrawOnExit },
        once: values.once,
        log,
        hooks,
        trust,
        signer,
        trustFrom: values.trustFrom,
        allowRewindTo: values.allowRewindTo,
      });
      current = { desired: () => nd!.daemon.reconciler.desired };
    } catch (err) {
      if (err instanceof StartError) throw new UsageError(err.message);
      throw err;
    }
    if (values.once) {
      await nd.daemon.idle();
      await nd.stop();
      const s = nd.daemon.reconciler.snapshot();
      const out = nd.lastOutcome();
      const failed = out?.kind === 'failed' || out?.kind === 'waiting';
      const last = out?.kind === 'failed' && out.stage === 'fetch' ? 'fetch failed' : (s.lastAttempt?.result ?? '-');
      process.stdout.write(`applied ${s.appliedRevision ?? '(none)'}; last attempt ${last}${failed && out && 'reason' in out ? `: ${out.reason}` : ''}\n`);
      return failed ? 1 : 0;
    }
    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      process.once('SIGINT', () => resolve('SIGINT'));
      process.once('SIGTERM', () => resolve('SIGTERM'));
    });
    // What stays behind is the point of this line: the pinned data plane keeps forwarding without the daemon.
    const bgpNote = nd.role === 'lb' && values.birdSocket !== 'off' && values.withdrawOnExit ? '; withdrawing every VIP by BGP first' : '';
    log.info(`stopping on ${signal}: data plane left pinned and forwarding${bgpNote}`, { stage: 'stop', signal });
    await nd.stop({ lastStatus: `stopping on ${signal}` });
    await metricsServer?.close();
    return 0;
  },
});
