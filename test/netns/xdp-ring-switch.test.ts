// A ring switch is atomic for the packet path: while this process switches a service back and forth between two
// rings of different sizes (13 and 17 entries: each switch one lb_rings update), another process sends SYNs
// through xdp_lb (BPF_PROG_TEST_RUN, in a network namespace with only loopback). Every flow must get the real that ring A
// or ring B gives its hash; the entries of one ring read with the size of the other (a half-switched table)
// would give a real neither does. Real kernel maps and program.
import test from 'ava';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { flowHash } from '../../src/bpf/dataplane/flow-hash.js';
import { createNetns, deleteNetns, nsName } from '../../src/lab/netns.js';
import { makeState } from '../lib/lb-state.js';
import { applyTo } from '../lib/converge.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-ringsw`;
const NS = nsName('ringsw');
const SRC = '192.0.2.1';
const VIP = '203.0.113.10';
const SPORT0 = 20000;
const COUNT = 3000;
const SEED = 11;
// ring A: slot i -> real 100 + i (13 slots); ring B: slot i -> real 200 + i (17 slots)
const ringA = Array.from({ length: 13 }, (_, i) => 100 + i);
const ringB = Array.from({ length: 17 }, (_, i) => 200 + i);
const reals: Record<number, string> = {};
for (const id of [...ringA, ...ringB]) reals[id] = `198.51.100.${id - 50}`;
const state = (ring: number[]) => makeState({ reals, hashSeed: SEED, services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ring }] });

test.after.always(async () => {
  await deleteNetns(NS);
  rmSync(PIN, { recursive: true, force: true });
});

test('traffic during ring switches only ever sees a whole table', async (t) => {
  t.timeout(90_000);
  await createNetns(NS);
  const dp = await openLbDataPlane({ pinRoot: PIN });
  try {
    await applyTo(dp, state(ringA));
    // nsenter switches only the network namespace (ip netns exec would remount /sys and hide our bpffs pins)
    const child = spawn('nsenter', [`--net=/run/netns/${NS}`, process.execPath, '--import=tsx', 'test/lib/ring-switch-traffic.ts',
      PIN, String(COUNT), SRC, VIP, String(SPORT0)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? -1)));
    let done = false;
    void exited.then(() => (done = true));
    let switches = 0;
    for (let i = 0; !done && i < 20_000; i++) {
      const r = await applyTo(dp, state(i % 2 ? ringA : ringB));
      switches += r.ringSwitches;
      await new Promise((resolve) => setImmediate(resolve)); // let the child's output and exit be seen
    }
    t.is(await exited, 0, stderr);
    const flows = JSON.parse(stdout) as Array<[number, number]>;
    t.is(flows.length, COUNT);
    let fromA = 0;
    let fromB = 0;
    // Flows whose real differs between the rings tell which table the packet met: both must occur, or the race
    // between switching and traffic was never exercised.
    let onlyA = 0;
    let onlyB = 0;
    for (const [sport, real] of flows) {
      const h = flowHash({ src: SRC, dst: VIP, sport, dport: 80, proto: 6 }, true, SEED);
      const a = ringA[h % ringA.length]!;
      const b = ringB[h % ringB.length]!;
      if (real === a) { fromA++; if (a !== b) onlyA++; }
      else if (real === b) { fromB++; onlyB++; }
      else t.fail(`sport ${sport}: real ${real}, ring A gives ${a}, ring B gives ${b}`);
    }
    t.log(`${switches} ring switches during ${COUNT} SYNs: ${fromA} from ring A, ${fromB} from ring B; ` +
      `${onlyA} only ring A could give, ${onlyB} only ring B could give`);
    t.true(switches > 0);
    t.true(onlyA > 0 && onlyB > 0, 'traffic met both rings');
    t.is(fromA + fromB, COUNT);
  } finally {
    dp.close();
  }
});
