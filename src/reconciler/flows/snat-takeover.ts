// SNAT on the loss of an lb node (issue 24; docs/datapath.md "SNAT addresses across nodes"). Each lb node has its own
// SNAT address, and the reals answer a translation at the address of the node that made it. With connection-state
// sync every lb node holds the other nodes' translations (lb_snat_rev, owner n), so when a node is lost one survivor
// takes its SNAT address over:
// - it serves the address in XDP (lb_snat_served: replies to it are translated with that owner's translations),
// - holds it on its interface (the kernel answers ARP / neighbour solicitations for it),
// - announces the move on the link (gratuitous ARP / unsolicited NA, 3 times, one per round) and, with BGP, as a
//   /32 or /128 route (src/render/bgp/bird.ts), for reals that reach the SNAT addresses through routers.
// "Lost" is the node's kernel not answering, not its daemon: a TCP connection to the peer's channel port either
// connects or is refused (RST) while the node lives, so a killed daemon, whose pinned data plane keeps translating,
// is never taken over. A probe that times out (500 ms) or finds no route 3 times in a row (500 ms apart) marks the peer lost; 2
// answers mark it back; a peer back within a minute of its last return needs twice the misses (up to 8x): no flapping. The survivor that takes over is the first, by name, of the lb nodes this node sees alive
// (itself included); a node whose own link is down takes nothing over. When the owner is back, and has its own
// translations (its sync spoke since; a rebooted owner asked for the copies of its translations and they reached it:
// handBackWaitingFor says nothing, at most handBackBoundMs: `gitlb run --snat-handback-limit`), the taker drops the address from its interface and keeps translating
// replies to it for a few seconds (some still arrive until the owner's announcement reaches every real); the owner
// announces its own address again whenever it sees a peer come back (it may have been the one cut off), not while
// it rejoins with empty maps (ownAddressHeld: its translations are not back yet). While an address is held for a
// returned owner, report().handback says so (owner, since, what it waits for, the limit): the status file's
// flows.snatTakeover.handback, `gitlb status`, the metric gitlb_snat_handback_pending.
import { connect } from 'node:net';
import type { BpfObject } from '../../bpf/libbpf.js';
import { announceAddress } from '../../bpf/address-announce.js';
import { serveSnatAddress, servedSnatAddresses, unserveSnatAddress } from '../../bpf/dataplane/flow-state.js';
import { runFile } from '../host/run-file.js';

export interface TakeoverPeer {
  node: string;
  /** The peer's own SNAT address (Node.spec.snatAddress), if it has one. */
  snatAddress?: string;
  /** Where its peer channel listens: probed to tell a living kernel from a lost node. */
  probe: { host: string; port: number };
}

export interface SnatTakeoverOptions {
  node: string;
  /** The other lb nodes of the applied config. */
  peers: () => TakeoverPeer[];
  /** This node's own SNAT address (announced again when a peer comes back). */
  ownSnatAddress: () => string | undefined;
  /**
   * Every node's spec.addresses in the applied config (and the SNAT addresses of lb nodes that cannot be probed):
   * never taken over, whatever a SNAT address says. A node's own address drawn here would take its traffic, and the
   * lost node's probe target held here would answer the probe itself (the node back, then lost again: a flap).
   */
  nodeAddresses?: () => string[];
  /** This node's interface. */
  interface: () => string | undefined;
  object: () => BpfObject | null;
  log?: { info(m: string): void; warn(m: string): void };
  /** true: the peer's kernel answered (connected or refused); false: timeout, no route. */
  probe?: (target: { host: string; port: number }, timeoutMs: number) => Promise<boolean>;
  /** Adds / removes the address on the interface; add resolves false when it was there already (not ours). */
  addAddress?: (iface: string, address: string) => Promise<boolean>;
  removeAddress?: (iface: string, address: string) => Promise<void>;
  announce?: (iface: string, address: string, mac: string) => void;
  /** The interface's state and MAC (default: `ip -j link`, netlink: /sys may be another namespace's). */
  link?: (iface: string) => Promise<LinkFacts | null>;
  /** The data plane's served addresses (default: lb_snat_served of object(), src/bpf/dataplane/flow-state.ts). */
  served?: (obj: BpfObject) => ServedAddresses;
  now?: () => number;
  intervalMs?: number;
  lostAfter?: number;
  backAfter?: number;
  /** How long replies to a returned owner's address are still translated here. */
  releaseGraceMs?: number;
  /** A peer back within this long of its last return needs twice the misses to be lost again (at most 8x). */
  dampingMs?: number;
  /**
   * What a peer that answers again since `sinceMs` still lacks to take its SNAT address back: its sync has not
   * spoken since ('sync-spoke'), or the copies of its own translations it asked for (a reboot: empty maps) have not
   * reached it ('own-translations'); empty: ready (FlowSync.handBackWaitingFor). Until then, at most handBackBoundMs,
   * this node keeps serving the address it took over: replies of the connections the peer translated before it went
   * find their translation here, not a node that has none yet. Absent: given back as soon as the peer answers.
   */
  handBackWaitingFor?: (node: string, sinceMs: number) => HandBackWait[];
  /** Asked each round while a returned peer is not ready: make the sync talk to it (an idle sync sends nothing, and
   * its answer is what tells; FlowSync.nudge). */
  nudge?: (node: string) => void;
  /** How long a returned peer's address is kept at most while handBackWaitingFor names something (default 120 s;
   * `gitlb run --snat-handback-limit`). */
  handBackBoundMs?: number;
  /** Called when the addresses held for returned owners, or what they wait for, change (the status is written). */
  onHandbackChange?: (why: string) => void;
  /** While true this node does not announce its own SNAT address (it rejoins with empty maps and its own
   * translations are not back yet: rejoin-gate.ts); the announcements wait and go out once it is false. */
  ownAddressHeld?: () => boolean;
}

export interface ServedAddresses {
  serve(address: string): boolean;
  unserve(address: string): void;
  list(): string[];
}

const servedIn = (obj: BpfObject): ServedAddresses => ({
  serve: (a) => serveSnatAddress(obj, a),
  unserve: (a) => unserveSnatAddress(obj, a),
  list: () => servedSnatAddresses(obj),
});

/** What a returned owner has not shown yet (FlowSync.handBackWaitingFor): its sync has not spoken since it answered
 * again; the copies of its own translations it asked for have not reached it. */
export type HandBackWait = 'sync-spoke' | 'own-translations';

/** An address this node still holds for its owner, which answers again but has not shown it has its translations. */
export interface HandbackReport {
  owner: string;
  /** When the owner answered again (ISO 8601, this node's clock). */
  since: string;
  waitingFor: HandBackWait[];
  /** The most it is held after `since` (handBackBoundMs), and the moment it is given back at the latest. */
  limitSeconds: number;
  giveBackBy: string;
}

export interface TakeoverReport {
  /** Peers this node sees lost. */
  lost: string[];
  /** SNAT addresses this node serves for lost peers: address -> owner node (also while held for a returned owner). */
  serving: Record<string, string>;
  /** Of `serving`: the addresses held for owners that answer again (absent when none). */
  handback?: Record<string, HandbackReport>;
}

/**
 * A TCP connection attempt: connected or refused means a living kernel at `host`. The timeout counts only time this
 * process could look: a timer that fires late (the event loop was blocked: GC, a big render) runs before the socket's
 * pending answer is read, and may even precede the SYN, so it grants the probe one more full window instead of
 * calling a blip on this node a loss of the peer.
 */
export function tcpProbe(target: { host: string; port: number }, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: target.host, port: target.port });
    let settled = false;
    const done = (alive: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      resolve(alive);
    };
    const lateBy = (armedAt: number) => performance.now() - armedAt - timeoutMs;
    const armedAt = performance.now();
    let timer = setTimeout(() => {
      if (lateBy(armedAt) <= Math.max(20, timeoutMs / 4)) return done(false);
      timer = setTimeout(() => done(false), timeoutMs); // once: a loop blocked again is a node too slow to judge
    }, timeoutMs);
    s.once('connect', () => done(true));
    s.once('error', (e: NodeJS.ErrnoException) => done(e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET'));
  });
}

const hostPrefix = (a: string) => `${a}/${a.includes(':') ? 128 : 32}`;

async function ipAddr(verb: 'add' | 'del', iface: string, address: string): Promise<{ code: number; stderr: string }> {
  const extra = verb === 'add' && address.includes(':') ? ['nodad'] : [];
  return runFile('ip', ['addr', verb, hostPrefix(address), 'dev', iface, ...extra], 5000);
}

export async function addInterfaceAddress(iface: string, address: string): Promise<boolean> {
  const r = await ipAddr('add', iface, address);
  if (r.code === 0) return true;
  if (/exists/i.test(r.stderr)) return false;
  throw new Error(`ip addr add ${hostPrefix(address)} dev ${iface}: ${r.stderr.trim()}`);
}

export async function removeInterfaceAddress(iface: string, address: string): Promise<void> {
  const r = await ipAddr('del', iface, address);
  if (r.code !== 0 && !/Cannot assign|not found/i.test(r.stderr)) throw new Error(`ip addr del ${hostPrefix(address)} dev ${iface}: ${r.stderr.trim()}`);
}

export interface LinkFacts { up: boolean; mac: string }

/** From netlink (`ip -j link`): /sys/class/net shows the namespace sysfs was mounted in, not necessarily ours. */
export async function linkFacts(iface: string): Promise<LinkFacts | null> {
  const r = await runFile('ip', ['-j', 'link', 'show', 'dev', iface], 5000);
  if (r.code !== 0) return null;
  try {
    const l = (JSON.parse(r.stdout) as { operstate?: string; flags?: string[]; address?: string }[])[0];
    if (!l?.address) return null;
    return { up: (l.flags ?? []).includes('UP') && l.operstate !== 'DOWN' && l.operstate !== 'LOWERLAYERDOWN', mac: l.address };
  } catch {
    return null;
  }
}

interface Served { owner: string; added: boolean; announce: number; releaseAt?: number }

export const HAND_BACK_BOUND_DEFAULT_MS = 120_000;

export class SnatTakeover {
  private readonly misses = new Map<string, number>();
  private readonly answers = new Map<string, number>();
  private readonly lost = new Set<string>();
  /** Per peer: how often it came back lately, and when last (damping, lostAfterFor). */
  private readonly returns = new Map<string, { n: number; at: number }>();
  private readonly served = new Map<string, Served>();
  /** Peers back from lost whose address this node still serves until they are ready (handBackWaitingFor): since when. */
  private readonly returning = new Map<string, number>();
  /** Addresses held for returned owners, as of the last round (report().handback). */
  private handback = new Map<string, HandbackReport>();
  private ownAnnounce = 3; // announced at start: a restarted node may have been taken over
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private adopted = false;
  private wasCutOff = false;
  private readonly intervalMs: number;

  constructor(private readonly o: SnatTakeoverOptions) {
    this.intervalMs = o.intervalMs ?? 500;
  }

  start(): void {
    const loop = () => {
      if (this.stopped) return;
      const began = Date.now();
      this.running = this.tick().catch((e: unknown) => this.o.log?.warn(`snat takeover: ${(e as Error).message}`))
        .finally(() => {
          this.running = null;
          // one round per interval: a probe that waited for its timeout does not stretch the detection
          if (!this.stopped) this.timer = setTimeout(loop, Math.max(50, this.intervalMs - (Date.now() - began)));
        });
    };
    this.timer = setTimeout(loop, 0);
  }

  /** Stops probing. What is served stays (the data plane outlives the daemon; a restart adopts it). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /**
   * Misses that make `node` lost: lostAfter, doubled for each time it came back within dampingMs of the one before
   * (at most 8x), so a peer whose answers come and go (a lossy path, probes being dropped) cannot make its address
   * move back and forth every few seconds; a minute of answers since its last return and it is 3 misses again.
   */
  private lostAfterFor(node: string, now: number): number {
    const base = this.o.lostAfter ?? 3;
    const r = this.returns.get(node);
    return r && now - r.at < this.dampingMs ? base * 2 ** Math.min(r.n, 3) : base;
  }

  private get dampingMs(): number {
    return this.o.dampingMs ?? 60_000;
  }

  report(): TakeoverReport {
    const serving: Record<string, string> = {};
    for (const [a, s] of this.served) if (s.releaseAt === undefined) serving[a] = s.owner;
    const handback = Object.fromEntries([...this.handback].sort(([a], [b]) => a.localeCompare(b)).map(([a, h]) => [a, { ...h, waitingFor: [...h.waitingFor] }]));
    return { lost: [...this.lost].sort(), serving, ...(this.handback.size > 0 && { handback }) };
  }

  /** Keeps this round's handback view; a new address held, one given back or a change of what it waits for is told. */
  private setHandback(next: Map<string, HandbackReport>): void {
    const key = (m: Map<string, HandbackReport>) => JSON.stringify([...m].map(([a, h]) => [a, h.owner, h.since, h.waitingFor]).sort());
    const changed = key(next) !== key(this.handback);
    const was = this.handback;
    this.handback = next;
    if (!changed) return;
    const held = [...next].filter(([a]) => !was.has(a)).map(([a, h]) => `holding ${h.owner}'s SNAT address ${a} until it has its own translations (waiting for: ${h.waitingFor.join(', ')})`);
    const gone = [...was].filter(([a]) => !next.has(a)).map(([a, h]) => `${h.owner}'s SNAT address ${a} no longer held for it`);
    this.o.onHandbackChange?.(`snat takeover: ${[...held, ...gone].join('; ') || 'what a returned owner waits for changed'}`);
  }

  /** One round: probe every peer, then take over or give back what changed. Serialised by start(). */
  async tick(): Promise<void> {
    const obj = this.o.object();
    const iface = this.o.interface();
    if (!obj || !iface) return;
    const dp = (this.o.served ?? servedIn)(obj);
    const now = (this.o.now ?? Date.now)();
    const peers = this.o.peers().filter((p) => p.node !== this.o.node);
    if (!this.adopted) {
      // a restarted daemon: what the data plane serves is this node's (its owners are found below)
      this.adopted = true;
      for (const a of dp.list()) {
        const owner = peers.find((p) => p.snatAddress === a)?.node ?? '?';
        this.served.set(a, { owner, added: true, announce: 0 });
      }
    }
    // Cut off itself, a node can judge no peer: it forgets what it saw, takes nothing over, and announces its own
    // address again once its link is back (a peer may have taken it over meanwhile).
    const link = await (this.o.link ?? linkFacts)(iface);
    const linkUp = !!link?.up;
    if (!linkUp) {
      this.misses.clear();
      this.answers.clear();
      this.lost.clear();
      this.wasCutOff = true;
    } else {
      if (this.wasCutOff) {
        this.wasCutOff = false;
        this.ownAnnounce = 3;
      }
      const probe = this.o.probe ?? tcpProbe;
      const results = await Promise.all(peers.map(async (p) => [p.node, await probe(p.probe, this.intervalMs)] as const));
      for (const [node, alive] of results) {
        if (alive) {
          this.misses.set(node, 0);
          const n = (this.answers.get(node) ?? 0) + 1;
          this.answers.set(node, n);
          if (this.lost.has(node) && n >= (this.o.backAfter ?? 2)) {
            this.lost.delete(node);
            if (this.o.handBackWaitingFor) this.returning.set(node, now);
            const r = this.returns.get(node);
            this.returns.set(node, { n: r && now - r.at < this.dampingMs ? r.n + 1 : 1, at: now });
            this.ownAnnounce = 3; // it may have taken this node's address over while this node was the one cut off
            this.o.log?.info(`snat takeover: ${node} answers again`);
          }
        } else {
          this.answers.set(node, 0);
          const n = (this.misses.get(node) ?? 0) + 1;
          this.misses.set(node, n);
          if (!this.lost.has(node) && n >= this.lostAfterFor(node, now)) {
            this.lost.add(node);
            this.returning.delete(node);
            this.o.log?.info(`snat takeover: ${node} lost (its kernel did not answer ${n} probes)`);
          }
        }
      }
    }
    for (const node of [...this.lost]) if (!peers.some((p) => p.node === node)) this.lost.delete(node);
    for (const node of [...this.returns.keys()]) if (!peers.some((p) => p.node === node)) this.returns.delete(node);
    // a returned peer keeps being served until it has its own translations back (or the bound passed)
    const boundMs = this.o.handBackBoundMs ?? HAND_BACK_BOUND_DEFAULT_MS;
    const waits = new Map<string, HandBackWait[]>();
    for (const [node, since] of this.returning) {
      const waiting = peers.some((p) => p.node === node) ? this.o.handBackWaitingFor!(node, since) : [];
      const ready = waiting.length === 0;
      const bound = now - since >= boundMs;
      if (!ready && !bound) {
        waits.set(node, waiting);
        this.o.nudge?.(node);
        continue;
      }
      this.returning.delete(node);
      if ([...this.served.values()].some((s) => s.owner === node && s.releaseAt === undefined))
        // a limit of 0 is the operator's choice not to hold: said, not warned about
        this.o.log?.[ready || boundMs === 0 ? 'info' : 'warn'](ready ? `snat takeover: ${node} has its own SNAT translations back (${((now - since) / 1000).toFixed(1)} s after it answered again)`
          : boundMs === 0 ? `snat takeover: ${node} answers again: its SNAT address goes back at once (--snat-handback-limit 0; not yet shown: ${waiting.join(', ')})`
            : `snat takeover: ${node} answers again but did not show it has its own SNAT translations back within ${(now - since) / 1000} s (still waiting for: ${waiting.join(', ')}; --snat-handback-limit ${boundMs / 1000})`);
    }
    const own = this.o.ownSnatAddress();

    // What this node should serve: the addresses of lost peers whose first living node (by name) is this one, but
    // never one a living node holds: its SNAT address shared with the lost one (disjoint ports), or a node address.
    const living = [this.o.node, ...peers.filter((p) => !this.lost.has(p.node)).map((p) => p.node)].sort();
    const held = new Set<string>([...(this.o.nodeAddresses?.() ?? []), ...peers.map((p) => p.probe.host)]);
    if (own) held.add(own);
    for (const p of peers) if (!this.lost.has(p.node) && p.snatAddress) held.add(p.snatAddress);
    const want = new Map<string, string>();
    if (linkUp && living[0] === this.o.node) {
      for (const p of peers) if (this.lost.has(p.node) && p.snatAddress && !held.has(p.snatAddress) && !want.has(p.snatAddress)) want.set(p.snatAddress, p.node);
    }
    for (const [address, owner] of want) {
      const s = this.served.get(address);
      if (s && s.releaseAt === undefined) continue;
      if (s) { // taken back within the grace: serve on
        s.releaseAt = undefined;
        s.added = (await (this.o.addAddress ?? addInterfaceAddress)(iface, address)) || s.added;
        s.announce = 3;
        continue;
      }
      // translate first, then draw the replies here
      if (!dp.serve(address)) { this.o.log?.warn(`snat takeover: no owner slot free for ${address}`); continue; }
      const added = await (this.o.addAddress ?? addInterfaceAddress)(iface, address);
      this.served.set(address, { owner, added, announce: 3 });
      this.o.log?.info(`snat takeover: serving ${owner}'s SNAT address ${address} (${owner} lost)`);
    }
    const handback = new Map<string, HandbackReport>();
    for (const [address, s] of this.served) {
      if (want.has(address)) continue;
      // its owner answers again but does not have its translations yet: keep drawing its replies here
      if (s.releaseAt === undefined && this.returning.has(s.owner) && peers.some((p) => p.node === s.owner && p.snatAddress === address) &&
        address !== own) {
        const since = this.returning.get(s.owner)!;
        handback.set(address, { owner: s.owner, since: new Date(since).toISOString(), waitingFor: waits.get(s.owner) ?? [],
          limitSeconds: boundMs / 1000, giveBackBy: new Date(since + boundMs).toISOString() });
        continue;
      }
      if (s.releaseAt === undefined) {
        // stop drawing replies here at once; keep translating what still arrives for a while
        s.releaseAt = now + (this.o.releaseGraceMs ?? 5000);
        s.announce = 0;
        // an address that has become this node's own (a config change) stays: it is no longer a takeover's
        if (s.added && address !== own) await (this.o.removeAddress ?? removeInterfaceAddress)(iface, address);
        this.o.log?.info(`snat takeover: giving ${s.owner}'s SNAT address ${address} back`);
      } else if (now >= s.releaseAt) {
        dp.unserve(address);
        this.served.delete(address);
      }
    }
    this.setHandback(handback);
    // announcements: each 3 times, one per round
    const announce = this.o.announce ?? announceAddress;
    const send = (address: string) => {
      try {
        announce(iface, address, link!.mac);
      } catch (e) {
        this.o.log?.warn(`snat takeover: announcing ${address} on ${iface}: ${(e as Error).message}`);
      }
    };
    if (linkUp) {
      for (const [address, s] of this.served) if (s.releaseAt === undefined && s.announce > 0) { s.announce--; send(address); }
      if (own && this.ownAnnounce > 0 && !this.o.ownAddressHeld?.()) { this.ownAnnounce--; send(own); }
    }
  }
}
