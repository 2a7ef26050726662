// Compares what the kernel holds (LiveState, read from the BPF maps) with what a revision wants
// (DesiredState). Pure. Used to plan before an apply, to verify after it, and by the drift check.
import type { DesiredState } from '../render/state.js';

/** Structural view of the data plane's LiveState (src/bpf/dataplane/index.ts) that this module reads. */
export interface LiveView {
  reals: { id: number; address: string }[];
  services: { id: number; tableSize: number; digest: string }[];
  vips: { vip: string; port: number; protocol: string; serviceId: number; forwarding?: string; targetPort?: number; hashSourcePort?: boolean }[];
  hashSeed: number;
}

export interface LiveDiff {
  /** Human-readable differences, sorted; empty when live equals desired. */
  differences: string[];
  servicesChanged: number;
  realsChanged: number;
  vipsChanged: number;
}

function vipKey(v: { vip: string; port: number; protocol: string }): string {
  return `${v.vip}:${v.port}/${v.protocol}`;
}

function vipValue(v: LiveView['vips'][number]): string {
  const parts = [`service ${v.serviceId}`];
  if (v.forwarding !== undefined) parts.push(v.forwarding);
  if (v.targetPort !== undefined) parts.push(`target ${v.targetPort}`);
  if (v.hashSourcePort !== undefined) parts.push(`sport-hash ${v.hashSourcePort}`);
  return parts.join(', ');
}

export function diffLive(live: LiveView, desired: DesiredState): LiveDiff {
  const out: string[] = [];
  let servicesChanged = 0;
  let realsChanged = 0;
  let vipsChanged = 0;

  if (live.hashSeed !== desired.hashSeed) out.push(`hash seed ${live.hashSeed} != ${desired.hashSeed}`);

  const liveReals = new Map(live.reals.map((r) => [r.id, r.address]));
  const wantReals = new Map(desired.reals.map((r) => [r.id, r.address]));
  for (const [id, addr] of wantReals) {
    const have = liveReals.get(id);
    if (have !== addr) (realsChanged++, out.push(`real ${id} ${addr}: ${have === undefined ? 'missing' : `is ${have}`}`));
  }
  for (const [id, addr] of liveReals)
    if (!wantReals.has(id)) (realsChanged++, out.push(`real ${id} ${addr}: not desired`));

  const liveSvcs = new Map(live.services.map((s) => [s.id, s]));
  const wantSvcs = new Map(desired.services.map((s) => [s.id, s]));
  for (const [id, s] of wantSvcs) {
    const have = liveSvcs.get(id);
    if (!have) (servicesChanged++, out.push(`service ${s.name} (${id}): missing`));
    else if (have.digest !== s.digest || have.tableSize !== s.tableSize)
      (servicesChanged++, out.push(`service ${s.name} (${id}): ring ${have.digest.slice(0, 12)} != ${s.digest.slice(0, 12)}`));
  }
  for (const [id] of liveSvcs) if (!wantSvcs.has(id)) (servicesChanged++, out.push(`service ${id}: not desired`));

  // Only compare the VIP fields the live view actually reports.
  const liveVips = new Map(live.vips.map((v) => [vipKey(v), v]));
  const wantVips = new Map(desired.vips.map((v) => [vipKey(v), v]));
  for (const [key, want] of wantVips) {
    const have = liveVips.get(key);
    if (!have) (vipsChanged++, out.push(`vip ${key}: missing`));
    else {
      const projected: LiveView['vips'][number] = { vip: want.vip, port: want.port, protocol: want.protocol, serviceId: want.serviceId };
      if (have.forwarding !== undefined) projected.forwarding = want.forwarding;
      if (have.targetPort !== undefined) projected.targetPort = want.targetPort;
      if (have.hashSourcePort !== undefined) projected.hashSourcePort = want.hashSourcePort;
      if (vipValue(have) !== vipValue(projected)) (vipsChanged++, out.push(`vip ${key}: ${vipValue(have)} != ${vipValue(projected)}`));
    }
  }
  for (const [key] of liveVips) if (!wantVips.has(key)) (vipsChanged++, out.push(`vip ${key}: not desired`));

  return { differences: out.sort(), servicesChanged, realsChanged, vipsChanged };
}
