// Runs the active health checks of one lb node: one self-rescheduling timer per target, all probes through one
// semaphore (bounded sockets in flight), every probe bounded by its timeout and an AbortSignal. Nothing here awaits
// on behalf of a caller: update(), observations(), snapshot() and the views are synchronous reads of current state,
// so the reconcile loop is never blocked by a slow or dead backend. State flips are announced through onChange.
import type { ConfigModel } from '../../render/model.js';
import { localDownSet, resolveHealth, type Observations, type ResolvedHealth, type HealthView } from '../../render/health-quorum.js';
import { initialHealth, stepHealth, type CheckResult, type HealthState, type RealHealth } from './hysteresis.js';
import { runProbe, describeProbe, ConnectDeadline } from './probes.js';
import { Semaphore } from './semaphore.js';
import { checkTargets, type CheckTarget } from './targets.js';
import type { VipProbeRoute } from '../../bpf/vip-probe.js';

/** Installs the routes of via: vip probes (src/bpf/vip-probe.ts on the lb node's interface). */
export interface VipProbeRouter {
  set(routes: VipProbeRoute[]): Promise<void>;
}

/**
 * Source ports reserved for via: vip probes, one per target: above the kernel's default ephemeral range
 * (32768-60999), so no other connection of this host picks one of them. Size = probe_routes max_entries.
 */
export const VIP_PROBE_PORTS = { min: 61000, count: 4096 } as const;

export interface HealthChange {
  service: string;
  address: string;
  from: HealthState;
  to: HealthState;
  /** ISO time of the check that flipped the state. */
  at: string;
  result: CheckResult;
}

export interface HealthCheckerOptions {
  /** Upper bound on probes (sockets) in flight at once. Default 64. */
  maxInFlight?: number;
  /** Where via: vip probes are steered; without one they fail (and say why). */
  vipRouter?: VipProbeRouter;
}

/** Per-real status for `gitlb status` and status/<node>.yaml. */
export interface RealHealthStatus {
  state: HealthState;
  since: string;
  check: string;
  lastCheck?: { ok: boolean; detail: string; at: string; durationMs: number };
}

export interface HealthSnapshot {
  services: Record<string, { failOpen?: true; failClosed?: true; reals: Record<string, RealHealthStatus> }>;
  /** checks: probes run; suspected: checks passive signals moved forward (suspect()). */
  stats: { targets: number; inFlight: number; maxInFlight: number; peakInFlight: number; checks: number; suspected: number };
}

interface Tracked {
  target: CheckTarget;
  /** Fingerprint of the check definition; a changed check starts again from `unknown`. */
  fingerprint: string;
  health: RealHealth;
  timer?: NodeJS.Timeout;
  abort: AbortController;
  running: boolean;
  /** Until when (ms) passive evidence makes this real suspect (suspect()). */
  suspectUntil: number;
  /** When suspect() last moved a check forward (ms): at most one such check per interval. */
  pulledAt: number;
  /** The running probe's handshake deadline, shortened when the real becomes suspect meanwhile. */
  connect?: ConnectDeadline;
}

/** How long passive evidence keeps a real suspect: the probe it triggers (and one running) decides within it. */
export const SUSPECT_MS = 2_000;

/**
 * The handshake deadline of a probe of a suspect real (capped by the check's timeout): its clients' SYNs already
 * went unanswered, and a live real's kernel answers a SYN from a neighbouring lb node within milliseconds, so the
 * probe confirms that in a fraction of the check timeout (a connected probe keeps the whole timeout for its answer).
 */
export const SUSPECT_CONNECT_MS = 250;

export class HealthChecker {
  private readonly sem: Semaphore;
  private readonly tracked = new Map<string, Tracked>();
  private readonly listeners = new Set<(e: HealthChange) => void>();
  private model: ConfigModel | null = null;
  private started = false;
  private checks = 0;
  private suspected = 0;
  private readonly vipRouter?: VipProbeRouter;
  /** via: vip targets' reserved source ports, by target key. */
  private readonly vipPorts = new Map<string, number>();
  /** Settles once the routes of the last update() are installed; its error fails via: vip probes. */
  private vipRoutes: Promise<string | null> = Promise.resolve(null);
  private probationTargets: CheckTarget[] = [];

  constructor(opts: HealthCheckerOptions = {}) {
    this.sem = new Semaphore(opts.maxInFlight ?? 64);
    this.vipRouter = opts.vipRouter;
  }

  /**
   * Installs the checks a revision asks for. Unchanged checks keep their state and rhythm. A new or changed check
   * starts from `unknown`, or from its entry in `seeds` (a probation result for exactly this check definition).
   */
  update(model: ConfigModel, seeds?: ReadonlyMap<string, { fingerprint: string; health: RealHealth }>): void {
    this.model = model;
    const wanted = new Map(checkTargets(model).map((t) => [t.key, t]));
    for (const [key, t] of this.tracked) {
      const next = wanted.get(key);
      if (!next || checkFingerprint(next) !== t.fingerprint) this.untrack(key, t);
    }
    for (const [key, target] of wanted) {
      const t = this.tracked.get(key);
      if (t) {
        t.target = target; // same check; rise/fall may still have been retuned
        continue;
      }
      const seed = seeds?.get(key);
      const health = seed && seed.fingerprint === checkFingerprint(target) ? { ...seed.health } : initialHealth(Date.now());
      const fresh: Tracked = { target, fingerprint: checkFingerprint(target), health, abort: new AbortController(), running: false, suspectUntil: 0, pulledAt: -Infinity };
      this.tracked.set(key, fresh);
      if (this.started) this.schedule(fresh, firstDelay(key, target.intervalMs));
    }
    this.probationTargets = [];
    this.routeVipProbes();
  }

  /**
   * Probation (probation.ts) probes targets this checker does not track yet: via: vip ones get their source port
   * and route here (kept until the next update(), which tracks them with the same port when the revision applies).
   */
  probationProbe(targets: readonly CheckTarget[]): (t: CheckTarget, signal?: AbortSignal) => Promise<CheckResult> {
    if (targets.some((t) => t.probe.via)) {
      this.probationTargets = targets.filter((t) => t.probe.via);
      this.routeVipProbes();
    }
    return (t, signal) => this.probe(t, signal);
  }

  /** Reserves a source port per via: vip target and installs the routes before any of those probes runs. */
  private routeVipProbes(): void {
    const targets = [...[...this.tracked.values()].map((t) => t.target).filter((t) => t.probe.via), ...this.probationTargets];
    const wanted = new Set(targets.map((t) => t.key));
    for (const key of this.vipPorts.keys()) if (!wanted.has(key)) this.vipPorts.delete(key);
    const used = new Set(this.vipPorts.values());
    let next = 0;
    const routes: VipProbeRoute[] = [];
    for (const t of targets) {
      let port = this.vipPorts.get(t.key);
      if (port === undefined) {
        while (next < VIP_PROBE_PORTS.count && used.has(VIP_PROBE_PORTS.min + next)) next++;
        if (next >= VIP_PROBE_PORTS.count) continue; // its probes fail: `no source port reserved (at most ${VIP_PROBE_PORTS.count} via: vip checks)`
        port = VIP_PROBE_PORTS.min + next;
        used.add(port);
        this.vipPorts.set(t.key, port);
      }
      const via = t.probe.via!;
      routes.push({ vip: via.vip, port: t.probe.port, sourcePort: port, real: t.probe.address, encap: via.encap,
        ...(via.vipPort !== undefined && { vipPort: via.vipPort }), ...(via.guePort !== undefined && { guePort: via.guePort }) });
    }
    const router = this.vipRouter;
    if (!router) {
      this.vipRoutes = Promise.resolve(targets.length ? 'no VIP probe path on this node' : null);
      return;
    }
    const previous = this.vipRoutes;
    // serialised: routes of an older update must not land after newer ones
    this.vipRoutes = previous.then(() => router.set(routes)).then(
      () => null,
      (e: Error) => `VIP probe path: ${e.message}`,
    );
  }

  /** The checks of `model` this checker has no result for yet: new (service, real) pairs and changed checks. */
  untried(model: ConfigModel): CheckTarget[] {
    return checkTargets(model).filter((t) => this.tracked.get(t.key)?.fingerprint !== checkFingerprint(t));
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    for (const [key, t] of this.tracked) this.schedule(t, firstDelay(key, t.target.intervalMs));
  }

  /** Stops every timer and aborts probes in flight; resolves once they have all settled. */
  async stop(): Promise<void> {
    this.started = false;
    for (const t of this.tracked.values()) {
      clearTimeout(t.timer);
      t.abort.abort(new Error('health checker stopped'));
    }
    const deadline = Date.now() + 2000;
    while (this.sem.active > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    for (const t of this.tracked.values()) t.abort = new AbortController();
  }

  /**
   * Passive evidence (passive.ts) that the real at `address` stopped answering: each of its checks that is not
   * down already is moved forward to now (at most once per interval, and the regular rhythm restarts from it, so a
   * real's checks stay at one per interval on average), its probe gets SUSPECT_CONNECT_MS for the handshake (a
   * probe already running too, from now), and a failure of a check started while suspect takes the real down at
   * once. Returns how many checks were moved forward or hurried (a running probe given the handshake deadline).
   */
  suspect(address: string, now = Date.now()): number {
    let pulled = 0;
    if (!this.started) return 0;
    for (const t of this.tracked.values()) {
      if (t.target.address !== address || t.health.state === 'down') continue;
      t.suspectUntil = now + SUSPECT_MS;
      if (t.running) {
        if (t.connect && !t.connect.shortened) {
          t.connect.shorten(suspectConnectMs(t.target));
          pulled++;
        }
        continue;
      }
      if (now - t.pulledAt < t.target.intervalMs) continue;
      t.pulledAt = now;
      this.schedule(t, 0);
      pulled++;
    }
    this.suspected += pulled;
    return pulled;
  }

  /** Subscribes to state flips; returns the unsubscribe function. */
  onChange(listener: (e: HealthChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  state(service: string, address: string): RealHealth | undefined {
    const t = this.tracked.get(`${service}\u0000${address}`);
    return t ? { ...t.health } : undefined;
  }

  /** What this node observes, for status/<node>.yaml. Reals still `unknown` are left out (no opinion). */
  observations(): Observations {
    const out: Observations = {};
    for (const t of this.sortedTracked()) {
      if (t.health.state === 'unknown') continue;
      (out[t.target.service] ??= {})[t.target.address] = { up: t.health.state === 'up', since: iso(t.health.since) };
    }
    return out;
  }

  /** Local-mode health: this node's observations with each service's fail mode applied. */
  resolveLocal(): ResolvedHealth {
    if (!this.model) return resolveHealth({ services: [] } as unknown as ConfigModel, {});
    return resolveHealth(this.model, localDownSet(this.observations()));
  }

  localView(): HealthView {
    return this.resolveLocal().view;
  }

  snapshot(): HealthSnapshot {
    const resolved = this.resolveLocal();
    const services: HealthSnapshot['services'] = {};
    for (const t of this.sortedTracked()) {
      const entry = (services[t.target.service] ??= { reals: {} });
      const h = t.health;
      entry.reals[t.target.address] = {
        state: h.state,
        since: iso(h.since),
        check: describeProbe(t.target.probe),
        ...(h.last && { lastCheck: { ok: h.last.ok, detail: h.last.detail, at: iso(h.last.at), durationMs: h.last.durationMs } }),
      };
    }
    for (const s of resolved.failOpen) if (services[s]) services[s].failOpen = true;
    for (const s of resolved.failClosed) if (services[s]) services[s].failClosed = true;
    return {
      services,
      stats: { targets: this.tracked.size, inFlight: this.sem.active, maxInFlight: this.sem.limit, peakInFlight: this.sem.highWater, checks: this.checks, suspected: this.suspected },
    };
  }

  private sortedTracked(): Tracked[] {
    return [...this.tracked.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, t]) => t);
  }

  private untrack(key: string, t: Tracked): void {
    clearTimeout(t.timer);
    t.abort.abort(new Error('check removed'));
    this.tracked.delete(key);
  }

  private schedule(t: Tracked, delayMs: number): void {
    clearTimeout(t.timer);
    t.timer = setTimeout(() => void this.runOnce(t), Math.max(0, delayMs));
    t.timer.unref(); // the daemon's own loop keeps the process alive, not pending checks
  }

  private async runOnce(t: Tracked): Promise<void> {
    if (!this.started || t.running || this.tracked.get(t.target.key) !== t) return;
    t.running = true;
    const begun = Date.now();
    const signal = t.abort.signal;
    let release: (() => void) | undefined;
    try {
      release = await this.sem.acquire(signal);
      t.connect = new ConnectDeadline();
      if (t.suspectUntil >= Date.now()) t.connect.shorten(suspectConnectMs(t.target));
      const result = await this.probe(t.target, signal, t.connect);
      if (signal.aborted || this.tracked.get(t.target.key) !== t) return; // removed or stopped meanwhile: discard
      this.checks++;
      this.record(t, result, t.suspectUntil >= begun);
    } catch {
      return; // only an abort while queued lands here; the target is gone or the checker stopped
    } finally {
      release?.();
      t.running = false;
      t.connect = undefined;
      // Fixed rate: the next check is due one interval after this one began, not after it ended.
      // (Checks the current controller: after stop() + start() a fresh one replaced the aborted `signal`.)
      if (this.started && this.tracked.get(t.target.key) === t && !t.abort.signal.aborted) {
        this.schedule(t, begun + t.target.intervalMs - Date.now());
      }
    }
  }

  /** via: vip probes wait for their route and use their reserved source port; the others run as they are. */
  private async probe(t: CheckTarget, signal?: AbortSignal, connect?: ConnectDeadline): Promise<CheckResult> {
    if (!t.probe.via) return runProbe(t.probe, signal, connect);
    const problem = await this.vipRoutes;
    const sourcePort = this.vipPorts.get(t.key);
    if (problem || sourcePort === undefined) return { ok: false, detail: problem ?? `no source port reserved (at most ${VIP_PROBE_PORTS.count} via: vip checks)`, at: Date.now(), durationMs: 0 };
    return runProbe({ ...t.probe, sourcePort }, signal, connect);
  }

  private record(t: Tracked, result: CheckResult, suspect = false): void {
    if (result.ok) t.suspectUntil = 0; // the real answered: the passive evidence is spent
    const { next, changed } = stepHealth(t.health, result, t.target.rise, t.target.fall, suspect);
    const from = t.health.state;
    t.health = next;
    if (!changed) return;
    const event: HealthChange = { service: t.target.service, address: t.target.address, from, to: next.state, at: iso(result.at), result };
    for (const l of this.listeners) {
      try {
        l(event);
      } catch {
        // a listener's bug must not stop health checking
      }
    }
  }
}

function suspectConnectMs(t: CheckTarget): number {
  return Math.min(SUSPECT_CONNECT_MS, t.probe.timeoutMs);
}

/** A check's definition (what is probed, how): a different one starts over. */
export function checkFingerprint(t: CheckTarget): string {
  return JSON.stringify(t.probe);
}

/** Spreads first checks over one interval, by a stable hash of the target, so a restart does not burst. */
function firstDelay(key: string, intervalMs: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193) >>> 0;
  return (h / 0x100000000) * Math.min(intervalMs, 1000);
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}
