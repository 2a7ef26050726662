// The Maglev table of one Service: which reals take part, with which identity strings, and the ring's digest.
// Shared by desired-state rendering and plan, so both see exactly the same tables.
import { createHash } from 'node:crypto';
import type { ClusterSpec, PortSpec, ServiceDoc } from './model.js';
import type { DesiredServiceReal } from './state.js';
import { buildMaglevTableCounted, maglevBackendId, maglevSeedFromBase64, type MaglevBackend } from './maglev.js';

export interface HealthView {
  isHealthy(serviceName: string, address: string): boolean;
}

/**
 * The port a real's Maglev identity uses: the lowest (target port, protocol) of the service, TCP before UDP.
 * One table serves all of a service's ports, so one port must stand for the real; the target port is the one the
 * real actually listens on, which keeps the identity meaningful when a VIP port is remapped.
 */
export function identityPort(ports: readonly PortSpec[]): { port: number; protocol: string } {
  if (ports.length === 0) return { port: 0, protocol: 'TCP' };
  let best = { port: ports[0]!.targetPort ?? ports[0]!.port, protocol: ports[0]!.protocol as string };
  for (const p of ports) {
    const port = p.targetPort ?? p.port;
    if (port < best.port || (port === best.port && p.protocol < best.protocol)) best = { port, protocol: p.protocol };
  }
  return best;
}

export function serviceTableSize(cluster: ClusterSpec, svc: ServiceDoc): number {
  return svc.spec.maglev?.tableSize ?? cluster.maglev.tableSize;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** SHA-256 of the ring as consecutive little-endian u32 values, lower-case hex. */
export function ringDigest(ring: Uint32Array): string {
  // A Uint32Array's bytes are host order: on a little-endian host they are the digest's input as they are (no
  // copy, which at 1,000 tables of 10,007 entries was 10 M buffer writes).
  if (LITTLE_ENDIAN) return createHash('sha256').update(new Uint8Array(ring.buffer, ring.byteOffset, ring.byteLength)).digest('hex');
  const bytes = Buffer.allocUnsafe(ring.length * 4);
  for (let j = 0; j < ring.length; j++) bytes.writeUInt32LE(ring[j]!, j * 4);
  return createHash('sha256').update(bytes).digest('hex');
}

export interface ServiceTable {
  tableSize: number;
  ring: Uint32Array;
  digest: string;
  /** Every real of the service except `disabled` ones, sorted by realId. */
  reals: DesiredServiceReal[];
}

/**
 * Builds a service's table. Reals take entries iff state is `active`, weight > 0 and `health` (default: all
 * healthy) says healthy. `drain` and unhealthy reals are still listed (with 0 entries) so the data plane keeps
 * them for established flows; `disabled` reals are not listed at all.
 */
export function buildServiceTable(
  cluster: ClusterSpec,
  svc: ServiceDoc,
  realIds: ReadonlyMap<string, number>,
  health?: HealthView,
): ServiceTable {
  const tableSize = serviceTableSize(cluster, svc);
  const { port, protocol } = identityPort(svc.spec.ports);
  // Everything the table is made of, per listed real: its id, health, address, weight and state.
  const ids: number[] = [];
  const healthy: boolean[] = [];
  const inputs: (string | number)[] = [];
  for (const real of svc.spec.reals) {
    if (real.state === 'disabled') continue;
    const realId = realIds.get(real.address);
    if (realId === undefined) throw new Error(`internal: no id for real ${real.address} of ${svc.metadata.name}`);
    ids.push(realId);
    healthy.push(health ? health.isHealthy(svc.metadata.name, real.address) : true);
    inputs.push(real.address, real.weight, real.state);
  }
  const prev = tableMemo.get(svc.metadata.name);
  if (prev && prev.tableSize === tableSize && prev.seed === cluster.maglev.seed && prev.port === port && prev.protocol === protocol &&
    sameValues(prev.ids, ids) && sameValues(prev.healthy, healthy) && sameValues(prev.inputs, inputs)) {
    return prev.table;
  }
  const seed = maglevSeedFromBase64(cluster.maglev.seed);
  const listed: DesiredServiceReal[] = [];
  const backends: MaglevBackend[] = [];
  let k = 0;
  for (const real of svc.spec.reals) {
    if (real.state === 'disabled') continue;
    const realId = ids[k]!;
    const up = healthy[k++]!;
    listed.push({ realId, address: real.address, weight: real.weight, state: real.state, healthy: up, entries: 0 });
    if (real.state === 'active' && up && real.weight > 0) {
      backends.push({ id: maglevBackendId(real.address, port, protocol), weight: real.weight, realId });
    }
  }
  const { ring, digest, counts } = memoTable(backends, tableSize, seed);
  for (const r of listed) r.entries = counts.get(r.realId) ?? 0;
  listed.sort((a, b) => a.realId - b.realId);
  const table = { tableSize, ring, digest, reals: listed };
  if (tableMemo.size >= TABLE_MEMO_MAX) tableMemo.clear();
  tableMemo.set(svc.metadata.name, { tableSize, seed: cluster.maglev.seed, port, protocol, ids, healthy, inputs, table });
  return table;
}

/**
 * The last table of each service name with everything it was built from (so keyed by content: a hit needs every
 * input equal). Re-rendering 1,000 services after a one-service commit or a health flip then compares plain values
 * instead of rebuilding 1,000 memo keys for memoTable (Maglev identities, a sort and a join per service). Tables
 * are shared between results and never written. At most one entry per name, names capped like services.
 */
interface TableInputs { tableSize: number; seed: string; port: number; protocol: string; ids: number[]; healthy: boolean[]; inputs: (string | number)[] }
const tableMemo = new Map<string, TableInputs & { table: ServiceTable }>();
const TABLE_MEMO_MAX = 16_384;

function sameValues<T>(a: readonly T[], b: readonly T[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

interface BuiltTable { ring: Uint32Array; digest: string; counts: Map<number, number> }

/**
 * Tables already built, by their complete input (backends, size, seed): a revision usually changes a few
 * services, and a health flip one, so re-rendering 1,000 services rebuilds only those. A pure function's
 * results, so the output is the same with or without it. Rings are shared between results and never written.
 * Bounded by the ring entries held (least recently used first out).
 */
const MEMO_MAX_ENTRIES = 32 * 1024 * 1024;
const memo = new Map<string, BuiltTable>();
let memoEntries = 0;

function memoTable(backends: MaglevBackend[], tableSize: number, seed: number): BuiltTable {
  const key = `${tableSize}|${seed}|${backends.map((b) => `${b.id}\u0000${b.weight}\u0000${b.realId}`).sort().join('\u0001')}`;
  const hit = memo.get(key);
  if (hit) {
    memo.delete(key); // most recently used goes last
    memo.set(key, hit);
    return hit;
  }
  const { table: ring, entries: counts } = buildMaglevTableCounted(backends, tableSize, seed);
  const built = { ring, digest: ringDigest(ring), counts };
  memo.set(key, built);
  memoEntries += tableSize;
  for (const [k, v] of memo) {
    if (memoEntries <= MEMO_MAX_ENTRIES) break;
    memo.delete(k);
    memoEntries -= v.ring.length;
  }
  return built;
}
