// The XDP attachment of an lb node as its status reports it, and the one line that describes it (the daemon's log,
// `gitlb status`). The data plane returns it as data (src/bpf/xdp-forwarding.ts XdpForwarding); other nodes' status
// files are input, so reading them back checks every field.
import type { XdpForwarding } from '../../bpf/xdp-forwarding.js';

export type StatusXdp = XdpForwarding;

/** A copy for the status document (the data plane's object is its own). */
export function statusXdp(f: XdpForwarding): StatusXdp {
  return { mode: f.mode, requested: f.requested, fellBack: f.fellBack, forwards: f.forwards, detail: f.detail };
}

/** The `xdp` section of a status file written by some node, or undefined when absent or malformed. */
export function readStatusXdp(v: unknown): StatusXdp | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const x = v as Record<string, unknown>;
  if (x['mode'] !== 'native' && x['mode'] !== 'generic') return undefined;
  const requested = x['requested'] === 'native' || x['requested'] === 'generic' ? x['requested'] : 'auto';
  const forwards = typeof x['forwards'] === 'boolean' ? x['forwards'] : null;
  return { mode: x['mode'], requested, fellBack: x['fellBack'] === true, forwards, detail: typeof x['detail'] === 'string' ? x['detail'].slice(0, 300) : '' };
}

/** Short form for a table column: `native`, `generic`, or `generic (fallback)` when native could not forward. */
export function xdpColumn(x: StatusXdp | undefined): string {
  if (!x) return '-';
  return x.fellBack ? 'generic (fallback)' : x.mode;
}

/** One line: mode in use, what was asked for, and what the forwarding check found. */
export function describeXdp(x: StatusXdp): string {
  return `xdp ${x.mode} (--xdp-mode ${x.requested})${x.fellBack ? ', native fell back' : ''}: ${x.detail}`;
}
