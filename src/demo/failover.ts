// Failover measurement in the lab with BGP (docs/bgp.md): long-lived connections through a VIP, an event (a drain
// commit, a killed BIRD), then how long the router took to drop the node's next hop and how many connections
// survived. Used by the BGP netns tests, bench/failover and the demo, so all three measure the same way.
import { labNs, type LabState } from '../lab/lab.js';
import { nsExec, sleep } from '../lab/netns.js';
import { routerRouteProto } from '../lab/topology.js';
import { runTraffic, type FlowResult } from './traffic.js';

/** The router's next hops for `vip` as installed by its BGP daemon (BIRD or zebra; sorted), [] when it has no such route. */
export async function routerNextHops(state: LabState, vip: string): Promise<string[]> {
  const v6 = vip.includes(':');
  const proto = routerRouteProto(state.plan.bird);
  const r = await nsExec(labNs(state, 'router'), ['ip', v6 ? '-6' : '-4', 'route', 'show', `${vip}/${v6 ? 128 : 32}`, 'proto', proto], { timeoutMs: 5000 });
  return [...r.stdout.matchAll(/via (\S+)/g)].map((m) => m[1]!).sort();
}

/**
 * Polls the router until `done(hops)` holds for every VIP in `vips`; resolves to the milliseconds it took, or null
 * after `timeoutMs`. Bounded: at most timeoutMs / pollMs rounds.
 */
export async function waitForHops(state: LabState, vips: string[], done: (hops: string[], vip: string) => boolean, timeoutMs: number, pollMs = 50): Promise<number | null> {
  const start = Date.now();
  for (;;) {
    const all = await Promise.all(vips.map(async (v) => done(await routerNextHops(state, v), v)));
    if (all.every(Boolean)) return Date.now() - start;
    if (Date.now() - start > timeoutMs) return null;
    await sleep(pollMs);
  }
}

/**
 * With BGP the router has no route to a VIP until every lb node's BIRD session is up and announces it (BIRD waits
 * a few seconds before its first connect), which is later than the daemons' first apply and status push: traffic
 * sent before that gets ENETUNREACH from the router. Resolves to the milliseconds until every VIP in `vips` had one
 * next hop per lb node, or null after `timeoutMs`.
 */
export async function waitForAnnounced(state: LabState, vips: string[], timeoutMs: number): Promise<number | null> {
  const lbs = state.plan.bird?.lbs.length ?? 0;
  return waitForHops(state, vips, (hops) => hops.length === lbs, timeoutMs, 200);
}

export interface FailoverOptions {
  vip: string;
  port: number;
  /** The next hop (an lb node's address) the event must take out of the router's route. */
  leaving: string;
  flows: number;
  /** How long connections run in total, and the gap between requests on each. */
  durationMs: number;
  intervalMs: number;
  /** Connections run this long before the event, so they are established through both lb nodes. */
  settleMs: number;
  /** Give up waiting for the route change after this long. */
  routeTimeoutMs: number;
  event: () => Promise<void>;
}

export interface FailoverResult {
  /** From the end of the event (commit pushed, process killed) to the router's route without `leaving`; null: it never changed. */
  routeChangeMs: number | null;
  /** The router's next hops for the VIP just before the event and once it changed. */
  hopsBefore: string[];
  hopsAfter: string[];
  flows: number;
  survived: number;
  /** Connections that saw a second backend (they would have broken under a different Maglev table). */
  switchedBackend: number;
  lost: FlowResult[];
}

export async function measureFailover(state: LabState, o: FailoverOptions): Promise<FailoverResult> {
  const traffic = runTraffic(labNs(state, 'client'), {
    kind: 'flows',
    host: o.vip,
    port: o.port,
    flows: o.flows,
    durationMs: o.durationMs,
    intervalMs: o.intervalMs,
    sources: state.plan.client.v4,
    timeoutMs: 5000,
  });
  traffic.catch(() => {}); // awaited below; an event failure first must not leave it unhandled
  await sleep(o.settleMs);
  const hopsBefore = await routerNextHops(state, o.vip);
  await o.event();
  const start = Date.now(); // the event is done: the commit is pushed, the process is killed
  const waited = await waitForHops(state, [o.vip], (h) => !h.includes(o.leaving), o.routeTimeoutMs);
  const routeChangeMs = waited === null ? null : Date.now() - start;
  const hopsAfter = await routerNextHops(state, o.vip);
  const r = await traffic;
  return {
    routeChangeMs,
    hopsBefore,
    hopsAfter,
    flows: r.flows.length,
    survived: r.flows.filter((f) => f.survived).length,
    switchedBackend: r.flows.filter((f) => f.backends.length > 1).length,
    lost: r.flows.filter((f) => !f.survived),
  };
}
