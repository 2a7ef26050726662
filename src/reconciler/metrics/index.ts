// One node's metrics: a prom-client registry holding the data-plane collectors (pinned maps, read at scrape time),
// the control-plane, Git and health metrics. `gitlb run` creates it, serves it (./server.ts) and feeds it events
// through the daemon's hooks. Metric names and meaning: docs/metrics.md.
import { Counter, Gauge, Registry } from 'prom-client';
import { namedListenerStats } from '../http/http-limits.js';
import type { DesiredState } from '../../render/state.js';
import { registerDataPlaneMetrics, type DataPlaneNames } from './dataplane.js';
import { ControlMetrics } from './control.js';
import { GitMetrics } from './git.js';
import { HealthMetrics } from './health.js';
import { BgpMetrics } from './bgp.js';
import { PeerMetrics } from './peer.js';
import { FlowSyncMetrics } from './flow-sync.js';

export { startMetricsServer, type MetricsServer } from './server.js';
export { outcomeReason, type ReconcileOutcome } from './control.js';

/** Default listen address of `gitlb run --metrics`: loopback only (scrapers on other hosts must be allowed explicitly). */
export const DEFAULT_METRICS_LISTEN = '127.0.0.1:9462';

/** "vip:port/proto" of each listener of a service, for the `vip` label of per-service metrics. */
export function dataPlaneNames(d: DesiredState | null): DataPlaneNames | null {
  if (!d) return null;
  const vips = new Map<number, string[]>();
  for (const v of d.vips) {
    const text = `${v.family === 6 ? `[${v.vip}]` : v.vip}:${v.port}/${v.protocol}`;
    const l = vips.get(v.serviceId);
    if (l) l.push(text);
    else vips.set(v.serviceId, [text]);
  }
  return { services: new Map(d.services.map((s) => [s.id, { name: s.name, vip: (vips.get(s.id) ?? []).join(',') }])) };
}

export interface NodeMetricsOptions {
  node: string;
  /** The node's pin root (…/<node>): lb or backend maps, whichever are pinned there. */
  pinRoot: string;
  desired: () => DesiredState | null;
}

export class NodeMetrics {
  readonly registry = new Registry();
  readonly control: ControlMetrics;
  readonly git: GitMetrics;
  readonly health: HealthMetrics;
  readonly bgp: BgpMetrics;
  readonly peer: PeerMetrics;
  readonly flowSync: FlowSyncMetrics;
  private role: string | null = null;

  constructor(o: NodeMetricsOptions) {
    const reg = this.registry;
    reg.setDefaultLabels({ node: o.node });
    const self = this;
    new Gauge({ name: 'gitlb_node_info', help: 'This daemon (value 1) and its role', labelNames: ['role'], registers: [reg],
      collect() {
        this.reset();
        if (self.role) this.set({ role: self.role }, 1);
      } });
    // The HTTP listeners' dropped connections (docs/security.md, HTTP listeners): counted, never logged one by one.
    new Counter({ name: 'gitlb_http_connections_dropped_total', help: 'Connections an HTTP listener dropped before their time: evicted (slow, idle or stuck when a slot was needed), refused (no slot could be freed), response_timeout (answer not read within the deadline)',
      labelNames: ['listener', 'reason'], registers: [reg],
      collect() {
        this.reset();
        for (const [listener, s] of namedListenerStats()) {
          this.inc({ listener, reason: 'evicted' }, s.evicted);
          this.inc({ listener, reason: 'refused' }, s.refused);
          this.inc({ listener, reason: 'response_timeout' }, s.responseTimedOut);
        }
      } });
    registerDataPlaneMetrics({ registry: reg, pinRoot: o.pinRoot, names: () => dataPlaneNames(o.desired()) });
    this.control = new ControlMetrics(reg);
    this.git = new GitMetrics(reg);
    this.health = new HealthMetrics(reg);
    this.bgp = new BgpMetrics(reg);
    this.peer = new PeerMetrics(reg);
    this.flowSync = new FlowSyncMetrics(reg);
  }

  /** The role is known once the daemon has read its Node document. */
  setRole(role: 'lb' | 'backend'): void {
    this.role = role;
  }
}
