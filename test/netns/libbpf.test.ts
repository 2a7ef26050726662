// The libbpf binding against the real kernel: loads build/bpf/selftest.o (make bpf),
// drives its programs with BPF_PROG_TEST_RUN and checks map effects. Attach tests
// run in throwaway network namespaces through a child process (libbpf-attach.child.ts).
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BPF_F_TEST_XDP_LIVE_FRAMES, BpfMap, BpfObject, MapType, TcAction, XdpAction, possibleCpus, type BpfError,
} from '../../src/bpf/libbpf.js';
import { checkBtfLayout, checkMapCodec, defineStruct, packMany, u32, u64 } from '../../src/bpf/codec.js';
import { mountBpffs, unmountBpffs } from '../../src/bpf/bpffs.js';
import { packageRoot } from '../../src/bpf/paths.js';

const flowCodec = defineStruct('selftest_flow', 16, {
  packets: { offset: 0, kind: 'u64' },
  bytes: { offset: 8, kind: 'u32' },
  port: { offset: 12, kind: 'u16' },
  proto: { offset: 14, kind: 'u8' },
  flags: { offset: 15, kind: 'u8' },
});

/** Ethernet + IPv4 header-ish frame: dst MAC 02:..:01, src MAC 02:..:02, ethertype 0x0800. */
function frame(len = 64): Buffer {
  const b = Buffer.alloc(len);
  Buffer.from([2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]).copy(b, 0);
  b.writeUInt16BE(0x0800, 12);
  b.fill(0xab, 14);
  return b;
}

function fdCount(): number {
  return readdirSync('/proc/self/fd').length;
}

async function withObject<T>(fn: (o: BpfObject) => T | Promise<T>, opts = {}): Promise<T> {
  const o = await BpfObject.load('selftest', opts);
  try {
    return await fn(o);
  } finally {
    o.close();
  }
}

function tempBpffs(): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), `glb${process.pid}-bpffs-`));
  mountBpffs(dir);
  return { dir, cleanup() { unmountBpffs(dir); rmSync(dir, { recursive: true, force: true }); } };
}

test.serial('load: maps and programs are described, max_entries override applies before load', async (t) => {
  await withObject((o) => {
    const lru = o.map('lru');
    t.is(lru.type, MapType.lruHash);
    t.is(lru.maxEntries, 4096);
    t.is(lru.keySize, 8);
    t.is(o.map('big').maxEntries, 65537);
    t.is(o.map('flows').btfValueType, 'struct selftest_flow');
    t.true(o.map('pcpu_cnt').perCpu);
    t.is(o.map('pcpu_cnt').valueBufferSize, 8 * possibleCpus());
    t.deepEqual(o.programs().map((p) => p.name).sort(), ['tc_passthru', 'tc_selftest', 'xdp_inner', 'xdp_selftest']);
    t.true(o.program('xdp_selftest').fd > 0);
    t.true(o.program('xdp_selftest').info().id > 0);
    t.is(o.program('xdp_selftest').info().name, 'xdp_selftest');
    t.is(lru.id() > 0, true);
  }, { mapMaxEntries: { lru: 4096 } });
});

test.serial('load: errors carry codes and name the culprit', async (t) => {
  const bad = await t.throwsAsync(BpfObject.load('selftest_bad')) as BpfError;
  t.is(bad.code, 'EACCES');
  t.regex(bad.message, /program 'xdp_unchecked' rejected by the verifier/);
  t.regex(bad.verifierLog ?? '', /invalid access to packet/);
  t.true((bad.verifierLog ?? '').split('\n').length <= 32, 'verifier log is trimmed');
  const missing = await t.throwsAsync(BpfObject.load('/nonexistent/x.o')) as BpfError;
  t.is(missing.code, 'ENOENT');
  const unknownMap = await t.throwsAsync(BpfObject.load('selftest', { mapMaxEntries: { nosuch: 5 } })) as BpfError;
  t.is(unknownMap.code, 'ENOENT');
  t.regex(unknownMap.message, /map 'nosuch' not found/);
  const zero = await t.throwsAsync(BpfObject.load('selftest', { mapMaxEntries: { lru: 0 } })) as BpfError;
  t.is(zero.code, 'EINVAL');
  await withObject((o) => {
    t.is((t.throws(() => o.map('nope')) as BpfError).code, 'ENOENT');
    t.is((t.throws(() => o.program('nope')) as BpfError).code, 'ENOENT');
  });
});

test.serial('load runs off the main thread: timers keep firing during a load', async (t) => {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const loads = await Promise.all([BpfObject.load('selftest'), BpfObject.load('selftest'), BpfObject.load('selftest')]);
  clearInterval(timer);
  for (const o of loads) o.close();
  t.true(ticks > 0, `event loop ran ${ticks} timer callbacks while loading`);
});

test.serial('maps: lookup, update flags, delete, keys, size checks before the syscall', async (t) => {
  await withObject((o) => {
    const flows = o.map('flows');
    const k = u32.encode(7);
    const v = flowCodec.encode({ packets: 5n, bytes: 300, port: 8080, proto: 6, flags: 1 });
    t.is(flows.lookup(k), null);
    flows.update(k, v, 'noexist');
    t.deepEqual(flowCodec.decode(flows.lookup(k)!), { packets: 5n, bytes: 300, port: 8080, proto: 6, flags: 1 });
    t.is((t.throws(() => flows.update(k, v, 'noexist')) as BpfError).code, 'EEXIST');
    t.is((t.throws(() => flows.update(u32.encode(8), v, 'exist')) as BpfError).code, 'ENOENT');
    flows.update(k, flowCodec.encode({ packets: 6n, bytes: 1, port: 1, proto: 17, flags: 0 }), 'exist');
    t.is(flowCodec.decode(flows.lookup(k)!).packets, 6n);
    flows.update(u32.encode(9), v);
    t.deepEqual(flows.keys().map((b) => u32.decode(b)).sort(), [7, 9]);
    t.true(flows.delete(k));
    t.false(flows.delete(k));
    t.deepEqual(flows.keys().map((b) => u32.decode(b)), [9]);
    const out = Buffer.alloc(16);
    t.true(flows.lookupInto(u32.encode(9), out));
    t.false(flows.lookupInto(u32.encode(10), out));

    const wrongKey = t.throws(() => flows.lookup(Buffer.alloc(3))) as BpfError;
    t.is(wrongKey.code, 'EINVAL');
    t.regex(wrongKey.message, /map 'flows': key is 3 bytes, expected 4/);
    t.is((t.throws(() => flows.update(k, Buffer.alloc(15))) as BpfError).code, 'EINVAL');
    t.is((t.throws(() => flows.update(k, v, 'sometimes' as never)) as BpfError).code, 'EINVAL');
    // kernel-side failures keep their errno name and the map name
    const arrDel = t.throws(() => o.map('cfg').delete(u32.encode(0))) as BpfError;
    t.is(arrDel.code, 'EINVAL');
    t.regex(arrDel.message, /map 'cfg'/);
    t.is((t.throws(() => o.map('cfg').update(u32.encode(99), u32.encode(1))) as BpfError).code, 'E2BIG');
    t.is(o.map('cfg').keys().length, 4, 'array keys are every index');
    // LRU hash evicts instead of failing when full
    const lru = o.map('lru');
    for (let i = 0; i < 600; i++) lru.update(u64.encode(i), u64.encode(i * 2));
    const n = lru.keys().length;
    t.true(n <= 600 && n > 0);
  }, { mapMaxEntries: { lru: 256 } });
});

test.serial('maps: closed objects refuse use with EBADF instead of touching a reused fd', async (t) => {
  const o = await BpfObject.load('selftest');
  const cfg = o.map('cfg');
  const prog = o.program('xdp_selftest');
  o.close();
  t.is((t.throws(() => cfg.lookup(u32.encode(0))) as BpfError).code, 'EBADF');
  t.is((t.throws(() => prog.testRun({ data: frame() })) as BpfError).code, 'EBADF');
  o.close(); // idempotent
  t.pass();
});

test.serial('testRun: XDP data in/out, retval, repeat, duration, per-CPU counters', async (t) => {
  await withObject((o) => {
    const cfg = o.map('cfg');
    const xdp = o.program('xdp_selftest');
    cfg.update(u32.encode(0), u32.encode(XdpAction.pass));
    const pass = xdp.testRun({ data: frame(), repeat: 1 });
    t.is(pass.retval, XdpAction.pass);
    t.deepEqual(pass.data, frame(), 'unchanged packet comes back');

    cfg.update(u32.encode(0), u32.encode(XdpAction.tx));
    cfg.update(u32.encode(2), u32.encode(1)); // swap MACs
    const tx = xdp.testRun({ data: frame(), repeat: 1 });
    t.is(tx.retval, XdpAction.tx);
    t.deepEqual([...tx.data.subarray(0, 12)], [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    t.deepEqual(tx.data.subarray(12), frame().subarray(12));

    const before = o.map('pcpu_cnt').lookupPerCpuSum(u32.encode(0))![0]!;
    const many = xdp.testRun({ data: frame(), repeat: 1000 });
    t.true(many.durationNs > 0);
    const after = o.map('pcpu_cnt').lookupPerCpuSum(u32.encode(0))![0]!;
    t.is(after - before, 1000n, 'program ran exactly `repeat` times');
    const perCpu = o.map('pcpu_cnt').lookupPerCpu(u32.encode(0))!;
    t.is(perCpu.length, possibleCpus());
    t.is(perCpu.reduce((s, b) => s + b.readBigUInt64LE(0), 0n), after);

    // per-CPU update replicates a single value to all CPUs
    o.map('pcpu_cnt').update(u32.encode(1), u64.encode(5));
    t.is(o.map('pcpu_cnt').lookupPerCpuSum(u32.encode(1))![0], 5n * BigInt(possibleCpus()));
    t.is((t.throws(() => o.map('flows').lookupPerCpu(u32.encode(0))) as BpfError).code, 'EINVAL');

    // struct value written by the program decodes with the codec
    const f = flowCodec.decode(o.map('flows').lookup(u32.encode(0x0800))!);
    t.is(f.packets, 1002n);
    t.is(f.bytes, 64 * 1002);
    t.is(f.flags, 1);

    // shorter than an Ethernet header: the kernel refuses the run, the error names the program
    const short = t.throws(() => xdp.testRun({ data: Buffer.alloc(10) })) as BpfError;
    t.is(short.code, 'EINVAL');
    t.regex(short.message, /program 'xdp_selftest'/);
  });
});

test.serial('testRun: ctx_in reaches the program (XDP ingress ifindex, TC mark)', async (t) => {
  await withObject((o) => {
    // struct xdp_md { data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex }
    const ctx = Buffer.alloc(24);
    ctx.writeUInt32LE(64, 4); // data_end = packet length
    ctx.writeUInt32LE(1, 12); // ingress_ifindex = lo
    o.map('cfg').update(u32.encode(0), u32.encode(XdpAction.pass));
    o.program('xdp_selftest').testRun({ data: frame(), ctxIn: ctx });
    t.is(u32.decode(o.map('seen').lookup(u32.encode(0))!), 1);

    // struct __sk_buff: mark at offset 8
    const skb = Buffer.alloc(192);
    skb.writeUInt32LE(0x1234, 8);
    o.map('cfg').update(u32.encode(1), u32.encode(TcAction.shot));
    const r = o.program('tc_selftest').testRun({ data: frame(), ctxIn: skb, ctxOutSize: 192 });
    t.is(r.retval, TcAction.shot);
    t.is(u32.decode(o.map('seen').lookup(u32.encode(2))!), 0x1234);
    t.is(r.ctxOut.readUInt32LE(8), 0x1234);
    t.is(o.map('pcpu_cnt').lookupPerCpuSum(u32.encode(1))![0], 1n);
  });
});

test.serial('testRun: BPF_F_TEST_XDP_LIVE_FRAMES runs fresh frames every repetition', async (t) => {
  await withObject((o) => {
    o.map('cfg').update(u32.encode(0), u32.encode(XdpAction.drop)); // live frames: never let them out
    o.map('cfg').update(u32.encode(2), u32.encode(1));
    const r = o.program('xdp_selftest').testRun({ data: frame(), repeat: 200, flags: BPF_F_TEST_XDP_LIVE_FRAMES });
    t.is(r.data.length, 0);
    t.is(o.map('pcpu_cnt').lookupPerCpuSum(u32.encode(0))![0], 200n);
    const err = t.throws(() => o.program('xdp_selftest').testRun({ data: frame(), flags: 1 << 20 })) as BpfError;
    t.is(err.code, 'EINVAL');
    t.regex(err.message, /program 'xdp_selftest'/);
  });
});

test.serial('codecs: BTF layout check passes for the real layout and fails loudly on drift', async (t) => {
  await withObject((o) => {
    checkBtfLayout(o, 'selftest_flow', flowCodec.layout());
    checkMapCodec(o.map('flows'), u32, flowCodec);
    const shifted = t.throws(() => checkBtfLayout(o, 'selftest_flow',
      { size: 16, members: { packets: 0, bytes: 8, port: 14, proto: 12, flags: 15 } })) as BpfError;
    t.is(shifted.code, 'EPROTO');
    t.regex(shifted.message, /member port at offset 12 in C, 14 in TS/);
    const short = t.throws(() => checkBtfLayout(o, 'struct selftest_flow',
      { size: 12, members: { packets: 0, bytes: 8 } })) as BpfError;
    t.regex(short.message, /size is 16 in C, 12 in TS/);
    t.regex(short.message, /member port \(offset 12\) missing in TS/);
    t.is((t.throws(() => checkBtfLayout(o, 'no_such_struct', { size: 1, members: {} })) as BpfError).code, 'ENOENT');
    t.is((t.throws(() => checkMapCodec(o.map('lru'), u32, u64)) as BpfError).code, 'EPROTO');
    t.throws(() => defineStruct('bad', 4, { a: { offset: 0, kind: 'u32' }, b: { offset: 2, kind: 'u16' } }), { message: /overlap/ });
    const enc = flowCodec.encode({ packets: 1n, bytes: 2, port: 3, proto: 4, flags: 5 });
    t.deepEqual(flowCodec.decode(enc), { packets: 1n, bytes: 2, port: 3, proto: 4, flags: 5 });
  });
});

test.serial('batch: update/lookup/delete on a 65537-entry array and a hash map', async (t) => {
  await withObject((o) => {
    const big = o.map('big');
    const n = 65537;
    const keys = packMany(u32, Array.from({ length: n }, (_, i) => i));
    const values = packMany(u32, Array.from({ length: n }, (_, i) => i * 3 + 1));
    t.is(big.updateBatch(keys, values, n), n);
    t.is(u32.decode(big.lookup(u32.encode(65536))!), 65536 * 3 + 1);
    const all = big.lookupBatch(4096);
    t.is(all.count, n);
    for (let i = 0; i < n; i += 997) t.is(all.values.readUInt32LE(i * 4), all.keys.readUInt32LE(i * 4) * 3 + 1);
    t.is(all.keys.readUInt32LE((n - 1) * 4), n - 1);
    t.is((t.throws(() => big.updateBatch(keys, values.subarray(4), n)) as BpfError).code, 'EINVAL');

    const flows = o.map('flows');
    const hk = packMany(u32, [10, 11, 12, 13, 14]);
    const hv = packMany(flowCodec, [1, 2, 3, 4, 5].map((p) => ({ packets: BigInt(p), bytes: p, port: p, proto: 6, flags: 0 })));
    t.is(flows.updateBatch(hk, hv), 5);
    const got = flows.lookupBatch(2); // smaller chunks than entries: walks with the batch token
    t.is(got.count, 5);
    const byKey = new Map<number, bigint>();
    for (let i = 0; i < got.count; i++) byKey.set(got.keys.readUInt32LE(i * 4), flowCodec.decode(got.values, i * 16).packets);
    t.deepEqual([...byKey.entries()].sort((a, b) => a[0] - b[0]), [[10, 1n], [11, 2n], [12, 3n], [13, 4n], [14, 5n]]);
    t.is(flows.entries().length, 5);
    t.is(flows.deleteBatch(packMany(u32, [10, 11])), 2);
    t.deepEqual(flows.keys().map((k) => u32.decode(k)).sort(), [12, 13, 14]);
    const missing = t.throws(() => flows.deleteBatch(packMany(u32, [12, 99]))) as BpfError & { deleted?: number };
    t.is(missing.code, 'ENOENT');
    const drained = flows.lookupAndDeleteBatch();
    t.is(drained.count, missing.deleted === 1 ? 2 : 3);
    t.is(flows.keys().length, 0);
    t.is(flows.updateBatch(Buffer.alloc(0), Buffer.alloc(0), 0), 0);

    // per-CPU values travel whole (every CPU's slot) in batches
    const pc = o.map('pcpu_cnt');
    const pcValues = Buffer.alloc(2 * pc.valueBufferSize);
    for (let cpu = 0; cpu < possibleCpus(); cpu++) {
      pcValues.writeBigUInt64LE(BigInt(cpu + 1), cpu * 8);
      pcValues.writeBigUInt64LE(100n, pc.valueBufferSize + cpu * 8);
    }
    t.is(pc.updateBatch(packMany(u32, [0, 1]), pcValues), 2);
    const pcAll = pc.lookupBatch();
    t.is(pcAll.count, 2);
    t.deepEqual(pcAll.values, pcValues);
    const ncpu = BigInt(possibleCpus());
    t.deepEqual(pc.lookupPerCpuSum(u32.encode(0)), [(ncpu * (ncpu + 1n)) / 2n]);
    t.deepEqual(pc.lookupPerCpuSum(u32.encode(1)), [100n * ncpu]);
  });
});

test.serial('map-in-map: create an inner map, fill it, swap it in atomically', async (t) => {
  await withObject((o) => {
    const outer = o.map('outer');
    const prog = o.program('xdp_inner');
    t.is(prog.testRun({ data: frame() }).retval, 1, 'no inner map yet');
    const spec = { name: 'ring_a', type: MapType.array, keySize: 4, valueSize: 4, maxEntries: 8 };
    const a = BpfMap.createInner(spec);
    const b = BpfMap.createInner({ ...spec, name: 'ring_b' });
    try {
      a.update(u32.encode(0), u32.encode(7));
      b.update(u32.encode(0), u32.encode(42));
      outer.setInner(u32.encode(0), a);
      t.is(prog.testRun({ data: frame() }).retval, 1007);
      t.is(outer.innerMapId(u32.encode(0)), a.id());
      outer.setInner(u32.encode(0), b);
      t.is(prog.testRun({ data: frame() }).retval, 1042, 'swap is visible to the next packet');
      const opened = outer.openInner(u32.encode(0))!;
      t.is(u32.decode(opened.lookup(u32.encode(0))!), 42);
      opened.close();
      t.is((t.throws(() => outer.update(u32.encode(1), u32.encode(a.fd))) as BpfError).code, 'EINVAL');
      // hash-of-maps too
      o.map('outer_hash').setInner(u32.encode(12345), a);
      t.is(o.map('outer_hash').innerMapId(u32.encode(12345)), a.id());
      // several keys in one batch (one kernel wait for running programs instead of one per key)
      o.map('outer_hash').setInnerBatch([u32.encode(1), u32.encode(2), u32.encode(12345)], [a, b, b]);
      t.deepEqual([1, 2, 12345].map((k) => o.map('outer_hash').innerMapId(u32.encode(k))), [a.id(), b.id(), b.id()]);
      t.is((t.throws(() => o.map('outer_hash').setInnerBatch([u32.encode(3)], [])) as BpfError).code, 'EINVAL');
      // an inner map that does not match the template is refused by the kernel
      const wrong = BpfMap.createInner({ ...spec, name: 'ring_bad', valueSize: 8 });
      try {
        t.is((t.throws(() => outer.setInner(u32.encode(1), wrong)) as BpfError).code, 'EINVAL');
      } finally {
        wrong.close();
      }
      t.true(outer.delete(u32.encode(0)));
      t.is(prog.testRun({ data: frame() }).retval, 1);
    } finally {
      a.close();
      b.close();
    }
    t.is((t.throws(() => a.lookup(u32.encode(0))) as BpfError).code, 'EBADF');
  });
});

test.serial('pinning: maps pinned by name are reused on reload; fresh on request; size changes are explicit', async (t) => {
  const fs = tempBpffs();
  const root = join(fs.dir, 'node1');
  try {
    await withObject((o) => {
      t.false(o.map('flows').reused);
      t.is(o.map('flows').pinPath, join(root, 'flows'));
      o.map('flows').update(u32.encode(1), flowCodec.encode({ packets: 77n, bytes: 0, port: 0, proto: 0, flags: 0 }));
      const inner = BpfMap.createInner({ name: 'pinned_inner', type: MapType.array, keySize: 4, valueSize: 4, maxEntries: 8 });
      o.map('outer').setInner(u32.encode(0), inner);
      inner.close(); // the outer map keeps the inner one alive
    }, { pinRoot: root });
    t.true(existsSync(join(root, 'flows')));
    t.false(existsSync(join(root, '.rodata')), 'internal maps are not pinned');

    // restart: state survives
    await withObject((o) => {
      t.true(o.map('flows').reused);
      t.is(flowCodec.decode(o.map('flows').lookup(u32.encode(1))!).packets, 77n);
      t.truthy(o.map('outer').innerMapId(u32.encode(0)), 'inner map kept alive by the pinned outer map');
    }, { pinRoot: root });

    // a pinned map opened directly (e.g. by the CLI)
    const pinned = BpfMap.open(join(root, 'flows'));
    t.is(pinned.keySize, 4);
    t.is(flowCodec.decode(pinned.lookup(u32.encode(1))!).packets, 77n);
    pinned.close();
    t.is((t.throws(() => BpfMap.open(join(root, 'nope'))) as BpfError).code, 'ENOENT');

    // resizing a pinned map is an error unless replacement is asked for
    const resized = await t.throwsAsync(BpfObject.load('selftest', { pinRoot: root, mapMaxEntries: { lru: 512 } })) as BpfError;
    t.is(resized.code, 'EINVAL');
    t.regex(resized.message, /map 'lru'/);
    await withObject((o) => {
      t.is(o.map('lru').maxEntries, 512);
      t.false(o.map('lru').reused);
      t.true(o.map('flows').reused);
    }, { pinRoot: root, mapMaxEntries: { lru: 512 }, replaceIncompatiblePins: true });

    // fresh start drops old state
    await withObject((o) => {
      t.false(o.map('flows').reused);
      t.is(o.map('flows').lookup(u32.encode(1)), null);
    }, { pinRoot: root, reusePinnedMaps: false, mapMaxEntries: { lru: 512 } });

    const notBpffs = await t.throwsAsync(BpfObject.load('selftest', { pinRoot: join(tmpdir(), `glb${process.pid}-plain`) })) as BpfError;
    t.is(notBpffs.code, 'EINVAL');
    t.regex(notBpffs.message, /not on a bpf filesystem/);
  } finally {
    fs.cleanup();
  }
});

test.serial('no fd leaks over 10,000 map open/close cycles and repeated object loads', async (t) => {
  const fs = tempBpffs();
  try {
    const keep = BpfMap.create({ name: 'leak_pin', type: MapType.hash, keySize: 4, valueSize: 4, maxEntries: 4 });
    keep.pin(join(fs.dir, 'leak_pin'));
    keep.close();
    const before = fdCount();
    for (let i = 0; i < 10_000; i++) {
      const m = BpfMap.create({ name: 'leak', type: MapType.array, keySize: 4, valueSize: 4, maxEntries: 1 });
      m.update(u32.encode(0), u32.encode(i));
      m.close();
      BpfMap.open(join(fs.dir, 'leak_pin')).close();
    }
    for (let i = 0; i < 50; i++) {
      const o = await BpfObject.load('selftest');
      o.program('xdp_selftest').testRun({ data: frame() });
      o.close();
      await BpfObject.load('selftest_bad').catch(() => undefined);
    }
    t.is(fdCount(), before);
  } finally {
    fs.cleanup();
  }
});

// ---- attach: XDP and TC through pinned links, inside throwaway namespaces ----

const nsA = `glb${process.pid}-bpfa`;
const nsB = `glb${process.pid}-bpfb`;

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10_000 });
}

function child(ns: string, step: string, pinRoot: string, ifname: string): Record<string, any> {
  const r = spawnSync('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', 'test/libbpf-attach.child.ts', step, pinRoot, ifname],
    { cwd: packageRoot(), encoding: 'utf8', timeout: 60_000 });
  const line = r.stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line);
  } catch {
    throw new Error(`child ${step} printed no JSON (status ${r.status}): ${r.stdout}\n${r.stderr}`);
  }
}

test.serial('attach: XDP + TC links in a namespace, pinned, reused, never replacing foreign programs', async (t) => {
  const fs = tempBpffs(); // mounted before `ip netns exec`, so the child sees it
  const pinRoot = join(fs.dir, 'gitlb');
  try {
    ip('netns', 'add', nsA);
    ip('netns', 'add', nsB);
    ip('-n', nsA, 'link', 'add', 'veth0', 'type', 'veth', 'peer', 'name', 'veth1', 'netns', nsB);
    ip('-n', nsA, 'addr', 'add', '192.0.2.1/24', 'dev', 'veth0');
    ip('-n', nsB, 'addr', 'add', '192.0.2.2/24', 'dev', 'veth1');
    ip('-n', nsA, 'link', 'set', 'veth0', 'up');
    ip('-n', nsB, 'link', 'set', 'veth1', 'up');

    const a = child(nsB, 'attach', pinRoot, 'veth1');
    t.falsy(a.error, a.error);
    t.is(a.mode, 'native', 'veth supports driver mode, auto picks it');
    t.false(a.replaced);
    t.is(a.query.mode, 'native');
    t.is(a.query.name, 'xdp_selftest');
    t.is(a.second, 'EEXIST', 'a second XDP program is refused, not swapped in');
    t.deepEqual(a.tcReplaced, [false, false]);
    t.is(a.tc.ingress.length, 1);
    t.is(a.tc.egress[0].name, 'tc_selftest');

    // real packets through the pinned programs after the attaching process exited
    const ping = spawnSync('ip', ['netns', 'exec', nsA, 'ping', '-c', '3', '-i', '0.2', '-W', '1', '192.0.2.2'], { timeout: 10_000 });
    t.is(ping.status, 0, 'ping through XDP_PASS works');
    const cnt = BpfMap.open(join(pinRoot, 'pcpu_cnt'));
    try {
      t.true(cnt.lookupPerCpuSum(u32.encode(0))![0]! >= 3n, 'XDP saw the pings');
      t.true(cnt.lookupPerCpuSum(u32.encode(1))![0]! >= 6n, 'TC ingress+egress saw pings and replies');
    } finally {
      cnt.close();
    }

    const r = child(nsB, 'reattach', pinRoot, 'veth1');
    t.falsy(r.error, r.error);
    t.is(r.survived?.name, 'xdp_selftest', 'pinned link outlived the process');
    t.true(r.reused);
    t.true(r.replaced, 'our pinned link was switched to the new program');
    t.is(r.linkId, a.linkId);
    t.true(r.tcReplaced);
    t.is(r.after.progId, r.newProgId);
    t.is(r.dupTc, 'EEXIST');
    t.is(r.foreignXdp, 'EEXIST');
    t.is(r.wrongPin, 'EEXIST', 'a pin holding another kind of link is not hijacked');
    t.is(r.mapPin, 'EEXIST', 'a pinned map (percpu array: type 6 = XDP link type) is not mistaken for a link');
    t.is(r.casStale, 'EPERM', 'a link update whose expected old program is not the one running is refused');
    t.is(r.afterCas.progId, r.newProgId, 'and the link still runs what it ran');

    // the interface disappears and comes back (e.g. a container restart): stale pinned links are
    // recognised (ifindex 0) and replaced by fresh ones instead of blocking the attach
    ip('-n', nsA, 'link', 'del', 'veth0');
    ip('-n', nsA, 'link', 'add', 'veth0', 'type', 'veth', 'peer', 'name', 'veth1', 'netns', nsB);
    ip('-n', nsA, 'addr', 'add', '192.0.2.1/24', 'dev', 'veth0');
    ip('-n', nsB, 'addr', 'add', '192.0.2.2/24', 'dev', 'veth1');
    ip('-n', nsA, 'link', 'set', 'veth0', 'up');
    ip('-n', nsB, 'link', 'set', 'veth1', 'up');
    const again = child(nsB, 'attach', pinRoot, 'veth1');
    t.falsy(again.error, again.error);
    t.false(again.replaced);
    t.not(again.linkId, a.linkId);
    t.is(again.query.name, 'xdp_selftest');
    t.deepEqual(again.tcReplaced, [false, false]);

    const d = child(nsB, 'detach', pinRoot, 'veth1');
    t.falsy(d.error, d.error);
    t.deepEqual(d.removed, [true, true, true, false]);
    t.is(d.xdp, null);
    t.deepEqual(d.tcIn, []);
    t.deepEqual(d.tcOut, []);

    const c = child(nsB, 'clsact', pinRoot, 'veth1');
    t.falsy(c.error, c.error);
    t.deepEqual(c.first, { api: 'clsact', replaced: false });
    t.is(c.query?.name, 'tc_selftest');
    t.is(c.pingStatus, 0);
    t.true(c.tcCount >= 4, `clsact programs saw ${c.tcCount} packets of a 2-ping exchange`);
    t.true(c.again, 'our own filter is replaced in place');
    t.is(c.foreign, 'EEXIST');
    t.is(c.otherSlot, 'ok', 'a different handle/priority coexists');
    t.is(c.afterDetach, null);

    const sys = child(nsA, 'sysbpf', pinRoot, 'veth0');
    t.is(sys.code, 'EXDEV', sys.message);

    const m = child(nsA, 'modes', pinRoot, 'veth0');
    t.falsy(m.error, m.error);
    t.deepEqual(m.generic, { reported: 'generic', queried: 'generic' });
    t.deepEqual(m.native, { reported: 'native', queried: 'native' });
    t.is(m.afterDetach, null);
    t.is(m.loNative, 'EOPNOTSUPP');
    t.deepEqual(m.loAuto, { reported: 'generic', queried: 'generic' });
    t.is(m.tcWhileOpen, 1);
    t.is(m.tcAfterClose, 0);
    t.is(m.missingIf, 'ENODEV');
  } finally {
    spawnSync('ip', ['netns', 'del', nsA]);
    spawnSync('ip', ['netns', 'del', nsB]);
    fs.cleanup();
  }
});
