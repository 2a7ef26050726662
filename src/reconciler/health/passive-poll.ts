// The lb daemon's passive-signal loop: every PASSIVE.pollMs it reads each real's TCP counters from the loaded
// xdp_lb object (lb_reals for id -> address and slot, lb_real_stats' TCP part summed over CPUs: one lookup per
// real), feeds them to PassiveSignals and hands the suspects to the health checker, which moves their checks forward.
// Nothing here writes to the data plane; a read that fails is logged once and tried again on the next tick.
import type { BpfObject } from '../../bpf/libbpf.js';
import { realTcpAt } from '../../bpf/counters.js';
import { decodeReal, realSlotOf } from '../../bpf/dataplane/codec.js';
import type { ConfigModel } from '../../render/model.js';
import { PASSIVE, PassiveSignals, passiveAddresses, type RealSample } from './passive.js';

/** Per-real TCP traffic by address, from the lb object's maps (reals sharing an address are summed): TCP packets
 * and the SYNs among them; the real's UDP is not in these counters (lb_real_traffic). */
export function readRealSamples(obj: BpfObject, only: ReadonlySet<string>): Map<string, RealSample> {
  const out = new Map<string, RealSample>();
  const stats = obj.map('lb_real_stats');
  for (const [, v] of obj.map('lb_reals').entries()) {
    const value = Buffer.from(v);
    const address = decodeReal(value).address;
    if (!only.has(address)) continue;
    const t = realTcpAt(stats, realSlotOf(value));
    if (!t) continue;
    const prev = out.get(address);
    out.set(address, { packets: (prev?.packets ?? 0) + t.tcpPackets, newFlows: (prev?.newFlows ?? 0) + t.tcpSyns });
  }
  return out;
}

export interface PassivePollOptions {
  object: () => BpfObject | null;
  model: () => ConfigModel | null;
  suspect: (address: string) => number;
  log: { info(m: string, f?: Record<string, unknown>): void; warn(m: string, f?: Record<string, unknown>): void };
  pollMs?: number;
}

export function startPassivePoll(o: PassivePollOptions): { stop(): void } {
  const signals = new PassiveSignals();
  let failed: string | null = null;
  let model: ConfigModel | null = null;
  let only = new Set<string>();
  const timer = setInterval(() => {
    try {
      const m = o.model();
      if (m !== model) {
        model = m;
        only = m ? passiveAddresses(m) : new Set();
      }
      const obj = o.object();
      if (!obj || only.size === 0) return;
      for (const address of signals.observe(Date.now(), readRealSamples(obj, only))) {
        const pulled = o.suspect(address);
        if (pulled) o.log.info(`health: ${address} suspect: its new connections get no answer through this node; checking it now`,
          { stage: 'health', real: address, reason: 'passive', checks: pulled });
      }
      if (failed) o.log.info('health: passive signals readable again', { stage: 'health' });
      failed = null;
    } catch (err) {
      const message = (err as Error).message;
      if (message !== failed) o.log.warn(`health: passive signals unavailable: ${message}`, { stage: 'health', reason: message });
      failed = message;
    }
  }, o.pollMs ?? PASSIVE.pollMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
