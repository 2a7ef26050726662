// Deleting a SNAT translation that a packet may refresh at any moment (src/bpf/dataplane/snat.ts
// deleteUnchangedTranslation, used by the sweep and by the flow sync's deletions): the reverse entry is removed and
// read in one call, and when it no longer holds what the caller judged, it is put back and its forward entry kept.
// Real pinned maps of the LB object; the refresh is a map write, as xdp_lb's lb_snat_touch would make it.
import test from 'ava';
import { encodeFlowKey } from '../../src/bpf/dataplane/codec.js';
import {
  SNAT_MAPS, SNAT_STATE, deleteUnchangedTranslation, encodeSnatFwd, encodeSnatRev, encodeSnatRevKey, type SnatRev, type SnatRevKey,
} from '../../src/bpf/dataplane/snat.js';
import { SNAT_REAL, SNAT_VIP, withSnatDataPlane } from '../lib/snat-dataplane.js';

const VIP = SNAT_VIP;
const REAL = SNAT_REAL;
const dp = withSnatDataPlane('snatdel');

/** A translation of client port `cport` (reverse and forward entry) last seen at `lastSeenNs`. */
function translation(cport: number, lastSeenNs: bigint): { key: SnatRevKey; rk: Buffer; fk: Buffer; rev: SnatRev; revBytes: Buffer } {
  const o = dp().object()!;
  const key: SnatRevKey = { real: REAL, realPort: 8080, snatPort: 20000 + cport, proto: 6, family: 4 };
  const rev: SnatRev = { client: '192.0.2.9', vip: VIP, clientPort: cport, vipPort: 80, realId: 7, state: SNAT_STATE.open, createdNs: 1n, lastSeenNs };
  const rk = encodeSnatRevKey(key);
  const fk = encodeFlowKey({ src: rev.client, dst: VIP, sport: cport, dport: 80, proto: 6, family: 4 });
  const revBytes = encodeSnatRev(rev);
  o.map(SNAT_MAPS.rev).update(rk, revBytes);
  o.map(SNAT_MAPS.fwd).update(fk, encodeSnatFwd({ realId: 7, snatPort: key.snatPort, realPort: 8080 }));
  return { key, rk, fk, rev, revBytes };
}

test.serial('a translation refreshed after the caller read it is put back with its refresh, its forward entry kept', (t) => {
  const o = dp().object()!;
  const tr = translation(1001, 5n);
  // the caller judged it from `seen`; a packet then moved last_seen on
  const refreshed = encodeSnatRev({ ...tr.rev, lastSeenNs: 9_000_000_000n });
  o.map(SNAT_MAPS.rev).update(tr.rk, refreshed);
  t.is(deleteUnchangedTranslation(o.map(SNAT_MAPS.rev), o.map(SNAT_MAPS.fwd), tr.rk, tr.key, tr.revBytes), 0);
  t.deepEqual(o.map(SNAT_MAPS.rev).lookup(tr.rk), refreshed, 'the reverse entry is back, as the packet left it');
  t.truthy(o.map(SNAT_MAPS.fwd).lookup(tr.fk), 'the forward entry stays');
  // a state change (FIN seen) counts as a change too
  const closing = encodeSnatRev({ ...tr.rev, lastSeenNs: 9_000_000_000n, state: SNAT_STATE.closing });
  o.map(SNAT_MAPS.rev).update(tr.rk, closing);
  t.is(deleteUnchangedTranslation(o.map(SNAT_MAPS.rev), o.map(SNAT_MAPS.fwd), tr.rk, tr.key, refreshed), 0);
  t.deepEqual(o.map(SNAT_MAPS.rev).lookup(tr.rk), closing);
});

test.serial('benign: a translation still as the caller read it is deleted, reverse and forward entry; one already gone is 0', (t) => {
  const o = dp().object()!;
  const tr = translation(1002, 5n);
  t.is(deleteUnchangedTranslation(o.map(SNAT_MAPS.rev), o.map(SNAT_MAPS.fwd), tr.rk, tr.key, tr.revBytes), 2);
  t.is(o.map(SNAT_MAPS.rev).lookup(tr.rk), null);
  t.is(o.map(SNAT_MAPS.fwd).lookup(tr.fk), null);
  t.is(deleteUnchangedTranslation(o.map(SNAT_MAPS.rev), o.map(SNAT_MAPS.fwd), tr.rk, tr.key, tr.revBytes), 0, 'nothing to delete, nothing put back');
  t.is(o.map(SNAT_MAPS.rev).lookup(tr.rk), null);
});
