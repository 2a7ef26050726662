// Session affinity in the data path (docs/datapath.md "Session affinity"), with the real xdp_lb through
// BPF_PROG_TEST_RUN (no interface: packets stop at the next-hop lookup, after the ring, the connection table,
// lb_affinity and the per-real counters this reads). Rings are hand-made so every case is constructed, not
// hoped for: the source ports are chosen so the ring sends the client's next connection elsewhere.
//   - a client's second connection (another source port) reaches the real of its first after a real was added,
//     while the same ports on a service without affinity follow the new ring
//   - the timeout counts from the last new connection: 59 s later still the same real, 61 s later the ring picks
//   - a real that leaves the service's table (still a real of the node, so its slot stays valid) is not reused:
//     the next connection goes to a current real, and that one is remembered; a real deleted from the node too
//   - a service without affinity and the connection-table hit path never touch lb_affinity
//   - SNAT listeners keep the client's real the same way (the SNAT path's pick)
//   - tables sized and resized with the connection table; rings of an older version (no bitmap) rebuilt at load
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { AFFINITY_MAPS, encodeU32, decodeAffinityKey, decodeAffinityValue, encodeAffinityKey, encodeAffinityValue } from '../../src/bpf/dataplane/codec.js';
import { ringSlot } from '../../src/bpf/dataplane/flow-hash.js';
import { makeState, type SvcSpec } from '../lib/lb-state.js';
import { runMoved } from '../lib/xdp-run-moved.js';
import { TCP_FLAGS, frame, ipPacket } from '../lib/packets.js';
import type { DesiredState } from '../../src/render/state.js';
import { applyTo, planOf } from '../lib/converge.js';
import { readRing, readRingMembership, ringIdentities, ringMembership } from '../../src/bpf/dataplane/rings.js';
import { pinWordSlotRings } from '../lib/old-rings.js';

const PIN = `/sys/fs/bpf/glb${process.pid}-xaff`;
const SEED = 11;
const VIP = '203.0.113.40';
const CLIENT = '192.0.2.9';
const SNAT_ADDR = '198.51.100.250';
const ADDR: Record<number, string> = { 7: '198.51.100.31', 42: '198.51.100.32', 101: '198.51.100.33', 555: '198.51.100.34' };
const TIMEOUT_S = 60;
/** Service 1: affinity, port 80 (dsr-l2). Service 2: none, port 81. Service 3: affinity, SNAT, port 82. */
const AFF = 1;
const PLAIN = 2;
const SNAT = 3;
const PORT: Record<number, number> = { [AFF]: 80, [PLAIN]: 81, [SNAT]: 82 };

/** A 31-entry ring interleaving `ids`. */
const ring = (ids: number[]) => Array.from({ length: 31 }, (_, i) => ids[i % ids.length]!);

function state(rings: Record<number, number[]>, opts: { timeout?: number; conntrack?: number } = {}): DesiredState {
  const services: SvcSpec[] = [
    { id: AFF, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: PORT[AFF]!, protocol: 'TCP' }], ring: ring(rings[AFF]!), affinityTimeoutS: opts.timeout ?? TIMEOUT_S },
    { id: PLAIN, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: PORT[PLAIN]!, protocol: 'TCP' }], ring: ring(rings[PLAIN]!) },
    { id: SNAT, vip: VIP, forwarding: 'snat', ports: [{ port: PORT[SNAT]!, protocol: 'TCP' }], ring: ring(rings[SNAT]!), affinityTimeoutS: opts.timeout ?? TIMEOUT_S },
  ];
  const ids = new Set(Object.values(rings).flat());
  return { ...makeState({ reals: Object.fromEntries([...ids].map((id) => [id, ADDR[id]!])), hashSeed: SEED, services,
    conntrackMaxEntries: opts.conntrack ?? 4096 }), snatAddress: SNAT_ADDR };
}

const packet = (sport: number, dport: number, flags: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: CLIENT, dst: VIP, l4: { tcp: { sport, dport, flags } } }));
/** The real id `ids`' ring gives a new flow from `sport` to `dport` (flow-hash.ts is the program's reference). */
const ringGives = (ids: number[], sport: number, dport: number) =>
  ring(ids)[ringSlot({ src: CLIENT, dst: VIP, sport, dport, proto: 6 }, true, SEED, 31)]!;
/** A source port not yet used whose new flow `ids`' ring sends to a real `ok` accepts. */
let nextPort = 40000;
function portWhere(ids: number[], dport: number, ok: (real: number) => boolean): number {
  for (let p = nextPort; p < nextPort + 2000; p++) if (ok(ringGives(ids, p, dport))) { nextPort = p + 1; return p; }
  throw new Error('no such port');
}

let dp: LbDataPlaneHandle | null = null;
test.before(() => rmSync(PIN, { recursive: true, force: true }));
test.after.always(() => {
  dp?.close();
  rmSync(PIN, { recursive: true, force: true });
});

const syn = (sport: number, dport: number) => runMoved(dp!, packet(sport, dport, TCP_FLAGS.SYN));
const realsOf = (moved: Record<string, number>) => Object.keys(moved).filter((k) => k.startsWith('real:'));
const affinityOf = (moved: Record<string, number>) =>
  Object.fromEntries(Object.entries(moved).filter(([k]) => k.startsWith('affinity_')));
const affinityTable = () => dp!.object()!.map(AFFINITY_MAPS.table);
/** The remembered entry of CLIENT for a service. */
const remembered = (serviceId: number) => {
  const v = affinityTable().lookup(encodeAffinityKey({ client: CLIENT, family: 4, serviceId }));
  return v ? decodeAffinityValue(Buffer.from(v)) : null;
};
/** Ages CLIENT's entry for a service to `ageS` seconds (CLOCK_MONOTONIC, the clock of bpf_ktime_get_coarse_ns). */
function age(serviceId: number, ageS: number): void {
  const v = remembered(serviceId)!;
  affinityTable().update(encodeAffinityKey({ client: CLIENT, family: 4, serviceId }),
    encodeAffinityValue({ ...v, lastNs: process.hrtime.bigint() - BigInt(ageS) * 1_000_000_000n }));
}

const TWO = [7, 42];
const THREE = [7, 42, 101];

test.serial('a client keeps its real across a real added; without affinity the same ports follow the new ring', async (t) => {
  dp = await openLbDataPlane({ pinRoot: PIN });
  await applyTo(dp, state({ [AFF]: TWO, [PLAIN]: TWO, [SNAT]: TWO }));
  t.is(affinityTable().maxEntries, 4096, 'sized like the connection table');

  // first connection on each: the ring picks; on the affinity service the pick is remembered
  const first = portWhere(TWO, PORT[AFF]!, () => true);
  const x = ringGives(TWO, first, PORT[AFF]!);
  let moved = await syn(first, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${x}`]);
  t.deepEqual(affinityOf(moved), { affinity_miss: 1 });
  t.is(remembered(AFF)!.realId, x);
  const plainFirst = portWhere(TWO, PORT[PLAIN]!, () => true);
  const px = ringGives(TWO, plainFirst, PORT[PLAIN]!);
  moved = await syn(plainFirst, PORT[PLAIN]!);
  t.deepEqual(realsOf(moved), [`real:${px}`]);
  t.deepEqual(affinityOf(moved), {}, 'a service without affinity never reads lb_affinity');

  // its established packets hit the connection table and never read lb_affinity
  moved = await runMoved(dp, packet(first, PORT[AFF]!, TCP_FLAGS.ACK));
  t.is(moved.ct_hit, 1);
  t.deepEqual(affinityOf(moved), {});

  // a real is added; the second connections come from ports the new ring sends elsewhere
  await applyTo(dp, state({ [AFF]: THREE, [PLAIN]: THREE, [SNAT]: TWO }));
  const second = portWhere(THREE, PORT[AFF]!, (r) => r !== x);
  moved = await syn(second, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${x}`], 'the second connection reaches the real of the first');
  t.deepEqual(affinityOf(moved), { affinity_hit: 1 });

  const plainSecond = portWhere(THREE, PORT[PLAIN]!, (r) => r !== px);
  const py = ringGives(THREE, plainSecond, PORT[PLAIN]!);
  moved = await syn(plainSecond, PORT[PLAIN]!);
  t.deepEqual(realsOf(moved), [`real:${py}`], 'without affinity the second connection follows the new ring');
  t.not(py, px);
  t.deepEqual(affinityOf(moved), {});
  t.is(remembered(PLAIN), null);
});

test.serial('the timeout counts from the last new connection: 59 s later the same real, 61 s later the ring picks', async (t) => {
  const x = remembered(AFF)!.realId;
  age(AFF, TIMEOUT_S - 1);
  let port = portWhere(THREE, PORT[AFF]!, (r) => r !== x);
  let moved = await syn(port, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${x}`]);
  t.deepEqual(affinityOf(moved), { affinity_hit: 1 });
  const refreshed = Number((process.hrtime.bigint() - remembered(AFF)!.lastNs) / 1_000_000_000n);
  t.true(refreshed < 5, `a hit refreshes the entry (${refreshed} s old)`);

  age(AFF, TIMEOUT_S + 1);
  port = portWhere(THREE, PORT[AFF]!, (r) => r !== x);
  const y = ringGives(THREE, port, PORT[AFF]!);
  moved = await syn(port, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${y}`], 'balanced anew');
  t.deepEqual(affinityOf(moved), { affinity_expired: 1 });
  t.is(remembered(AFF)!.realId, y, 'the new pick is remembered');
});

test.serial('a real that leaves the table is never reused: the next connection goes to a current real', async (t) => {
  const x = remembered(AFF)!.realId;
  const rest = THREE.filter((r) => r !== x);
  // x leaves service 1's table but stays a real of the node (service 2 still names it): its slot stays valid, only
  // the ring's membership bitmap knows it is gone
  await applyTo(dp!, state({ [AFF]: rest, [PLAIN]: THREE, [SNAT]: TWO }));
  let port = portWhere(rest, PORT[AFF]!, () => true);
  let moved = await syn(port, PORT[AFF]!);
  const y = ringGives(rest, port, PORT[AFF]!);
  t.not(y, x);
  t.deepEqual(realsOf(moved), [`real:${y}`]);
  t.deepEqual(affinityOf(moved), { affinity_real_gone: 1 });
  t.is(remembered(AFF)!.realId, y);

  // a later connection keeps the new real
  port = portWhere(rest, PORT[AFF]!, (r) => r !== y);
  moved = await syn(port, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${y}`]);
  t.deepEqual(affinityOf(moved), { affinity_hit: 1 });

  // y is deleted from the node altogether (its slot freed): not reused either
  const last = rest.filter((r) => r !== y);
  await applyTo(dp!, state({ [AFF]: last, [PLAIN]: last, [SNAT]: last }));
  port = portWhere(last, PORT[AFF]!, () => true);
  moved = await syn(port, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${last[0]}`]);
  t.deepEqual(affinityOf(moved), { affinity_real_gone: 1 });
});

test.serial('SNAT listeners keep the client real the same way', async (t) => {
  await applyTo(dp!, state({ [AFF]: TWO, [PLAIN]: TWO, [SNAT]: TWO }));
  const first = portWhere(TWO, PORT[SNAT]!, () => true);
  const x = ringGives(TWO, first, PORT[SNAT]!);
  let moved = await syn(first, PORT[SNAT]!);
  t.is(moved.snat_new, 1, JSON.stringify(moved));
  t.deepEqual(realsOf(moved), [`real:${x}`]);
  t.deepEqual(affinityOf(moved), { affinity_miss: 1 });

  await applyTo(dp!, state({ [AFF]: TWO, [PLAIN]: TWO, [SNAT]: THREE }));
  const second = portWhere(THREE, PORT[SNAT]!, (r) => r !== x);
  moved = await syn(second, PORT[SNAT]!);
  t.deepEqual(realsOf(moved), [`real:${x}`]);
  t.deepEqual(affinityOf(moved), { affinity_hit: 1 });
  const keys = affinityTable().entries().map(([k]) => decodeAffinityKey(Buffer.from(k)));
  t.true(keys.some((k) => k.serviceId === SNAT && k.client === CLIENT), 'one entry per client and service');
});

test.serial('turning affinity off is a listener rewrite: new connections follow the ring at once', async (t) => {
  const on = state({ [AFF]: THREE, [PLAIN]: THREE, [SNAT]: THREE });
  await applyTo(dp!, on);
  const x = ringGives(THREE, portWhere(THREE, PORT[AFF]!, () => true), PORT[AFF]!);
  await syn(nextPort - 1, PORT[AFF]!);
  t.is(remembered(AFF)!.realId, x);
  const off = { ...on, vips: on.vips.map(({ affinityTimeoutS: _a, ...v }) => v),
    services: on.services.map(({ sessionAffinity: _s, ...s }) => s) };
  await applyTo(dp!, off);
  const port = portWhere(THREE, PORT[AFF]!, (r) => r !== x);
  const moved = await syn(port, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${ringGives(THREE, port, PORT[AFF]!)}`]);
  t.deepEqual(affinityOf(moved), {});
});

test.serial('lb_affinity is resized with the connection table, its entries kept', async (t) => {
  const d = state({ [AFF]: THREE, [PLAIN]: THREE, [SNAT]: THREE });
  await applyTo(dp!, d);
  await syn(portWhere(THREE, PORT[AFF]!, () => true), PORT[AFF]!);
  const before = affinityTable().entries().length;
  t.true(before > 0);
  await applyTo(dp!, state({ [AFF]: THREE, [PLAIN]: THREE, [SNAT]: THREE }, { conntrack: 8192 }));
  t.is(affinityTable().maxEntries, 8192);
  t.is(affinityTable().entries().length, before);
});

test.serial('rings pinned by a version without membership bitmaps are rebuilt with one at load, digests unchanged', async (t) => {
  const d = state({ [AFF]: THREE, [PLAIN]: THREE, [SNAT]: THREE });
  await applyTo(dp!, d);
  await syn(portWhere(THREE, PORT[AFF]!, () => true), PORT[AFF]!);
  // put back every ring as the older version wrote it: one word per element, 1 + M words, no bitmap after them
  const rings = dp!.object()!.map('lb_rings');
  const held = ringIdentities(rings).map(([id]) => {
    const inner = rings.openInner(encodeU32(id))!;
    try { return { id, ring: readRing(inner) }; } finally { inner.close(); }
  });
  const entries = held.find((r) => r.id === AFF)!.ring;
  dp!.close();
  pinWordSlotRings(PIN, held, { membership: false });
  dp = await openLbDataPlane({ pinRoot: PIN });
  const rebuilt = dp.object()!.map('lb_rings').openInner(encodeU32(AFF))!;
  // the bitmap of exactly the ring's reals, then the zero padding of the last block
  const want = [...ringMembership(Uint32Array.from(entries))];
  const got = [...readRingMembership(rebuilt)];
  t.true(want.length > 0);
  t.deepEqual(got.slice(0, want.length), want, 'the ring has its bitmap again');
  t.true(got.slice(want.length).every((w) => w === 0), 'and nothing after it');
  t.deepEqual([...readRing(rebuilt)], [...entries]);
  rebuilt.close();
  t.deepEqual(await planOf(dp, d), [], 'same rings, nothing to re-apply');
  const y = remembered(AFF)!.realId;
  const port = portWhere(THREE, PORT[AFF]!, (r) => r !== y);
  const moved = await syn(port, PORT[AFF]!);
  t.deepEqual(realsOf(moved), [`real:${y}`]);
  t.deepEqual(affinityOf(moved), { affinity_hit: 1 });
});
