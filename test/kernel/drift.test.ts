// The drift check against the real LB data plane (real BPF maps pinned under a per-run bpffs directory, no
// interface) and a real Git remote (git http-backend): what it finds at the next check, what the slow rotation
// over ring contents finds within RING_ROTATION_CHECKS checks, and that a node where nothing changed is never
// written. The guarantees tested here are the ones docs/reconciler.md ("Drift") states.
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { RING_ROTATION_CHECKS, openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { decodeVipKey, encodeU32 } from '../../src/bpf/dataplane/codec.js';
import { readRing } from '../../src/bpf/dataplane/rings.js';
import { BpfMap, type BpfError } from '../../src/bpf/libbpf.js';
import { rewriteRingEntry, ringEntry, writableRing } from '../lib/ring-copy.js';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { Reconciler } from '../../src/reconciler/loops/reconciler.js';
import { git, servedRepo, commitFiles, tempDir, clusterYaml, lbNodeYaml, serviceYaml, type ServedRepo } from '../reconcile-helpers.js';

const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-drift`;
const quiet = { info: () => {}, warn: () => {} };
const cleanups: (() => Promise<void> | void)[] = [];

test.after.always(async () => {
  for (const f of cleanups.reverse()) await f();
  rmSync(PIN_BASE, { recursive: true, force: true });
});

/** Three services of two reals each (table 251): enough rings for a swap between services to mean something. */
const FILES = {
  'cluster.yaml': clusterYaml(),
  'nodes/lb-1.yaml': lbNodeYaml('lb-1'),
  'services/a.yaml': serviceYaml('a', '203.0.113.10', ['198.51.100.1', '198.51.100.2']),
  'services/b.yaml': serviceYaml('b', '203.0.113.11', ['198.51.100.3', '198.51.100.4']),
  'services/c.yaml': serviceYaml('c', '203.0.113.12', ['198.51.100.5', '198.51.100.6']),
};

/** A reconciler that applied FILES to a data plane of its own, wired as the daemon wires it (reopen after drift). */
async function applied(t: { is(a: unknown, b: unknown, m?: string): void }, name: string): Promise<{ r: Reconciler; pinRoot: string }> {
  const repo: ServedRepo = await servedRepo();
  cleanups.push(() => repo.cleanup());
  await commitFiles(repo.work, FILES, 'initial config');
  await git(repo.work, 'push', '-q', 'origin', 'main');
  const cache = await tempDir(`drift-${name}`);
  cleanups.push(() => rmSync(cache, { recursive: true, force: true }));
  const pinRoot = join(PIN_BASE, name);
  const r = new Reconciler({
    node: 'lb-1', branch: 'main', remote: new HttpRemote(repo.url, join(cache, 'git')),
    dataPlane: await openLbDataPlane({ pinRoot }), reopenDataPlane: () => openLbDataPlane({ pinRoot }), log: quiet,
  });
  cleanups.push(() => r.dataPlane.close());
  t.is((await r.reconcile('test')).kind, 'applied');
  return { r, pinRoot };
}

/** Runs drift checks until one repairs something (at most `max`); returns how many checks that took (-1: none did). */
async function checksUntilRepaired(r: Reconciler, max: number): Promise<number> {
  for (let n = 1; n <= max; n++) if ((await r.checkDrift()).differences.length) return n;
  return -1;
}

function withPinned<T>(pinRoot: string, name: string, f: (m: BpfMap) => T): T {
  const m = BpfMap.open(join(pinRoot, name));
  try {
    return f(m);
  } finally {
    m.close();
  }
}

test.serial('nothing changed: a full rotation of drift checks writes nothing and repairs nothing', async (t) => {
  const { r } = await applied(t, 'benign');
  const writes = r.counters.mapWrites;
  const deletes = r.counters.mapDeletes;
  for (let i = 0; i < RING_ROTATION_CHECKS + 2; i++) t.deepEqual((await r.checkDrift()).differences, []);
  t.is(r.counters.mapWrites, writes, 'no map writes');
  t.is(r.counters.mapDeletes, deletes, 'no map deletes');
  t.is(r.counters.driftRepairs, 0);
  t.is(r.counters.driftChecks, RING_ROTATION_CHECKS + 2);
});

test.serial('a VIP deleted behind the daemon is repaired at the next drift check', async (t) => {
  const { r, pinRoot } = await applied(t, 'vip');
  const deleted = withPinned(pinRoot, 'lb_vips', (vips) => {
    const listener = vips.keys().find((k) => decodeVipKey(k).port !== 0)!;
    vips.delete(listener);
    return decodeVipKey(listener).addr;
  });
  const d = await r.checkDrift();
  t.true(d.differences.some((x) => x.includes(deleted)), d.differences.join('; '));
  t.is(r.counters.driftRepairs, 1);
  t.is((await r.dataPlane.readLive()).vips.length, 3);
  t.deepEqual((await r.checkDrift()).differences, [], 'clean after the repair');
});

test.serial("a service's inner ring swapped for another service's is repaired at the next drift check", async (t) => {
  const { r, pinRoot } = await applied(t, 'swap');
  const [a, b] = (await r.dataPlane.readLive()).services;
  withPinned(pinRoot, 'lb_rings', (rings) => {
    const other = rings.openInner(encodeU32(b!.id))!;
    try {
      rings.setInner(encodeU32(a!.id), other); // both services now share b's (valid, frozen) ring
    } finally {
      other.close();
    }
  });
  const d = await r.checkDrift();
  t.is(d.differences.length, 2, d.differences.join('; ')); // ring.fill + service.switch of service a only
  t.true(d.differences.some((x) => x.startsWith(`lb_rings[${a!.id}]`)), d.differences.join('; '));
  t.is(r.counters.driftRepairs, 1);
  const live = await r.dataPlane.readLive({ verify: true });
  t.is(live.services.find((s) => s.id === a!.id)?.digest, a!.digest);
  t.is(live.services.find((s) => s.id === b!.id)?.digest, b!.digest);
});

test.serial('a ring entry rewritten in place is repaired within one rotation of drift checks', async (t) => {
  const { r, pinRoot } = await applied(t, 'inplace');
  const target = (await r.dataPlane.readLive()).services[0]!;
  const entry = 6;
  // the daemon's own rings are frozen: no process can rewrite them
  withPinned(pinRoot, 'lb_rings', (rings) => {
    const ours = rings.openInner(encodeU32(target.id))!;
    try {
      t.is((t.throws(() => rewriteRingEntry(ours, entry, 0)) as BpfError).code, 'EPERM');
    } finally {
      ours.close();
    }
  });
  // a writer that swaps in a writable copy of the same table first (a new identity: read at once, no difference)...
  const copy = withPinned(pinRoot, 'lb_rings', (rings) => {
    const ours = rings.openInner(encodeU32(target.id))!;
    const ring = readRing(ours);
    ours.close();
    const m = writableRing(ring);
    rings.setInner(encodeU32(target.id), m);
    return m;
  });
  cleanups.push(() => copy.close());
  t.deepEqual((await r.checkDrift()).differences, [], 'an identical table under a new identity is no drift');
  // ... can then rewrite an entry in place (to another real of the ring: entries hold real slot + 1, so the
  // other real's entry value is taken from the ring itself): the identity stays, the rotation finds it
  const before = ringEntry(copy, entry);
  const other = [...readRing(copy)].find((v) => v !== 0 && v !== before);
  if (other === undefined) throw new Error('the test ring names one real only');
  rewriteRingEntry(copy, entry, other);
  const n = await checksUntilRepaired(r, RING_ROTATION_CHECKS);
  t.true(n >= 1 && n <= RING_ROTATION_CHECKS, `repaired after ${n} checks (bound ${RING_ROTATION_CHECKS})`);
  t.is(r.counters.driftRepairs, 1);
  const live = await r.dataPlane.readLive({ verify: true });
  t.is(live.services.find((s) => s.id === target.id)?.digest, target.digest, 'the right table is back');
  t.not(live.services.find((s) => s.id === target.id)?.mapId, copy.id(), 'in a new (frozen) ring of the daemon');
});
