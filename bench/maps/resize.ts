// What a connection-table resize costs on a running lb data plane (src/bpf/dataplane/resize.ts, docs/datapath.md
// "Resizing tables"): lb_conntrack (and the SNAT tables sized with it) from FROM to TO entries with FLOWS live
// flows, through the real apply path (plan -> table.resize ops -> execute). Per round: a fresh pinned data plane of
// FROM entries, FLOWS entries written into lb_conntrack, then the timed execute, with its phases (new maps,
// program load, copy + swap, re-pin + wait for programs, merge), and a check that every flow is in the new table.
// The connection table gives each possible CPU its own share (BPF_F_NO_COMMON_LRU): 60,000 flows do not fit one
// CPU's share of 65,536 on a 2-CPU machine, so the flows are written by one short child per CPU (`taskset -c k`),
// as traffic on every CPU would. No interface: the swap of a pinned link is one more syscall (bpf_link_update).
//   taskset -c 0 node --import tsx bench/maps/resize.ts [FROM TO FLOWS ROUNDS]
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { encodeFlowKey } from '../../src/bpf/dataplane/codec.js';
import { BpfMap, possibleCpus } from '../../src/bpf/libbpf.js';
import { makeState } from '../../test/lib/lb-state.js';
import { applyTo, planOf } from '../../test/lib/converge.js';

const VIP = '203.0.113.10';

/** Child mode: writes flows [start, start + count) into the pinned lb_conntrack from this CPU. */
function fill(pinRoot: string, start: number, count: number): void {
  const m = BpfMap.open(join(pinRoot, 'lb_conntrack'));
  try {
    const keys = Buffer.alloc(count * m.keySize);
    const values = Buffer.alloc(count * m.valueBufferSize);
    for (let i = 0; i < count; i++) {
      const n = start + i;
      encodeFlowKey({ src: `192.0.2.${1 + (n % 250)}`, dst: VIP, sport: 1024 + Math.floor(n / 250), dport: 80, proto: 6, family: 4 })
        .copy(keys, i * m.keySize);
      values.writeUInt32LE(1, i * m.valueBufferSize); // real 1, service 1, slot 0: what xdp_lb writes for it
      values.writeUInt32LE(1, i * m.valueBufferSize + 4);
    }
    m.updateBatch(keys, values, count);
  } finally {
    m.close();
  }
}

const count = (pinRoot: string) => {
  const m = BpfMap.open(join(pinRoot, 'lb_conntrack'));
  try {
    return { entries: m.lookupBatch(4096).count, max: m.maxEntries };
  } finally {
    m.close();
  }
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const [FROM, TO, FLOWS, ROUNDS] = [65536, 1048576, 60000, 3].map((d, i) => Number(process.argv[2 + i] ?? d)) as [number, number, number, number];
  const state = (n: number) => makeState({ reals: { 1: '198.51.100.11' }, conntrackMaxEntries: n,
    services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring: Array(7).fill(1) }] });
  const cpus = possibleCpus();
  const self = fileURLToPath(import.meta.url);
  console.log(`lb_conntrack ${FROM} -> ${TO} entries (lb_snat_fwd, lb_snat_rev, lb_affinity too, empty), ${FLOWS} flows, ` +
    `${cpus} possible CPUs, ${ROUNDS} rounds`);
  const totals: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const pin = `/sys/fs/bpf/glb${process.pid}-bresize`;
    rmSync(pin, { recursive: true, force: true });
    const dp = await openLbDataPlane({ pinRoot: pin });
    try {
      await applyTo(dp, state(FROM));
      const per = Math.ceil(FLOWS / cpus);
      for (let c = 0; c < cpus; c++) {
        const n = Math.min(per, FLOWS - c * per);
        if (n > 0) execFileSync('taskset', ['-c', String(c), process.execPath, '--import', 'tsx', self, 'fill', pin, String(c * per), String(n)]);
      }
      const before = count(pin);
      if (before.entries !== FLOWS) throw new Error(`${before.entries} flows in the table, wanted ${FLOWS}`);
      const ops = await planOf(dp, state(TO));
      const t0 = performance.now();
      await dp.execute(ops);
      const ms = performance.now() - t0;
      const after = count(pin);
      if (after.max !== TO || after.entries !== FLOWS) throw new Error(`after: ${JSON.stringify(after)}`);
      const p = dp.resizeMs!;
      totals.push(ms);
      console.log(`round ${r + 1}: execute ${ms.toFixed(1)} ms = new maps ${p.create.toFixed(1)}, program load ${p.load.toFixed(1)}, ` +
        `copy + swap ${p.copyAndSwap.toFixed(1)}, re-pin + wait for programs ${p.wait.toFixed(1)}, merge ${p.merge.toFixed(1)}; ` +
        `${dp.resized!.lb_conntrack!.copied} copied, ${after.entries} in the new table`);
    } finally {
      dp.close();
      rmSync(pin, { recursive: true, force: true });
    }
  }
  console.log(`median execute of the resize: ${median(totals).toFixed(1)} ms (range ${Math.min(...totals).toFixed(1)}-${Math.max(...totals).toFixed(1)})`);
}

if (process.argv[2] === 'fill') fill(process.argv[3]!, Number(process.argv[4]), Number(process.argv[5]));
else await main();
