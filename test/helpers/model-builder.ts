// Builds validated ConfigModel objects directly, for render and plan tests that need precise control over
// every field (the sample config repository is exercised separately through parseConfig).
import type { ConfigModel, NodeDoc, ServiceDoc, ServiceSpec, NodeSpec, RealSpec } from '../../src/render/model.js';

const pos = (file: string) => ({ file, line: 1, col: 1 });

export function cluster(opts: { tableSize?: number; seed?: string } = {}): ConfigModel['cluster'] {
  return {
    apiVersion: 'gitlb/v1',
    kind: 'Cluster',
    metadata: { name: 'main' },
    spec: {
      maglev: { tableSize: opts.tableSize ?? 1021, seed: opts.seed ?? 'Z2l0bGItc2VlZC0x' },
      conntrack: { maxEntries: 65536, newFlowRate: 0 },
      status: { branch: 'gitlb-status' },
      rollback: { policy: 'manual' },
    },
    source: pos('cluster.yaml'),
  };
}

export function node(name: string, spec: Partial<NodeSpec> & Pick<NodeSpec, 'role'>): NodeDoc {
  return {
    apiVersion: 'gitlb/v1',
    kind: 'Node',
    metadata: { name },
    spec: { interface: 'eth0', allowedVips: [], addresses: [], mtu: 1500, ...spec },
    source: pos(`nodes/${name}.yaml`),
  };
}

export function real(address: string, weight = 1, state: RealSpec['state'] = 'active'): RealSpec {
  return { address, weight, state };
}

export function service(name: string, spec: Partial<ServiceSpec> & Pick<ServiceSpec, 'vip' | 'reals'>): ServiceDoc {
  return {
    apiVersion: 'gitlb/v1',
    kind: 'Service',
    metadata: { name },
    spec: {
      ports: [{ port: 80, protocol: 'TCP' }],
      dispatch: { mode: 'dsr', encap: 'l2' },
      hash: { sourcePort: true },
      healthCheck: { type: 'tcp', intervalMs: 1000, timeoutMs: 500, rise: 2, fall: 3 },
      ...spec,
    },
    source: pos(`services/${name}.yaml`),
  };
}

export function model(parts: { cluster?: ConfigModel['cluster']; nodes: NodeDoc[]; services: ServiceDoc[] }): ConfigModel {
  const byName = <T extends { metadata: { name: string } }>(a: T, b: T) =>
    a.metadata.name < b.metadata.name ? -1 : a.metadata.name > b.metadata.name ? 1 : 0;
  return {
    cluster: parts.cluster ?? cluster(),
    nodes: [...parts.nodes].sort(byName),
    services: [...parts.services].sort(byName),
  };
}
