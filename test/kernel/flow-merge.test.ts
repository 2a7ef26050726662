// A peer's entry written over one this node holds (src/bpf/dataplane/flow-merge.ts, used by importFlows): the import
// judges from its read of the entry, and xdp_lb may write the entry before the import's write (a refresh, a FIN, a
// SYN's new choice). The write is merged into the entry as re-read right before it, so the data path's change wins.
// Real pinned maps of the LB object; the data path's write is a map write, as lb_snat_touch / xdp_lb's hit and SYN
// paths would make it, made between the import's read (`judged`) and its write.
import test from 'ava';
import { decodeFlowValue, encodeFlowKey, encodeFlowValue, type FlowValue } from '../../src/bpf/dataplane/codec.js';
import { SNAT_MAPS, SNAT_STATE, decodeSnatRev, encodeSnatFwd, encodeSnatRev, encodeSnatRevKey, type SnatRev } from '../../src/bpf/dataplane/snat.js';
import { mergeHeldTranslation, replaceHeldFlow, restoreForward } from '../../src/bpf/dataplane/flow-merge.js';
import { SNAT_REAL, SNAT_VIP, withSnatDataPlane } from '../lib/snat-dataplane.js';

const VIP = SNAT_VIP;
const REAL = SNAT_REAL;
const S = 1_000_000_000n;
const dp = withSnatDataPlane('flowmerge');

/** A peer's copy (owner 1) of a translation of client port `cport`, open, last seen at `lastSeenNs`: its key and value as written. */
function copy(cport: number, lastSeenNs: bigint): { rk: Buffer; rev: SnatRev; judged: Buffer } {
  const rk = encodeSnatRevKey({ real: REAL, realPort: 8080, snatPort: 30000 + cport, proto: 6, family: 4 });
  const rev: SnatRev = { client: '192.0.2.9', vip: VIP, clientPort: cport, vipPort: 80, realId: 7, state: SNAT_STATE.open,
    createdNs: 1n * S, lastSeenNs, owner: 1 };
  const judged = encodeSnatRev(rev);
  dp().object()!.map(SNAT_MAPS.rev).update(rk, judged);
  return { rk, rev, judged };
}
const revOf = (rk: Buffer) => decodeSnatRev(Buffer.from(dp().object()!.map(SNAT_MAPS.rev).lookup(rk)!), 4);

test.serial('a FIN the data path saw after the import\'s read keeps the translation closing, and its later last packet', (t) => {
  const rev = dp().object()!.map(SNAT_MAPS.rev);
  const c = copy(1001, 100n * S);
  // the import read `judged` (open, 100 s); a FIN here then closed it at 300 s; the peer's refresh says open, 200 s
  rev.update(c.rk, encodeSnatRev({ ...c.rev, state: SNAT_STATE.closing, lastSeenNs: 300n * S }));
  t.is(mergeHeldTranslation(rev, c.rk, c.judged, { state: SNAT_STATE.open, lastSeenNs: 200n * S }), 'unchanged');
  t.is(revOf(c.rk).state, SNAT_STATE.closing, 'not reset to open (its port would be held 2 h instead of 10 s)');
  t.is(revOf(c.rk).lastSeenNs, 300n * S, 'last packet not moved back');
});

test.serial('a refresh the data path wrote after the import\'s read is not moved back; the peer\'s closing state still applies', (t) => {
  const rev = dp().object()!.map(SNAT_MAPS.rev);
  const c = copy(1002, 100n * S);
  rev.update(c.rk, encodeSnatRev({ ...c.rev, lastSeenNs: 300n * S })); // a packet here at 300 s
  t.is(mergeHeldTranslation(rev, c.rk, c.judged, { state: SNAT_STATE.closing, lastSeenNs: 200n * S }), 'written');
  t.like(revOf(c.rk), { state: SNAT_STATE.closing, lastSeenNs: 300n * S, createdNs: 1n * S, owner: 1 });
});

test.serial('a translation deleted or replaced after the import\'s read is left as the data path left it', (t) => {
  const rev = dp().object()!.map(SNAT_MAPS.rev);
  const c = copy(1003, 100n * S);
  rev.delete(c.rk); // its port reclaimed here
  t.is(mergeHeldTranslation(rev, c.rk, c.judged, { state: SNAT_STATE.closing, lastSeenNs: 200n * S }), 'gone');
  t.is(rev.lookup(c.rk), null, 'not brought back by the import');
  const other = encodeSnatRev({ ...c.rev, clientPort: 2003, owner: 0, lastSeenNs: 300n * S }); // another client flow on the port
  rev.update(c.rk, other);
  t.is(mergeHeldTranslation(rev, c.rk, c.judged, { state: SNAT_STATE.closing, lastSeenNs: 200n * S }), 'changed');
  t.deepEqual(rev.lookup(c.rk), other);
});

test.serial('benign: a peer\'s refresh of an entry nobody changed since the read applies (state and later last packet)', (t) => {
  const rev = dp().object()!.map(SNAT_MAPS.rev);
  const c = copy(1004, 100n * S);
  t.is(mergeHeldTranslation(rev, c.rk, c.judged, { state: SNAT_STATE.closing, lastSeenNs: 200n * S }), 'written');
  t.like(revOf(c.rk), { state: SNAT_STATE.closing, lastSeenNs: 200n * S, createdNs: 1n * S, owner: 1 });
  // a reopening SYN at the sender: the peer's open state applies to a copy still closing as read
  const judged = Buffer.from(rev.lookup(c.rk)!);
  t.is(mergeHeldTranslation(rev, c.rk, judged, { state: SNAT_STATE.open, lastSeenNs: 250n * S }), 'written');
  t.like(revOf(c.rk), { state: SNAT_STATE.open, lastSeenNs: 250n * S });
  t.is(mergeHeldTranslation(rev, c.rk, Buffer.from(rev.lookup(c.rk)!), { state: SNAT_STATE.open, lastSeenNs: 250n * S }), 'unchanged', 'a replay');
});

const flowKey = (sport: number) => encodeFlowKey({ src: '192.0.2.9', dst: '203.0.113.60', sport, dport: 80, proto: 6, family: 4 });
const flow = (v: Partial<FlowValue>): Buffer => encodeFlowValue({ realId: 7, serviceId: 3, realSlot: 1, lastSeen: 0, chosenNs: 0n, ...v });

test.serial('a SYN\'s new choice made after the import\'s read stays; the peer\'s older choice is not written', (t) => {
  const ct = dp().object()!.map('lb_conntrack');
  const key = flowKey(41001);
  const judged = flow({ realId: 7, chosenNs: 100n * S, lastSeen: 93 });
  ct.update(key, judged);
  const syn = flow({ realId: 8, realSlot: 2, chosenNs: 300n * S, lastSeen: 279 }); // a SYN here re-read the table
  ct.update(key, syn);
  t.is(replaceHeldFlow(ct, key, judged, flow({ realId: 9, realSlot: 3, chosenNs: 200n * S })), null);
  t.deepEqual(ct.lookup(key), syn);
});

test.serial('benign: a peer\'s newer choice replaces the entry; a hit since the read keeps its last-seen', (t) => {
  const ct = dp().object()!.map('lb_conntrack');
  const key = flowKey(41002);
  const judged = flow({ realId: 7, chosenNs: 100n * S, lastSeen: 93 });
  ct.update(key, judged);
  ct.update(key, flow({ realId: 7, chosenNs: 100n * S, lastSeen: 186 })); // a hit here
  const peer = flow({ realId: 9, realSlot: 3, chosenNs: 200n * S });
  const written = replaceHeldFlow(ct, key, judged, peer);
  t.like(decodeFlowValue(Buffer.from(ct.lookup(key)!)), { realId: 9, realSlot: 3, chosenNs: 200n * S, lastSeen: 186 });
  t.deepEqual(written, Buffer.from(ct.lookup(key)!));
  // evicted meanwhile: inserted as a flow held nothing of
  const gone = flowKey(41003);
  t.truthy(replaceHeldFlow(ct, gone, judged, peer));
  t.like(decodeFlowValue(Buffer.from(ct.lookup(gone)!)), { realId: 9, lastSeen: 0 });
});

const clientFlow = (cport: number) => encodeFlowKey({ src: '192.0.2.9', dst: VIP, sport: cport, dport: 80, proto: 6, family: 4 });

test.serial('a forward entry the data path made for the client flow after the import\'s read stays (absent or other when read)', (t) => {
  const fwd = dp().object()!.map(SNAT_MAPS.fwd);
  const copyWay = encodeSnatFwd({ realId: 7, snatPort: 31005, realPort: 8080 });
  const fk = clientFlow(1005);
  // read: none; then a forward packet of the client got a new translation here (port 20005)
  const fresh = encodeSnatFwd({ realId: 7, snatPort: 20005, realPort: 8080 });
  fwd.update(fk, fresh, 'noexist');
  t.is(restoreForward(fwd, fk, null, copyWay), 'changed');
  t.deepEqual(fwd.lookup(fk), fresh);
  // read: another way; since then changed again
  const newer = encodeSnatFwd({ realId: 7, snatPort: 20006, realPort: 8080 });
  fwd.update(fk, newer);
  t.is(restoreForward(fwd, fk, fresh, copyWay), 'changed');
  t.deepEqual(fwd.lookup(fk), newer);
});

test.serial('benign: a forward entry is restored when absent, replaced while it holds what was read, left when already right', (t) => {
  const fwd = dp().object()!.map(SNAT_MAPS.fwd);
  const copyWay = encodeSnatFwd({ realId: 7, snatPort: 31006, realPort: 8080 });
  const fk = clientFlow(1006);
  t.is(restoreForward(fwd, fk, null, copyWay), 'written');
  t.deepEqual(fwd.lookup(fk), copyWay);
  t.is(restoreForward(fwd, fk, copyWay, copyWay), 'unchanged');
  const other = encodeSnatFwd({ realId: 7, snatPort: 20007, realPort: 8080 });
  fwd.update(fk, other);
  t.is(restoreForward(fwd, fk, other, copyWay), 'written', 'as before: the translation the peer names is the one restored');
  t.deepEqual(fwd.lookup(fk), copyWay);
});
