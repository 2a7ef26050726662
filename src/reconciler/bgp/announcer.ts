// Keeps BIRD's view of this lb node's VIPs equal to the announcement rule (src/render/bgp/announce.ts): on every
// tick it renders the node's BIRD configuration from the applied revision, writes it when the text changed and
// asks BIRD to reload (`birdc configure`). BIRD itself is started and supervised elsewhere (systemd, the lab);
// gitlb never speaks BGP. A failed write or reload is retried on the next tick.
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { runFile } from '../host/run-file.js';
import { birdPasswords, scrubToolText } from './scrub.js';
import { decideAnnouncements, announcementText, type AnnounceFacts, type VipAnnouncement } from '../../render/bgp/announce.js';
import { bgpNode, renderBirdConfig } from '../../render/bgp/bird.js';
import type { ConfigModel } from '../../render/model.js';
import type { DesiredState } from '../../render/state.js';
import type { Logger } from '../loops/reconciler.js';
import type { RejoinReport } from '../flows/rejoin-gate.js';

export interface BgpAnnouncerOptions {
  node: string;
  /** The generated file BIRD's main configuration includes. */
  configFile: string;
  /** BIRD's control socket (birdc -s). */
  birdSocket: string;
  /** What the data plane serves now: the applied revision's model and desired state (null before any apply). */
  applied: () => { model: ConfigModel | null; desired: DesiredState | null };
  /** Services with every active real down (the health decision's fail-open and fail-closed lists). */
  servicesDown?: () => readonly string[];
  /** Is the XDP program attached to `iface`? Default: asks `ip link`. */
  xdpAttached?: (iface: string) => Promise<boolean>;
  /** SNAT addresses of lost lb nodes this node serves (src/reconciler/flows/snat-takeover.ts): announced as host routes too. */
  snatTakeover?: () => string[];
  /** Rejoining with empty maps: hold every VIP until the peers' resync arrived (src/reconciler/flows/rejoin-gate.ts). */
  rejoin?: { holding(): boolean; report(): RejoinReport };
  /** Interface override (gitlb run --interface); default the Node document's. */
  interface?: string;
  intervalMs?: number;
  log?: Logger;
  birdc?: string; // path of birdc, default 'birdc'
}

export interface BgpStatus {
  vips: { vip: string; services: string[]; state: string }[];
  bird: { configFile: string; reloadedAt: string | null; error?: string };
  /** With flow sync: the rejoin gate (held while rejoining with empty maps; 'off' when the maps were adopted). */
  rejoin?: RejoinReport;
}

const TIMEOUT_MS = 10_000;

/** birdc answers on stdout or stderr depending on the error: both, as one text. */
async function run(file: string, args: string[]): Promise<{ code: number; out: string }> {
  const r = await runFile(file, args, TIMEOUT_MS);
  return { code: r.code, out: `${r.stdout}${r.stderr}`.trim() };
}

/** Asks the kernel (through `ip -d -j link`) whether an XDP program is attached to `iface`, in any mode. */
export async function xdpAttachedByIp(iface: string): Promise<boolean> {
  const r = await run('ip', ['-d', '-j', 'link', 'show', 'dev', iface]);
  if (r.code !== 0) return false;
  try {
    const links = JSON.parse(r.out) as { xdp?: { prog?: unknown; attached?: unknown[] } }[];
    const x = links[0]?.xdp;
    return x !== undefined && (x.prog !== undefined || (x.attached?.length ?? 0) > 0);
  } catch {
    return false;
  }
}

export class BgpAnnouncer {
  private written: string | null = null;
  private reloadedAt: string | null = null;
  private error: string | undefined;
  private failedAt = 0;
  private stopping = false; // withdrawing for exit: every VIP is reported 'stopping'
  private halted = false; // no more ticks
  private xdpUp = false;
  private xdpCheckedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | null = null;
  /** The last applied state that gave this node BGP settings: after a decommission (or BGP removed from the
   * node), its sessions are kept and every VIP it announced is withdrawn, instead of BIRD announcing on. */
  private lastBgp: { model: ConfigModel; desired: DesiredState | null } | null = null;
  private readonly log: Logger;

  constructor(private readonly o: BgpAnnouncerOptions) {
    this.log = o.log ?? { info: () => {}, warn: () => {} };
  }

  start(): void {
    const tick = () => {
      void this.sync().finally(() => {
        if (!this.halted) this.timer = setTimeout(tick, this.o.intervalMs ?? 500);
      });
    };
    tick();
  }

  /** The facts the rule decides on, right now (the XDP check is cached for 2 s: it runs a process). */
  private facts(): AnnounceFacts {
    const { model, desired } = this.o.applied();
    if (model && bgpNode(model, this.o.node)) this.lastBgp = { model, desired };
    return {
      node: this.o.node,
      model,
      desired: desired ?? this.lastBgp?.desired ?? null,
      dataPlaneUp: this.xdpUp,
      stopping: this.stopping,
      servicesDown: this.o.servicesDown?.() ?? [],
      // asked only with a config applied: the gate's clock and its peers start with it
      awaitingResync: model ? (this.o.rejoin?.holding() ?? false) : false,
    };
  }

  announcements(): VipAnnouncement[] {
    return decideAnnouncements(this.facts());
  }

  /** One round: decide, render, write and reload when the text changed. Serialised. */
  sync(): Promise<void> {
    if (this.running) return this.running;
    this.running = this.syncOnce().finally(() => (this.running = null));
    return this.running;
  }

  private async syncOnce(): Promise<void> {
    const { model, desired } = this.o.applied();
    if (!model) return; // nothing applied: BIRD keeps what the supervisor started it with
    const iface = this.o.interface ?? desired?.interface;
    if (iface && Date.now() - this.xdpCheckedAt > 2000) {
      this.xdpUp = await (this.o.xdpAttached ?? xdpAttachedByIp)(iface);
      this.xdpCheckedAt = Date.now();
    }
    const vips = this.announcements();
    // a stopping node takes nothing over any more: its routes go with its VIPs
    const using = bgpNode(model, this.o.node) ? model : this.lastBgp?.model;
    const peerSnat = new Set((using?.nodes ?? []).filter((n) => n.spec.role === 'lb' && n.metadata.name !== this.o.node).map((n) => n.spec.snatAddress));
    const snatTakeover = this.stopping ? [] : (this.o.snatTakeover?.() ?? []).filter((a) => peerSnat.has(a));
    const text = using ? renderBirdConfig(using, this.o.node, vips, { snatTakeover }) : null;
    if (text === null || text === this.written) return;
    if (this.error && !this.stopping && Date.now() - this.failedAt < 2000) return; // BIRD down: retry every 2 s
    let onDisk: string | null = null;
    try {
      onDisk = await readFile(this.o.configFile, 'utf8').catch(() => null);
      if (onDisk !== text) {
        // It may hold session passwords: created afresh with 0600 ('wx' refuses a leftover file or a planted
        // symlink, whose mode or target writeFile would otherwise keep).
        await rm(`${this.o.configFile}.tmp`, { force: true });
        await writeFile(`${this.o.configFile}.tmp`, text, { mode: 0o600, flag: 'wx' });
        await rename(`${this.o.configFile}.tmp`, this.o.configFile);
      }
      const r = await run(this.o.birdc ?? 'birdc', ['-s', this.o.birdSocket, 'configure']);
      // birdc exits 0 even when BIRD refuses the file; its reply says which.
      if (r.code !== 0 || !/Reconfigur(ed|ation in progress)/.test(r.out)) throw new Error(`birdc configure: ${r.out.split('\n').slice(-2).join(' ') || `exit ${r.code}`}`);
      this.written = text;
      this.reloadedAt = new Date().toISOString();
      this.error = undefined;
      const summary = vips.map((v) => `${v.vip} ${announcementText(v)}`).join(', ');
      this.log.info(`bgp: BIRD reloaded: ${summary || 'no VIPs'}`);
    } catch (err) {
      // BIRD may quote the file it refused: no password of this text, the last one BIRD took or the one found on
      // disk (an older revision's) reaches the log or the status (scrub.ts).
      const secrets = [text, this.written, onDisk].flatMap(birdPasswords);
      const msg = scrubToolText((err as Error).message, secrets);
      if (msg !== this.error) this.log.warn(`bgp: ${msg}`);
      this.error = msg;
      this.failedAt = Date.now();
    }
  }

  /** Withdraws every VIP (gitlb run --withdraw-on-exit) and stops; resolves once BIRD has the new file. */
  async withdrawAll(): Promise<void> {
    this.stopping = true;
    this.stop();
    await this.running;
    await this.sync();
    // BIRD sends the withdrawals from its event loop right after the reload; give it a moment before this
    // process (and with it the caller's view of "withdrawn") goes away.
    if (!this.error) await new Promise((r) => setTimeout(r, 300));
  }

  /** Stops ticking; BIRD keeps announcing what it was last told (the pinned data plane keeps forwarding). */
  stop(): void {
    this.halted = true;
    clearTimeout(this.timer);
  }

  /** Does the applied revision give this node BGP settings (otherwise nothing is announced or reported)? */
  configured(): boolean {
    return bgpNode(this.o.applied().model, this.o.node) !== null;
  }

  status(): BgpStatus {
    return {
      vips: this.announcements().map((v) => ({ vip: v.vip, services: v.services, state: announcementText(v) })),
      bird: { configFile: this.o.configFile, reloadedAt: this.reloadedAt, ...(this.error ? { error: this.error } : {}) },
      ...(this.o.rejoin && { rejoin: this.o.rejoin.report() }),
    };
  }
}
