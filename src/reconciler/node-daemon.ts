// The composition root of `gitlb run`: opens this node's data plane and assembles the daemon around it — the
// reconciler with its triggers (daemon.ts), the health checker and its own re-render path, the peer
// observation feed (consensus mode), the BGP announcer, and the scheduled tasks of an lb node (neighbour
// refresh, SNAT sweep).
// src/cli/commands/run.ts only parses flags into NodeDaemonOptions.
import { join } from 'node:path';
import { existsSync } from 'node:fs';
import { RejoinGate, REJOIN_BOUND_DEFAULT_MS } from './flows/rejoin-gate.js';
import type { DataPlane, LbDataPlaneHandle } from '../bpf/dataplane/index.js';
import type { ConfigModel } from '../render/model.js';
import { startDaemon, type Daemon } from './daemon.js';
import { nodeAtHead } from './state/served-model.js';
import { everyExclusive } from './triggers/schedule.js';
import { PeerObservationFeed } from './health/peer-feed.js';
import { healthPeers, PEER_SILENT_MS, type HealthPeers } from './health/peer-wiring.js';
import { lbPeers } from './health/peer-exchange.js';
import type { FlowSyncLocalReport, PeerSyncReport } from './flows/flow-sync.js';
import type { HandBackWait, HandbackReport, SnatTakeover } from './flows/snat-takeover.js';
import type { StatusDrain } from './flows/drain-watch.js';
import { nodeKeyAuth, peerKeyBlob, startPeerChannel, type PeerAuth, type PeerChannel, type PeerChannelMetrics, type PeerKey } from './peer/index.js';
import { parseListen } from './triggers/webhook.js';
import { agreementMode } from './health/agreement.js';
import { readOwnLocalState } from './state/local-state.js';
import { policyFor } from './verify/revision-check.js';
import { HealthService } from './health/service.js';
import { startPassivePoll } from './health/passive-poll.js';
import { vipProbeRouter } from './health/vip-router.js';
import { startNeighbourRefresh } from './host/neighbours.js';
import { startSnatSweep } from './flows/snat-sweep.js';
import { reconcilePinnedXdp } from './host/xdp-pin.js';
import { BgpAnnouncer } from './bgp/announcer.js';
import type { Logger, Outcome } from './loops/reconciler.js';
import type { GitRemote } from './source/git-remote.js';
import type { HealthChange } from './health/checker.js';

/** Observability (src/reconciler/metrics/hooks.ts): hears what the node does, changes nothing. */
export interface NodeDaemonHooks {
  wrapRemote?(remote: GitRemote): GitRemote;
  onReconcile?(why: string, outcome: Outcome): void;
  onHealthChange?(e: HealthChange): void;
  /** Called once the parts exist, so collectors can read them at scrape time. */
  started?(parts: { daemon: Daemon; role: 'lb' | 'backend'; health: HealthService | null; bgp?: BgpAnnouncer | null;
    flowSync?: { report(): Record<string, PeerSyncReport>; local?(): FlowSyncLocalReport; drain?(): StatusDrain | null; serving?(): Record<string, string>;
      handback?(): Record<string, HandbackReport> } | null;
    peerChannel?: PeerChannel | null }): void;
  /** Hears every peer message refused (gitlb_peer_messages_rejected_total). */
  peerMetrics?: PeerChannelMetrics;
}
import type { Trust } from './verify/trust.js';
import type { PayloadSigner } from './source/git-objects.js';

export interface NodeDaemonOptions {
  repo: string;
  branch: string;
  node: string;
  role?: 'lb' | 'backend';
  interface?: string;
  xdpMode: 'native' | 'generic' | 'auto';
  pinRoot: string; // the node's pins live in <pinRoot>/<node>
  cacheDir: string;
  credentialsFile?: string;
  webhook?: { listen: string; secret: string };
  poll?: string; // undefined: no polling
  drift?: string;
  statusBranch?: string;
  writeStatus: boolean;
  health: boolean; // lb nodes: run health checks
  /** lb nodes with health checks: read the reals' traffic counters for passive signals (default true; docs/health.md). */
  passiveHealth?: boolean;
  peerPoll: string;
  /**
   * Consensus mode: votes travel only over the authenticated peer channel (src/reconciler/peer/), keyed by the
   * cluster's peer secret (`auth`) or by this node's own ed25519 key (`key`; the peers' keys are their Node
   * documents' spec.peerKey). Listens on `listen`, default this node's first address at `port`; peers are the other
   * lb nodes' first addresses at `port`. Without it consensus mode is refused at start (docs/security.md, Peers).
   */
  peer?: { auth?: PeerAuth; key?: PeerKey; port: number; listen?: string };
  /**
   * lb nodes: share connection-table entries and SNAT translations with the other lb nodes over the peer channel
   * (`gitlb run --flow-sync`, off by default; needs `peer`; docs/datapath.md "Connection-state sync").
   */
  flowSync?: boolean;
  /** lb nodes: bytes of the ring xdp_lb publishes new entries into for the sync (`--flow-sync-ring`). */
  flowSyncRingBytes?: number;
  /** lb nodes with flow sync that start with empty maps: hold BGP announcements until every sync peer sent its whole
   * table, at most this long (`--rejoin-hold`; default 30 s; 0: never hold; flows/rejoin-gate.ts). */
  rejoinHoldMs?: number;
  /** lb nodes with flow sync: how long a SNAT address taken over is kept at most for its returned owner while that
   * owner has not shown it has its own translations back (`--snat-handback-limit`; default 120 s; 0: given back as
   * soon as it answers; flows/snat-takeover.ts). */
  snatHandbackLimitMs?: number;
  gitTimeoutMs: number;
  /** Subdirectory of the repository that holds the config (`gitlb run --path`); '' for the root. */
  configPath?: string;
  /** lb nodes with BGP settings announce their VIPs through BIRD (docs/bgp.md). */
  bird?: { configFile: string; socket: string; withdrawOnExit: boolean };
  once: boolean;
  /** Root of trust for commit signatures (--trust) and this node's commit signer (--signing-key); docs/verification.md. */
  trust?: Trust | null;
  signer?: PayloadSigner;
  /** Commits reachable from this one count as verified while the node has no local state (--trust-from). */
  trustFrom?: string;
  /** Under enforce, a rewind to this commit (or a descendant) is allowed (--allow-rewind-to). */
  allowRewindTo?: string;
  log?: Logger;
  hooks?: NodeDaemonHooks;
}

export interface NodeDaemon {
  daemon: Daemon;
  role: 'lb' | 'backend';
  /** The outcome of the latest reconcile pass. */
  lastOutcome(): Outcome | null;
  /** Bounded: Git operations are aborted; `lastStatus` asks for one last status write (Daemon.stop). */
  stop(opts?: { lastStatus?: string }): Promise<void>;
}

/** A start-up problem the operator must fix (bad flag combination); `gitlb run` exits 2 with its message. */
export class StartError extends Error {}

async function openDataPlane(role: 'lb' | 'backend', o: NodeDaemonOptions): Promise<DataPlane> {
  const pinDir = join(o.pinRoot, o.node);
  if (role === 'backend') {
    if (!o.interface) throw new StartError('--interface is required for a backend node');
    const { openBackendDataPlane } = await import('../bpf/backend/index.js');
    const dp = await openBackendDataPlane({ pinRoot: pinDir, interface: o.interface });
    // l2/ipip VIPs must be local addresses on a backend: added and released around each apply.
    const { withBackendVips } = await import('./host/backend-vips.js');
    return withBackendVips(dp, { stateFile: join(o.cacheDir, 'backend-vips.json'), nodeInterface: o.interface });
  }
  const { openLbDataPlane } = await import('../bpf/dataplane/index.js');
  return openLbDataPlane({ pinRoot: pinDir, interface: o.interface, xdpMode: o.xdpMode,
    ...(o.flowSyncRingBytes !== undefined && { syncRingBytes: o.flowSyncRingBytes }) });
}

/** Decommission: the data plane handle is closed; remove VIPs we added, then the pins (which detaches links). */
async function teardown(role: 'lb' | 'backend', o: NodeDaemonOptions, log: Logger): Promise<void> {
  // The same removal as `gitlb down` (VIPs, pins, links checked detached); this process's own handles are closed.
  const { takeNodeDown } = await import('./decommission/node-down.js');
  const r = await takeNodeDown({ node: o.node, pinRoot: o.pinRoot, cacheDir: o.cacheDir, interface: o.interface });
  log.info(`decommissioned ${role} node: removed ${r.pinDir} (${r.links.length} links detached)${r.vips.length ? ` and VIPs ${r.vips.join(' ')}` : ''}`);
}

/** Serving a lost lb node's SNAT address with the translations it synced here (flows/snat-takeover.ts). */
async function startSnatTakeover(o: NodeDaemonOptions, d: Daemon, log: Logger,
  sync: { handBackWaitingFor(node: string, sinceMs: number): HandBackWait[]; nudge(node: string): void; rejoining(): boolean }): Promise<SnatTakeover> {
  const { SnatTakeover } = await import('./flows/snat-takeover.js');
  const lbNodes = () => (d.reconciler.appliedConfig?.nodes ?? []).filter((n) => n.spec.role === 'lb');
  const t = new SnatTakeover({
    node: o.node,
    peers: () => lbNodes().filter((n) => n.metadata.name !== o.node && n.spec.addresses.length > 0).map((n) => ({
      node: n.metadata.name,
      ...(n.spec.snatAddress && { snatAddress: n.spec.snatAddress }),
      probe: { host: n.spec.addresses[0]!, port: o.peer?.port ?? 0 },
    })),
    ownSnatAddress: () => lbNodes().find((n) => n.metadata.name === o.node)?.spec.snatAddress,
    // never taken over: every node's address, and the SNAT address of an lb node without one (it is never probed)
    nodeAddresses: () => (d.reconciler.appliedConfig?.nodes ?? []).flatMap((n) =>
      [...n.spec.addresses, ...(n.spec.role === 'lb' && n.spec.addresses.length === 0 && n.spec.snatAddress ? [n.spec.snatAddress] : [])]),
    interface: () => o.interface ?? d.reconciler.desired?.interface,
    object: () => (d.reconciler.dataPlane as Partial<LbDataPlaneHandle>).object?.() ?? null,
    // a returned owner gets its address back once it has its own translations; this node's own waits for its own
    handBackWaitingFor: (node, since) => sync.handBackWaitingFor(node, since),
    nudge: (node) => sync.nudge(node),
    ...(o.snatHandbackLimitMs !== undefined && { handBackBoundMs: o.snatHandbackLimitMs }),
    onHandbackChange: (why) => {
      log.info(why);
      d.reconciler.publishStatus(why);
    },
    ownAddressHeld: () => sync.rejoining(),
    log,
  });
  t.start();
  return t;
}

/** A drained lb node's remaining traffic (flows/drain-watch.ts): sampled every 5 s; the status is written when the
 * node becomes stoppable or carries traffic again. */
async function startDrainWatch(o: NodeDaemonOptions, d: Daemon, log: Logger): Promise<{ stop(): void; report(): StatusDrain | null }> {
  const { DrainWatch, ACTIVE_TRANSLATION_S, ACTIVE_CONNECTION_S } = await import('./flows/drain-watch.js');
  const { connectionsSeenWithin } = await import('../bpf/dataplane/conntrack-seen.js');
  const { readLbStats } = await import('../bpf/dataplane/pinned-stats.js');
  const { countActiveOwnTranslations, monotonicNs } = await import('../bpf/dataplane/snat.js');
  const watch = new DrainWatch();
  let couldStop: boolean | null = null;
  // one round at a time: the NAT table is read in pages, yielding to the event loop between them
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void (async () => {
      try {
        const me = d.reconciler.appliedConfig?.nodes.find((n) => n.metadata.name === o.node);
        const obj = (d.reconciler.dataPlane as Partial<LbDataPlaneHandle>).object?.() ?? null;
        const stats = me?.spec.state === 'drain' && obj ? readLbStats(join(o.pinRoot, o.node)) : null;
        if (!stats || !obj) {
          watch.observe(null, Date.now());
          couldStop = null;
          return;
        }
        const now = monotonicNs();
        const recent = BigInt(ACTIVE_TRANSLATION_S) * 1_000_000_000n;
        const activeTranslations = await countActiveOwnTranslations(obj, recent, now);
        const vipPackets = [...stats.services.values()].reduce((n, t) => n + t.packets, 0);
        const activeConnections = await connectionsSeenWithin(obj.map('lb_conntrack'), ACTIVE_CONNECTION_S, now);
        watch.observe({ vipPackets, activeTranslations, activeConnections }, Date.now());
        const r = watch.report(Date.now());
        if (r && r.canStop !== couldStop) {
          const line = r.canStop ? 'drain: no VIP traffic, no active connection and no active SNAT translation: this node can be stopped'
            : `drain: still carrying traffic (${r.packetsPerSecond} packets/s, ${r.activeConnections} connections seen in the last ${ACTIVE_CONNECTION_S} s, ${r.activeTranslations} active SNAT translations)`;
          log.info(line, { stage: 'drain' });
          d.reconciler.publishStatus(line);
          couldStop = r.canStop;
        }
      } catch (err) {
        log.warn(`drain watch: ${(err as Error).message}`);
      } finally {
        running = false;
      }
    })();
  }, 5000);
  timer.unref();
  return { stop: () => clearInterval(timer), report: () => watch.report(Date.now()) };
}

/** Connection-state sync with the other lb nodes of the applied config (flow-sync.ts). */
async function startFlowSync(o: NodeDaemonOptions, channel: PeerChannel, d: Daemon, log: Logger, rejoining: () => boolean)
  : Promise<{ stop(): void; report(): Record<string, PeerSyncReport>; local(): FlowSyncLocalReport; resyncReceived(peer: string): boolean;
    handBackWaitingFor(node: string, sinceMs: number): HandBackWait[]; nudge(node: string): void }> {
  const { FlowSync } = await import('./flows/flow-sync.js');
  const sync = new FlowSync({
    node: o.node,
    channel,
    peers: () => lbPeers(d.reconciler.appliedConfig, o.node, 0).map((p) => p.node),
    object: () => (d.reconciler.dataPlane as Partial<LbDataPlaneHandle>).object?.() ?? null,
    desired: () => d.reconciler.desired,
    snatAddressOf: (node) => (d.reconciler.appliedConfig?.nodes ?? [])
      .find((n) => n.spec.role === 'lb' && n.metadata.name === node)?.spec.snatAddress,
    rejoining,
    log,
  });
  sync.start();
  log.info('flow sync: sharing connection-table entries and SNAT translations with the other lb nodes');
  return { stop: () => void sync.stop(), report: () => sync.report(), local: () => sync.localReport(), resyncReceived: (p) => sync.resyncReceived(p),
    handBackWaitingFor: (n, since) => sync.handBackWaitingFor(n, since), nudge: (n) => sync.nudge(n) };
}

export async function startNodeDaemon(o: NodeDaemonOptions): Promise<NodeDaemon> {
  const log = o.log ?? { info: (m: string) => console.log(m), warn: (m: string) => console.warn(m) };
  const head = await nodeAtHead(o);
  const own = head.model?.nodes.find((n) => n.metadata.name === o.node);
  const role = o.role ?? own?.spec.role ?? 'lb';
  // The checks against the head below refuse to start, unless verification is enforced: then the head is not
  // verified yet (nothing read it but a depth-1 fetch), and one unsigned commit must not stop every node that
  // restarts; they are warnings, and the verified config decides when it is applied.
  const enforced = policyFor((await readOwnLocalState(join(o.cacheDir, 'state.json'), o.node, o.branch))?.verification, !!o.trust).mode === 'enforce';
  const headProblem = (message: string): void => {
    if (!enforced) throw new StartError(message);
    log.warn(`${message} (a warning: the head is not verified yet)`);
  };
  // Flags given at start win, or the daemon refuses to start: a mismatch found later would fail every apply.
  // Checked against the head only: the last applied revision may predate a change of interface.
  if (o.interface && own && head.reachable && own.spec.interface !== o.interface)
    headProblem(`--interface ${o.interface} differs from the Node document '${o.node}' at the head of ${o.branch} (interface: ${own.spec.interface}); fix one of them`);
  // Refusals before anything is opened or attached.
  // lb nodes check their reals; render leaves unhealthy ones out of the rings, and the post-apply gate fails a
  // revision that costs too much of the traffic on healthy reals (docs/health.md).
  const runHealth = role === 'lb' && o.health && !o.once;
  if (runHealth && !o.peer && head.model && agreementMode(head.model).mode === 'consensus')
    headProblem(`the config at the head of ${o.branch} asks for consensus health (Cluster spec.health.mode), whose votes must be authenticated: give --peer-secret-file FILE or --peer-key FILE (docs/security.md, Peers)`);
  const runFlowSync = role === 'lb' && !o.once && !!o.flowSync;
  if (runFlowSync && !o.peer)
    throw new StartError('--flow-sync sends connection state over the authenticated peer channel: give --peer-secret-file FILE or --peer-key FILE (docs/security.md, Peers)');
  // Node keys: this node's own key must be the one its Node document names, or no peer would accept it.
  if (role === 'lb' && o.peer?.key && head.reachable && own && peerKeyBlob(own.spec.peerKey ?? '') !== peerKeyBlob(o.peer.key.publicLine))
    headProblem(`--peer-key: its public key is not spec.peerKey of the Node document '${o.node}' at the head of ${o.branch}; add this line there first: ${o.peer.key.publicLine}`);
  if (role === 'lb' && o.interface) {
    const action = reconcilePinnedXdp(join(o.pinRoot, o.node), o.interface, o.xdpMode);
    if (action) log.warn(action);
  }
  // Empty maps (nothing pinned to adopt: a reboot, or pins lost): with flow sync, the rejoin gate holds BGP until
  // the peers' tables arrived (flows/rejoin-gate.ts). Adopted maps still hold every flow: nothing to wait for.
  const emptyMaps = role === 'lb' && !existsSync(join(o.pinRoot, o.node, 'lb_vips'));
  const open = () => openDataPlane(role, o);
  const dataPlane = await open();

  let peerFeed: PeerObservationFeed | null = null;
  // via: vip checks leave from this node's interface through a TC egress program, attached on first use.
  const vipRouter = runHealth ? vipProbeRouter(() => o.interface ?? own?.spec.interface) : null;
  let peers: HealthPeers | null = null;
  const health = runHealth ? new HealthService({ node: o.node, log, peers: () => peerFeed?.current() ?? [], vipRouter: vipRouter ?? undefined,
    peerReport: () => peers?.report() ?? null }) : null;
  // Declared before the daemon exists; the announcer reads the applied state only once started.
  let daemon: Daemon | undefined;
  // With flow sync: the SNAT addresses of lost lb nodes this node took over (announced by BGP too).
  let takeover: SnatTakeover | null = null;
  // With flow sync: the status file's `flows` mapping (sync per peer, takeover, drain).
  let flowsStatus: (() => unknown) | null = null;
  // Peer trust (who may speak, with which key) comes only from the applied or adopted config, which passed
  // verification; never from the branch head read above, which nothing verified (one unsigned commit would name
  // an attacker's key). Until something is applied every peer message is refused as unknown-sender.
  const appliedModel = () => daemon?.reconciler.appliedConfig ?? null;
  // The authenticated peer channel of an lb node (health votes; connection-state sync): only the applied config's
  // other lb nodes may speak on it (docs/security.md, Peers).
  let peerChannel: PeerChannel | null = null;
  if (role === 'lb' && !o.once && o.peer) {
    const ownAddress = own?.spec.addresses[0];
    const listen = o.peer.listen ? parseListen(o.peer.listen, '--peer-listen') : ownAddress ? { host: ownAddress, port: o.peer.port } : null;
    if (!listen) throw new StartError(`node '${o.node}' has no address in its Node document: give --peer-listen ADDR:PORT`);
    const port = o.peer.port;
    const key = o.peer.key;
    const auth = key ? nodeKeyAuth(key, (n) => appliedModel()?.nodes.find((x) => x.metadata.name === n && x.spec.role === 'lb')?.spec.peerKey) : o.peer.auth;
    if (!auth) throw new StartError('the peer channel needs --peer-secret-file or --peer-key');
    peerChannel = await startPeerChannel({ node: o.node, host: listen.host, port: listen.port, auth,
      peers: () => lbPeers(appliedModel(), o.node, port), metrics: o.hooks?.peerMetrics, log });
    log.info(`peer channel on ${peerChannel.url} (authenticated: ${key ? `node keys, this node's ${key.publicKey.fingerprint}` : 'shared secret'})`);
  }
  const peerAuthentication = !peerChannel ? 'none' : o.peer?.key ? 'node-key' : 'shared-secret';
  if (health) peers = healthPeers({ node: o.node, channel: peerChannel, authentication: peerAuthentication, health: () => health.status(), model: appliedModel, metrics: o.hooks?.peerMetrics, log });
  let syncedFrom: ((peer: string) => boolean) | null = null;
  const rejoin = role === 'lb' && !o.once && o.bird && runFlowSync
    ? new RejoinGate({ armed: emptyMaps && (o.rejoinHoldMs ?? REJOIN_BOUND_DEFAULT_MS) > 0, boundMs: o.rejoinHoldMs ?? REJOIN_BOUND_DEFAULT_MS,
      peers: () => lbPeers(daemon?.reconciler.appliedConfig ?? null, o.node, 0).map((p) => p.node), resynced: (p) => syncedFrom?.(p) ?? false, log,
      onRelease: (by) => daemon?.reconciler.publishStatus(`rejoin: announcements released (${by})`) })
    : null;
  const bgp =
    role === 'lb' && !o.once && o.bird
      ? new BgpAnnouncer({
          node: o.node,
          configFile: o.bird.configFile,
          birdSocket: o.bird.socket,
          interface: o.interface,
          applied: () => ({ model: daemon?.reconciler.appliedConfig ?? null, desired: daemon?.reconciler.desired ?? null }),
          // Raw health: a service failing open still counts as having no healthy real (docs/bgp.md).
          servicesDown: () => {
            const d = health?.decide();
            return d ? [...d.failOpen, ...d.failClosed] : [];
          },
          snatTakeover: () => Object.keys(takeover?.report().serving ?? {}),
          ...(rejoin && { rejoin }),
          log,
        })
      : null;
  // Health is wired before the daemon starts: the daemon adopts the pinned revision from the local Git cache and
  // starts the checks before its first fetch, and a flip seen before startDaemon returns is applied right after.
  let flippedBeforeStart = false;
  if (o.hooks?.onHealthChange) health?.onChange(o.hooks.onHealthChange);
  health?.onChange((e) => {
    if (daemon) daemon.healthChanged(e);
    else flippedBeforeStart = true;
  });
  try {
    daemon = await startDaemon({
      repo: o.repo,
      branch: o.branch,
      node: o.node,
      role,
      dataPlane,
      reopenDataPlane: open,
      // Decommission: routers stop sending first (the data plane still forwards until its pins go), checks stop.
      teardown: async () => {
        await bgp?.withdrawAll().catch((err: unknown) => log.warn(`decommission: BGP withdraw failed: ${(err as Error).message}`));
        bgp?.stop();
        await health?.checker.stop();
        vipRouter?.close();
        await teardown(role, o, log);
      },
      cacheDir: o.cacheDir,
      credentialsFile: o.credentialsFile,
      configPath: o.configPath,
      webhook: o.webhook,
      poll: o.poll,
      drift: o.drift,
      statusBranch: o.statusBranch,
      writeStatus: o.writeStatus,
      gitTimeoutMs: o.gitTimeoutMs,
      trust: o.trust,
      signer: o.signer,
      trustFrom: o.trustFrom,
      allowRewindTo: o.allowRewindTo,
      log,
      wrapRemote: o.hooks?.wrapRemote,
      onReconcile: o.hooks?.onReconcile,
      ...(health && {
        health: () => health.view(),
        preApplyGate: health.preApplyGate({ maxCapacityLossShare: 0.5 }),
        postApplyGate: health.postApplyGate({ maxCapacityLossShare: 0.5 }),
        onApplied: (model: ConfigModel) => health.update(model),
        statusHealth: () => health.status(),
      }),
      ...(bgp && { statusBgp: () => (bgp.configured() ? bgp.status() : null) }),
      ...(runFlowSync && { statusFlows: () => flowsStatus?.() ?? null }),
    });
  } catch (err) {
    await health?.checker.stop();
    vipRouter?.close();
    await peerChannel?.close();
    throw err;
  }
  const d = daemon;
  bgp?.start();
  // A flip re-renders on the health path at once (daemon.refreshHealth never waits for Git).
  if (flippedBeforeStart) d.refreshHealth('health change');
  // rejoining with empty maps (the gate held): own SNAT translations are asked back and taken, the own address waits
  const rejoining = () => rejoin?.rejoining() ?? false;
  const flowSync = runFlowSync && peerChannel ? await startFlowSync(o, peerChannel, d, log, rejoining) : null;
  if (flowSync) syncedFrom = (p) => flowSync.resyncReceived(p);
  // the drain watch and the takeover start below: read at scrape time
  let drainWatch: { report(): StatusDrain | null } | null = null;
  const flowSyncParts = flowSync && { report: () => flowSync.report(), local: () => flowSync.local(), drain: () => drainWatch?.report() ?? null,
    serving: () => takeover?.report().serving ?? {}, handback: () => takeover?.report().handback ?? {} };
  o.hooks?.started?.({ daemon: d, role, health, bgp, flowSync: flowSyncParts, peerChannel });
  const tasks: { stop(): void }[] = [];
  if (role === 'lb' && !o.once) {
    // XDP cannot resolve next hops: keep the reals' neighbour entries usable (neighbours.ts).
    tasks.push(startNeighbourRefresh(() => d.reconciler.desired, log));
    // SNAT translations are plain hash entries (never silently evicted): expired ones are swept here.
    tasks.push(await startSnatSweep(() => d.reconciler.dataPlane, log));
  }
  if (flowSync) {
    tasks.push(flowSync);
    const sync = flowSync;
    takeover = await startSnatTakeover(o, d, log, { handBackWaitingFor: (n, since) => sync.handBackWaitingFor(n, since), nudge: (n) => sync.nudge(n), rejoining });
    const t = takeover;
    tasks.push({ stop: () => void t.stop() });
    const drain = await startDrainWatch(o, d, log);
    drainWatch = drain;
    tasks.push(drain);
    flowsStatus = () => ({ sync: sync.report(), snatTakeover: t.report(), ...(drain.report() && { drain: drain.report() }) });
  }
  if (health && o.passiveHealth !== false) {
    // Unanswered new connections seen in the reals' counters move their checks forward (health/passive.ts).
    const checker = health.checker;
    tasks.push(startPassivePoll({
      object: () => (d.reconciler.dataPlane as Partial<LbDataPlaneHandle>).object?.() ?? null,
      model: () => d.reconciler.appliedConfig,
      suspect: (address) => checker.suspect(address),
      log,
    }));
  }
  if (health) {
    // The peer feed runs on a schedule of its own.
    const feed = new PeerObservationFeed({
      node: o.node,
      readObservations: peers?.readObservations,
      onUnauthenticated: () => peers?.unauthenticated(),
      onChange: () => d.refreshHealth('peer observations changed'),
    });
    peerFeed = feed;
    // Peers silent for PEER_SILENT_MS are named in this node's status, so `gitlb status` reports a killed lb daemon
    // within seconds instead of when its own file goes stale; the status is written when that set changes.
    let silentNames = '';
    tasks.push(
      everyExclusive(o.peerPoll, 'health: peer feed', async () => {
        const model = d.reconciler.appliedConfig;
        if (!model) return;
        // Only consensus mode votes with peers; in local mode the same authenticated read only tells who answers.
        if (agreementMode(model).mode === 'consensus') await feed.refresh();
        else if (peers?.readObservations) await peers.readObservations();
        const silent = peers?.silent() ?? [];
        const names = silent.map((p) => p.peer).join(', ');
        if (names === silentNames) return;
        const heardAgain = silentNames.split(', ').filter((n) => n && !silent.some((p) => p.peer === n));
        silentNames = names;
        if (names) log.warn(`peers silent on the peer channel: ${names} (no valid answer for ${PEER_SILENT_MS / 1000} s or more)`, { stage: 'health', silent: names });
        // Nothing to re-render (peers' silence changes no table): just write the status that names them.
        d.reconciler.publishStatus(names ? `peer channel: ${names} silent` : `peer channel: ${heardAgain.join(', ')} heard again`);
      }, log),
    );
  }
  return {
    daemon: d,
    role,
    lastOutcome: () => d.reconciler.lastOutcome,
    stop: async (opts) => {
      // Withdraw first, so the routers move new flows away while this node still forwards what arrives.
      if (o.bird?.withdrawOnExit) await bgp?.withdrawAll();
      bgp?.stop();
      await d.stop(opts);
      for (const t of tasks) t.stop();
      await peerChannel?.close();
      await health?.checker.stop();
      vipRouter?.close(); // the probe program is not pinned: it serves only this process's probes
      d.reconciler.dataPlane.close(); // pinned programs and maps stay: the data plane keeps forwarding
    },
  };
}
