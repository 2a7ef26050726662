// The Katran peer of the XDP bench: loads Katran's balancer program (built at run time from KATRAN_SRC by
// bench/xdp/run, never vendored) and fills its maps the way KatranLb does for one TCP VIP over IPIP reals:
// a per-CPU LRU connection table in `lru_mapping` for every possible CPU (KatranLb with all cores forwarding),
// the default router's MAC in ctl_array[0], reals from index 1 (0 marks an empty ring slot), the VIP's Maglev
// ring at vip_num * RING_SIZE. Its own counters (the `stats` map) tell which path every iteration took.
import { BpfMap, BpfObject, MapType, possibleCpus, type BpfProgram } from '../../src/bpf/libbpf.js';

/** Katran's compile-time constants the bench relies on (balancer_consts.h defaults, unchanged by the build). */
const MAX_VIPS = 512;
const RING_SIZE = 65537;
const STATS = { lru: 0, lruMiss: 1, tx: 17, pass: 19 } as const;

export interface KatranSetup {
  vip: string;
  port: number;
  /** Real addresses (IPv4), in the order of their Katran indexes 1..N. */
  reals: string[];
  /** Ring of real indexes (1-based), RING_SIZE entries. */
  ring: Uint32Array;
  routerMac: string;
  /** Total connection-table entries, split evenly over the per-CPU LRU maps as KatranLb splits LruSize. */
  lruSize: number;
  /** A GUE build (-DGUE_ENCAP): the outer IPv4 source, pckt_srcs[V4_SRC_INDEX] as KatranLb's addSrcIpForPcktEncap
   * writes it (without it Katran's gue_encap_v4 drops every packet). */
  encapSource?: string;
}

const v4 = (a: string) => Buffer.from(a.split('.').map(Number));
const mac = (m: string) => Buffer.from(m.split(':').map((x) => parseInt(x, 16)));
const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; };

export interface KatranPeer {
  prog: BpfProgram;
  /** Katran's own counters, summed over CPUs, by the names the bench's measurer asks for. */
  counter(name: string): number;
  close(): void;
}

export async function loadKatran(objPath: string, s: KatranSetup): Promise<KatranPeer> {
  if (s.ring.length !== RING_SIZE) throw new Error(`Katran's rings have ${RING_SIZE} slots, got ${s.ring.length}`);
  const o = await BpfObject.load(objPath, { reusePinnedMaps: false });
  const lrus: BpfMap[] = [];
  try {
    const ctl = o.map('ctl_array');
    const ctlValue = Buffer.alloc(ctl.valueSize);
    mac(s.routerMac).copy(ctlValue);
    ctl.update(u32(0), ctlValue);

    const reals = o.map('reals');
    s.reals.forEach((a, i) => {
      const v = Buffer.alloc(reals.valueSize); // real_definition: address, flags 0 (IPv4)
      v4(a).copy(v);
      reals.update(u32(i + 1), v);
    });

    const vipNum = 0;
    const rings = o.map('ch_rings');
    const keys = Buffer.alloc(RING_SIZE * 4);
    for (let i = 0; i < RING_SIZE; i++) keys.writeUInt32LE(vipNum * RING_SIZE + i, i * 4);
    rings.updateBatch(keys, Buffer.from(s.ring.buffer, s.ring.byteOffset, s.ring.byteLength));

    const vips = o.map('vip_map');
    const vk = Buffer.alloc(vips.keySize); // vip_definition: address, port (network order), proto
    v4(s.vip).copy(vk);
    vk.writeUInt16BE(s.port, 16);
    vk[18] = 6;
    const vm = Buffer.alloc(vips.valueSize); // vip_meta: flags 0, vip_num
    vm.writeUInt32LE(vipNum, 4);
    vips.update(vk, vm);

    if (s.encapSource) {
      const srcs = o.map('pckt_srcs'); // key V4_SRC_INDEX 0 -> real_definition { dst, ... }
      const v = Buffer.alloc(srcs.valueSize);
      v4(s.encapSource).copy(v);
      srcs.update(u32(0), v);
    }

    const outer = o.map('lru_mapping');
    const cpus = Math.min(possibleCpus(), outer.maxEntries);
    for (let cpu = 0; cpu < cpus; cpu++) {
      const m = BpfMap.create({ name: `katran_lru${cpu}`, type: MapType.lruHash, keySize: 40, valueSize: 16,
        maxEntries: Math.max(1, Math.floor(s.lruSize / cpus)) });
      lrus.push(m);
      outer.setInner(u32(cpu), m);
    }
  } catch (e) {
    for (const m of lrus) m.close();
    o.close();
    throw e;
  }
  const stats = o.map('stats');
  const stat = (i: number) => stats.lookupPerCpuSum(u32(MAX_VIPS + i)) ?? [0n, 0n];
  return {
    prog: o.program('balancer_ingress'),
    counter(name) {
      switch (name) {
        case 'tx': return Number(stat(STATS.tx)[0]);
        case 'pass': return Number(stat(STATS.pass)[0]);
        // VIP packets minus connection-table misses
        case 'ct_hit': { const [all, miss] = stat(STATS.lru); return Number(all! - miss!); }
        // misses of TCP SYNs (new connections)
        case 'ct_miss': return Number(stat(STATS.lruMiss)[0]);
        default: throw new Error(`no Katran counter for '${name}'`);
      }
    },
    close() {
      for (const m of lrus) m.close();
      o.close();
    },
  };
}
