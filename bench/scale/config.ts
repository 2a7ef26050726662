// A generated config repository at scale for bench/scale and bench/reconcile: one Cluster, one lb node, and
// SERVICES services of REALS reals each (IPv6 documentation addresses, so any count fits), 100 services per file.
import { clusterYaml } from '../../test/reconcile-helpers.js';
import { DEFAULTS } from '../../src/render/config/limits.js';

export interface ScaleShape { services: number; reals: number; tableSize: number }

export const SCALE: ScaleShape = { services: 1000, reals: 100, tableSize: 10007 };

const hex = (n: number) => n.toString(16);

function realYaml(address: string, weight: number): string {
  return weight === DEFAULTS.weight ? `    - address: ${address}` : `    - address: ${address}\n      weight: ${weight}`;
}

export function scaleServiceYaml(i: number, shape: ScaleShape, weightOf: (real: number) => number = () => 100): string {
  return [
    'apiVersion: gitlb/v1',
    'kind: Service',
    `metadata: { name: svc-${i} }`,
    'spec:',
    `  vip: 2001:db8:1::${hex(i + 1)}`,
    `  ports: [{ port: ${1000 + i}, protocol: TCP }]`, // a port of its own: every service gets a table of its own
    '  dispatch: { mode: dsr, encap: ipip }',
    '  reals:',
    // Block form, weight only where it is not the default: two YAML entries per real, so 100,000 reals stay under
    // the entries counted before parsing (docs/config.md "Limits and hostile input").
    ...Array.from({ length: shape.reals }, (_, r) => realYaml(`2001:db8:2::${hex(r + 1)}`, weightOf(r))),
    '',
  ].join('\n');
}

/** File path of service i (100 per file: a revision is limited in files and in documents per file). */
export const scaleFileOf = (i: number) => `services/part${Math.floor(i / 100)}.yaml`;

/** The text of the file holding service i, with `weights` overriding per service index. */
export function scaleFile(file: number, shape: ScaleShape, weights: Map<number, (real: number) => number> = new Map()): string {
  const docs: string[] = [];
  for (let i = file * 100; i < Math.min(shape.services, file * 100 + 100); i++) docs.push(scaleServiceYaml(i, shape, weights.get(i)));
  return docs.join('---\n');
}

export function scaleFiles(shape: ScaleShape = SCALE): Record<string, string> {
  const files: Record<string, string> = {
    'cluster.yaml': clusterYaml({ tableSize: shape.tableSize }),
    'nodes/lb-1.yaml': [
      'apiVersion: gitlb/v1', 'kind: Node', 'metadata: { name: lb-1 }', 'spec:', '  role: lb', '  interface: eth0',
      '  addresses: [2001:db8:ff::1]', '  allowedVips: [2001:db8:1::/64]', '',
    ].join('\n'),
  };
  for (let f = 0; f * 100 < shape.services; f++) files[`services/part${f}.yaml`] = scaleFile(f, shape);
  return files;
}
