// The XDP program takes a real's next-hop MAC from the kernel's neighbour table (bpf_fib_lookup) and drops the
// packet when there is no valid entry: XDP cannot resolve neighbours itself. The lb daemon therefore keeps the
// entries of its reals' next hops alive: it reads the table once per round and, for every real without a usable
// entry, sends one UDP datagram to the discard port, which makes the kernel resolve (ARP / neighbour discovery).
// Health checks do the same as a side effect; this covers services with `healthCheck.type: none`.
import { execFile } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { promisify } from 'node:util';
import type { DesiredState } from '../../render/state.js';
import type { Logger } from '../state/node-state.js';
import { everyExclusive } from '../triggers/schedule.js';

const execFileP = promisify(execFile);

/** Neighbour states that bpf_fib_lookup accepts (NUD_VALID). */
const USABLE = new Set(['REACHABLE', 'STALE', 'DELAY', 'PROBE', 'PERMANENT', 'NOARP']);

/** Addresses of `ip -json neigh show` entries in a usable state. Pure, for tests. */
export function usableNeighbours(ipJson: string): Set<string> {
  const out = new Set<string>();
  let rows: unknown;
  try {
    rows = JSON.parse(ipJson || '[]');
  } catch {
    return out;
  }
  if (!Array.isArray(rows)) return out;
  for (const r of rows as { dst?: unknown; state?: unknown }[]) {
    if (typeof r.dst !== 'string' || !Array.isArray(r.state)) continue;
    if ((r.state as unknown[]).some((s) => typeof s === 'string' && USABLE.has(s))) out.add(r.dst);
  }
  return out;
}

/** Which of `addresses` need a resolution nudge, given the usable neighbour entries. Pure. */
export function addressesToResolve(addresses: string[], usable: Set<string>): string[] {
  return [...new Set(addresses)].filter((a) => !usable.has(a)).sort();
}

async function nudge(address: string): Promise<void> {
  const socket = createSocket(address.includes(':') ? 'udp6' : 'udp4');
  try {
    await new Promise<void>((resolve) => {
      // Port 9 (discard): a closed port only costs the real an ICMP port-unreachable.
      socket.send(Buffer.alloc(0), 9, address, () => resolve());
      setTimeout(resolve, 500).unref();
    });
  } finally {
    socket.close();
  }
}

/**
 * One round: nudges every address that has no usable neighbour entry. Reals that sit behind a router resolve
 * the router instead (the kernel resolves the next hop of the route), which is exactly what the fib lookup needs.
 * Returns the addresses nudged.
 */
export async function refreshNeighbours(addresses: string[]): Promise<string[]> {
  if (addresses.length === 0) return [];
  const { stdout } = await execFileP('ip', ['-json', 'neigh', 'show'], { timeout: 5000, maxBuffer: 16 * 1024 * 1024 });
  const usable = usableNeighbours(stdout);
  const missing = addressesToResolve(addresses, usable);
  // A real behind a router needs the router's entry, not its own: skip it when that one is usable.
  const todo: string[] = [];
  for (const address of missing) {
    const gateway = await nextHopGateway(address);
    if (gateway === null || !usable.has(gateway)) todo.push(address);
  }
  await Promise.all(todo.map(nudge));
  return todo;
}

/** The gateway the kernel routes `address` through, or null when it is on-link (or has no route). */
async function nextHopGateway(address: string): Promise<string | null> {
  try {
    const { stdout } = await execFileP('ip', ['-json', 'route', 'get', address], { timeout: 5000 });
    const rows = JSON.parse(stdout) as { gateway?: unknown }[];
    return typeof rows[0]?.gateway === 'string' ? rows[0].gateway : null;
  } catch {
    return null;
  }
}

/** Every 5 s, make sure each real of the applied state has a usable neighbour entry (or its next hop has). */
export function startNeighbourRefresh(desired: () => DesiredState | null, log: Logger): { stop(): void } {
  const rounds = everyExclusive('5', 'neighbours', async () => {
    const nudged = await refreshNeighbours(desired()?.reals.map((r) => r.address) ?? []);
    // routine upkeep: a line at debug level only
    if (nudged.length) (log.debug ?? log.info).call(log, `neighbours: resolving ${nudged.join(', ')}`, { stage: 'neighbours', count: nudged.length });
  }, log);
  setTimeout(rounds.now, 500).unref();
  return rounds;
}
