// The bench's config: a copy of sample-config-repo in which every measured service spreads over every backend
// with equal weight. The sample gives each service its own set (web weights be-3 half, api drains be-3, shop and
// dns use two backends), so no single "direct" figure would be the same load as every VIP; with one set for
// all, the VIPs, haproxy, nftables and direct all spread over the same backends, evenly.
import { cpSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseDocument } from 'yaml';

export interface BenchService {
  name: string;
  /** http://VIP:port/ of the service's first TCP port */
  url: string;
}

export interface BenchConfig {
  dir: string;
  /** IPv4 address of every backend node, in node-name order */
  backends: string[];
  services: BenchService[];
}

interface NodeYaml { metadata: { name: string }; spec: { role: string; addresses: string[] } }
interface ServiceYaml { spec: { vip: string; ports: { port: number; protocol: string }[] } }

/** Copies `sampleDir` to `dir` and gives each of `services` every backend's IPv4 address as an equal real. */
export function writeBenchConfig(sampleDir: string, dir: string, services: string[]): BenchConfig {
  cpSync(sampleDir, dir, { recursive: true, filter: (src) => !src.split('/').includes('.git') });
  const nodes = readdirSync(join(dir, 'nodes'))
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => parseDocument(readFileSync(join(dir, 'nodes', f), 'utf8')).toJS() as NodeYaml)
    .filter((n) => n.spec.role === 'backend')
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const backends = nodes.map((n) => {
    const v4 = n.spec.addresses.find((a) => !a.includes(':'));
    if (!v4) throw new Error(`backend ${n.metadata.name} has no IPv4 address`);
    return v4;
  });
  if (backends.length === 0) throw new Error(`no backend nodes in ${sampleDir}`);
  const out = services.map((name) => {
    const file = join(dir, 'services', `${name}.yaml`);
    const doc = parseDocument(readFileSync(file, 'utf8'));
    // plain entries: no weight (all default), no drain state
    doc.setIn(['spec', 'reals'], backends.map((address) => ({ address })));
    writeFileSync(file, doc.toString());
    const spec = (doc.toJS() as ServiceYaml).spec;
    const tcp = spec.ports.find((p) => p.protocol === 'TCP');
    if (!tcp) throw new Error(`service ${name} has no TCP port`);
    return { name, url: `http://${spec.vip}:${tcp.port}/` };
  });
  return { dir, backends, services: out };
}
