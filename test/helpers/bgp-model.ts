// A small config with BGP settings (one lb node with an IPv4 and an IPv6 peer, three services), through the real
// config stage: shared by the pure BGP tests and the announcer test against a real BIRD.
import { type ConfigFile, formatDiagnostic, parseConfig } from '../../src/render/config/index.js';
import type { ConfigModel } from '../../src/render/model.js';

export const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
export const file = (path: string, text: string): ConfigFile => ({ path, content: enc(text) });

export const CLUSTER_BGP = (bgp: string) => `apiVersion: gitlb/v1
kind: Cluster
metadata:
  name: c
spec:
  bgp:
${bgp}`;
export const lbNode = (name: string, extra: string) => `apiVersion: gitlb/v1
kind: Node
metadata:
  name: ${name}
spec:
  role: lb
  interface: eth0
  addresses: [198.51.100.${name === 'lb-1' ? 11 : 12}, 2001:db8:1::${name === 'lb-1' ? 11 : 12}]
  allowedVips: [203.0.113.0/24, 2001:db8:ff::/64]
${extra}`;
export const BE = 'apiVersion: gitlb/v1\nkind: Node\nmetadata:\n  name: be-1\nspec:\n  role: backend\n  interface: eth0\n  addresses: [198.51.100.21, 198.51.100.22, 2001:db8:1::21]\n';
export const svc = (name: string, vip: string, reals: string) =>
  `apiVersion: gitlb/v1\nkind: Service\nmetadata:\n  name: ${name}\nspec:\n  vip: ${vip}\n  ports: [{port: 80}]\n  dispatch: {mode: dsr, encap: l2}\n  reals: ${reals}\n`;
export const PEERS = `  bgp:
    routerId: 198.51.100.11
    peers:
      - {address: 198.51.100.1, asn: 65000, password: s3cret}
      - {address: 2001:db8:1::1, asn: 65000}
`;

export function parse(files: ConfigFile[]) {
  const r = parseConfig(files);
  return { model: r.model, lines: r.diagnostics.map(formatDiagnostic) };
}

/** The files of goodModel(), as they would sit in a config repository. */
export function goodFiles(lb1Extra = PEERS): ConfigFile[] {
  return [
    file('cluster.yaml', CLUSTER_BGP('    localAsn: 65001\n    holdTime: 3\n    communities: ["65001:200", "65001:100", "65001:100"]\n    med: 50\n')),
    file('nodes/lb-1.yaml', lbNode('lb-1', lb1Extra)),
    file('nodes/be-1.yaml', BE),
    file('services/web.yaml', svc('web', '203.0.113.10', '[{address: 198.51.100.21}, {address: 198.51.100.22}]')),
    file('services/api.yaml', svc('api', '203.0.113.20', '[{address: 198.51.100.21}]')),
    file('services/web6.yaml', svc('web6', '2001:db8:ff::10', '[{address: 2001:db8:1::21}]')),
  ];
}

export function goodModel(lb1Extra = PEERS): ConfigModel {
  const { model, lines } = parse(goodFiles(lb1Extra));
  if (!model) throw new Error(lines.join('\n'));
  return model;
}

