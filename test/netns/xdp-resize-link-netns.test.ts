// A connection-table resize on an attached lb data plane swaps xdp_lb inside its pinned XDP link (the link stays,
// its program changes) while traffic flows, and the flow that was established before keeps its real. A client
// namespace sends UDP (one flow: one socket) to a VIP through a veth into the lb namespace; the lb's data plane
// (generic XDP, started as a daemon start does it, test/lib/resize-runner.ts) first grows its tables, then, in a
// second start, its ring is changed to pick another real. Packets that found no program reach the lb's stack and
// are counted by an nftables netdev ingress rule; xdp_lb counts per real. If the flow's entry had not been copied
// into the new table, the ring change would have sent it to real 2. Real namespaces, veth, programs and maps.
import test from 'ava';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { cleanupRun, deleteNetns, exec, nsArgv, nsName } from '../../src/lab/netns.js';
import { readLbStats } from '../../src/bpf/dataplane/pinned-stats.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { VIP, PORT, passedToStack as stackCount, setupVipVethLab, withUdpTraffic } from '../lib/vip-veth-lab.js';

const NS_C = nsName('rszc');
const NS_L = nsName('rszl');
const PIN = `/sys/fs/bpf/glb${process.pid}-rszlink`;
const RUNNER = fileURLToPath(new URL('../lib/resize-runner.ts', import.meta.url));
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12' };
const state = (real: number, conntrackMaxEntries: number) => ({ ...makeState({ reals: REALS, conntrackMaxEntries,
  services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: PORT, protocol: 'UDP' }], ring: Array(7).fill(real) }] }), interface: 'l0' });


interface Link { linkId: number; progId: number; mode: string }
interface Start { opened: Link | null; applied: Link; program: number; programMap: number; conntrack: { max: number; id: number };
  ops: string[]; mapWrites: number; resized: Record<string, { copied: number; size: number }> | null }

test.before(() => setupVipVethLab(NS_C, NS_L, 'glbrsz'));

test.after.always(async () => {
  await cleanupRun();
  await deleteNetns(NS_C);
  await deleteNetns(NS_L);
  rmSync(PIN, { recursive: true, force: true });
});

async function start(s: ReturnType<typeof state>): Promise<Start> {
  const r = await exec(nsArgv(NS_L, [process.execPath, '--import', 'tsx', RUNNER, PIN, 'l0']),
    { input: JSON.stringify(stateToJson(s)), timeoutMs: 90_000 });
  if (r.code !== 0) throw new Error(`resize-runner exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as Start;
}

const passedToStack = () => stackCount(NS_L, 'glbrsz');

const realPackets = (id: number): number => readLbStats(PIN)?.reals.get(id)?.packets ?? 0;

/** Sends to the VIP from the client namespace while `during` runs; resolves with the count sent. */
const withTraffic = <T>(during: () => Promise<T>) => withUdpTraffic(NS_C, 200_000, during);

test('a resize swaps the program inside the pinned link under traffic; the established flow keeps its real', async (t) => {
  t.timeout(300_000);
  const first = await start(state(1, 1024));
  t.is(first.opened, null);
  t.is(first.conntrack.max, 1024);
  const passed0 = await passedToStack();
  const { sent, result: [grown, moved] } = await withTraffic(async () => [await start(state(1, 65536)), await start(state(2, 65536))] as const);
  t.deepEqual(grown.ops, ['table.resize', 'table.resize', 'table.resize', 'table.resize']);
  t.is(grown.applied.linkId, grown.opened!.linkId, 'the same link');
  t.not(grown.applied.progId, grown.opened!.progId, 'a new program in it');
  t.is(grown.applied.progId, grown.program, 'the program the data plane holds, the one using the new table');
  t.is(grown.programMap, grown.conntrack.id, 'that program uses the pinned table');
  t.is(grown.conntrack.max, 65536);
  t.not(grown.conntrack.id, first.conntrack.id);
  t.is(grown.resized!.lb_conntrack!.copied, 1, 'the one flow was in the table and copied');
  t.true(moved.ops.includes('service.switch') && !moved.ops.includes('table.resize'));
  const passed = (await passedToStack()) - passed0;
  const r1 = realPackets(1);
  const r2 = realPackets(2);
  t.log(`${sent} datagrams during a resize 1024 -> 65536 and a ring change: real 1 ${r1}, real 2 ${r2}, ${passed} reached the stack`);
  t.is(passed, 0, 'no packet found the interface without xdp_lb');
  t.is(r1, sent, 'every datagram handled by xdp_lb went to the flow\'s real');
  t.is(r2, 0, 'the ring change moved no packet of the established flow: its entry was copied into the new table');
});
