// QUIC server ids in the real maps (lb_quic_servers, pinned beside the other maps): read back from a running data
// plane and from the pins alone (`gitlb plan --live`), each entry holding this node's slot of its real; an entry
// removed, added or changed behind the daemon's back is drift the next converge repairs; a real removed loses its id
// before its slot is freed; an execute that fails half way leaves the map as it was; and an entry whose slot no
// longer names its real (stale) is not trusted by xdp_lb. No interface: packets stop at the next-hop lookup, after
// the choice of the real, which the per-real counters show.
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { openLbDataPlane, readPinnedLbLive, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { QUIC_MAPS, decodeQuicServer, encodeQuicServer, encodeQuicServerKey, encodeU32, realSlotOf } from '../../src/bpf/dataplane/codec.js';
import { desiredQuicServers } from '../../src/render/ops.js';
import { describeOp } from '../../src/render/ops-text.js';
import { makeState } from '../lib/lb-state.js';
import { applyTo, planOf } from '../lib/converge.js';
import { runMoved } from '../lib/xdp-run-moved.js';
import { frame, ipPacket } from '../lib/packets.js';
import { cidWithServerId, quicShort } from '../lib/quic.js';

const ROOT = `/sys/fs/bpf/glb${process.pid}-quiclive`;
const VIP = '203.0.113.50';
const REALS: Record<number, string> = { 1: '198.51.100.21', 2: '198.51.100.22', 3: '198.51.100.23' };
const ring = (id: number) => Array.from({ length: 7 }, () => id);
const state = (ids: Record<number, number>, reals: number[] = [1, 2, 3]) => makeState({
  reals: Object.fromEntries(reals.map((r) => [r, REALS[r]!])),
  services: [{ id: 9, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: 443, protocol: 'UDP' }], ring: ring(1), quic: ids }],
});
const packet = (serverId: number) => frame({ dst: '02:00:00:00:0a:01', src: '02:00:00:00:00:c1' },
  ipPacket({ src: '192.0.2.9', dst: VIP, l4: { udp: { sport: 40000, dport: 443, payload: quicShort(cidWithServerId(1, serverId)) } } }));
const realsMoved = (moved: Record<string, number>) => Object.keys(moved).filter((k) => k.startsWith('real:'));

test.before(() => rmSync(ROOT, { recursive: true, force: true }));
test.after.always(() => rmSync(ROOT, { recursive: true, force: true }));

test('QUIC server ids: read back with their slots, drift repaired, removal order, rollback, stale entries ignored', async (t) => {
  const dp: LbDataPlaneHandle = await openLbDataPlane({ pinRoot: ROOT });
  const map = () => dp.object()!.map(QUIC_MAPS.servers);
  const slotOfReal = (id: number) => realSlotOf(dp.object()!.map('lb_reals').lookup(encodeU32(id))!);
  try {
    const first = state({ 101: 2, 202: 3 });
    await applyTo(dp, first);
    const want = desiredQuicServers(first);
    t.deepEqual((await dp.readLive()).quicServers, want, 'read back from the running data plane');
    t.deepEqual(readPinnedLbLive(ROOT).quicServers, want, 'and from the pins alone');
    for (const [k, v] of map().entries()) {
      const e = decodeQuicServer(k, v);
      t.is(e.realSlot, slotOfReal(e.realId), `server id ${e.serverId} holds its real's slot on this node`);
    }
    t.deepEqual(await planOf(dp, first), [], 'converged');
    t.deepEqual(realsMoved(await runMoved(dp, packet(202))), ['real:3'], 'the program routes by it');

    // drift: one entry deleted, one added, one pointed elsewhere, behind the daemon's back
    t.true(map().delete(encodeQuicServerKey(9, 101)));
    map().update(encodeQuicServerKey(9, 999), encodeQuicServer(1, slotOfReal(1)));
    map().update(encodeQuicServerKey(9, 202), encodeQuicServer(1, slotOfReal(1)));
    t.deepEqual((await planOf(dp, first)).map(describeOp).sort(), [
      'delete lb_quic_servers[service 9, server id 999] (real 1)',
      'lb_quic_servers[service 9, server id 101] = real 2',
      'lb_quic_servers[service 9, server id 202] = real 3 (was real 1)',
    ]);
    await applyTo(dp, first);
    t.deepEqual((await dp.readLive()).quicServers, want, 'repaired');

    // real 3 leaves the node: its id goes before its lb_reals entry (and slot) does
    const without3 = state({ 101: 2 }, [1, 2]);
    const ops = await planOf(dp, without3);
    const idGone = ops.findIndex((o) => o.op === 'quic-server.delete' && o.entry.serverId === 202);
    const realGone = ops.findIndex((o) => o.op === 'real.delete' && o.real.id === 3);
    t.true(idGone >= 0 && realGone > idGone, ops.map(describeOp).join('\n'));
    await applyTo(dp, without3);
    t.deepEqual(readPinnedLbLive(ROOT).quicServers, desiredQuicServers(without3));

    // an execute that fails half way leaves the map as it was
    const before = map().entries().map(([k, v]) => k.toString('hex') + v.toString('hex')).sort();
    await t.throwsAsync(dp.execute([
      { op: 'quic-server.put', entry: { serviceId: 9, serverId: 303, realId: 1 }, before: null },
      { op: 'quic-server.put', entry: { serviceId: 9, serverId: 101, realId: 1 }, before: { serviceId: 9, serverId: 101, realId: 2 } },
      { op: 'quic-server.delete', entry: { serviceId: 9, serverId: 101, realId: 1 } },
      { op: 'bogus' } as never]));
    t.deepEqual(map().entries().map(([k, v]) => k.toString('hex') + v.toString('hex')).sort(), before, 'every write undone');
    // an id naming a real the node does not hold is refused, naming it, before anything is written
    await t.throwsAsync(dp.execute([{ op: 'quic-server.put', entry: { serviceId: 9, serverId: 404, realId: 3 }, before: null }]),
      { message: /quic-server\.put of service 9 server id 404: real 3 has no slot on this node/ });

    // a stale entry (its slot names another real now) is not trusted: the packet goes by the table (real 1)
    map().update(encodeQuicServerKey(9, 505), encodeQuicServer(3, slotOfReal(2)));
    const moved = await runMoved(dp, packet(505));
    t.deepEqual(realsMoved(moved), ['real:1']);
    t.is(moved.quic_unknown_id, 1);
    // benign: the same slot with its own real id routes
    map().update(encodeQuicServerKey(9, 505), encodeQuicServer(2, slotOfReal(2)));
    t.deepEqual(realsMoved(await runMoved(dp, packet(505))), ['real:2']);
  } finally {
    dp.close();
  }
});
