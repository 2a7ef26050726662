// Graceful drain reporting (src/reconciler/flows/drain-watch.ts) and the connection-state part of `gitlb status`
// (src/reconciler/status/flows-report.ts): when a drained node may be stopped, and the sync's health per peer, read
// from status files that are untrusted input.
import test from 'ava';
import { DrainWatch, QUIET_S } from '../../src/reconciler/flows/drain-watch.js';
import { drainLine, flowsOfStatus, formatFlowsSection, handbackLine } from '../../src/reconciler/status/flows-report.js';
import type { NodeStatus } from '../../src/reconciler/status/status-doc.js';

const T0 = Date.parse('2026-12-01T12:00:00Z');

test('a drained node can be stopped only after QUIET_S s without a VIP packet and with no active own SNAT translation', (t) => {
  const w = new DrainWatch();
  t.is(w.report(T0), null, 'not drained: nothing reported');
  w.observe({ vipPackets: 1000, activeTranslations: 2, activeConnections: 0 }, T0);
  t.like(w.report(T0), { canStop: false, activeTranslations: 2, lastPacketAt: null });
  w.observe({ vipPackets: 1500, activeTranslations: 2, activeConnections: 0 }, T0 + 5000);
  t.like(w.report(T0 + 5000), { canStop: false, packetsPerSecond: 100, lastPacketAt: new Date(T0 + 5000).toISOString() });
  // packets stop, but a translation is still active: not yet
  w.observe({ vipPackets: 1500, activeTranslations: 1, activeConnections: 0 }, T0 + 5000 + QUIET_S * 1000);
  t.like(w.report(T0 + 5000 + QUIET_S * 1000), { canStop: false, packetsPerSecond: 0 });
  w.observe({ vipPackets: 1500, activeTranslations: 0, activeConnections: 0 }, T0 + 10_000 + QUIET_S * 1000);
  t.like(w.report(T0 + 10_000 + QUIET_S * 1000), { canStop: true });
  // one packet more: traffic again
  w.observe({ vipPackets: 1501, activeTranslations: 0, activeConnections: 0 }, T0 + 15_000 + QUIET_S * 1000);
  t.like(w.report(T0 + 15_000 + QUIET_S * 1000), { canStop: false });
  // undrained: the watch forgets
  w.observe(null, T0 + 20_000 + QUIET_S * 1000);
  t.is(w.report(T0 + 20_000 + QUIET_S * 1000), null);
});

test('a drained node that never sees a packet is stoppable QUIET_S s after the drain began, not before', (t) => {
  const w = new DrainWatch();
  w.observe({ vipPackets: 7, activeTranslations: 0, activeConnections: 0 }, T0);
  w.observe({ vipPackets: 7, activeTranslations: 0, activeConnections: 0 }, T0 + (QUIET_S - 1) * 1000);
  t.false(w.report(T0 + (QUIET_S - 1) * 1000)!.canStop);
  w.observe({ vipPackets: 7, activeTranslations: 0, activeConnections: 0 }, T0 + QUIET_S * 1000);
  t.true(w.report(T0 + QUIET_S * 1000)!.canStop);
});

test('a drained node with connections still seen in the last 30 s is not stoppable, even without new VIP packets counted', (t) => {
  const w = new DrainWatch();
  w.observe({ vipPackets: 7, activeTranslations: 0, activeConnections: 3 }, T0);
  w.observe({ vipPackets: 7, activeTranslations: 0, activeConnections: 3 }, T0 + QUIET_S * 1000);
  t.like(w.report(T0 + QUIET_S * 1000), { canStop: false, activeConnections: 3 });
  w.observe({ vipPackets: 7, activeTranslations: 0, activeConnections: 0 }, T0 + (QUIET_S + 5) * 1000);
  t.like(w.report(T0 + (QUIET_S + 5) * 1000), { canStop: true, activeConnections: 0 });
});

const status = (flows: unknown) => ({ node: 'lb-1', flows }) as unknown as NodeStatus;

test('gitlb status: the sync per peer, the addresses served for lost peers, and the drain line', (t) => {
  const v = flowsOfStatus(status({
    sync: { 'lb-2': { inSync: true, sent: 120, received: 80, applied: 78, refused: { 'no-real': 1, exists: 1 }, dropped: 0, queued: 0, lagMs: 12 } },
    snatTakeover: { lost: ['lb-3'], serving: { '198.51.100.113': 'lb-3' } },
    drain: { since: '2026-12-01T12:00:00.000Z', packetsPerSecond: 0, activeTranslations: 0, lastPacketAt: '2026-12-01T12:00:05.000Z', canStop: true },
  }))!;
  t.deepEqual(v.sync, [{ peer: 'lb-2', inSync: true, sent: 120, received: 80, applied: 78, refused: 2, dropped: 0, queued: 0, lagMs: 12 }]);
  const out = formatFlowsSection([{ node: 'lb-1', flows: v }]);
  t.regex(out, /^Flow sync:\n/);
  t.regex(out, /lb-1\s+lb-2\s+yes\s+120\s+80\s+78\s+2\s+0\s+0\s+12 ms/);
  t.regex(out, /lb-1: serves lb-3's SNAT address 198\.51\.100\.113 \(lb-3 lost\)/);
  t.regex(out, /lb-1: drained since 2026-12-01T12:00:00\.000Z; carries no more traffic .*: it can be stopped/);
  t.regex(drainLine('lb-1', { ...v.drain!, canStop: false, packetsPerSecond: 12.5, activeTranslations: 3, activeConnections: 40 }),
    /still carries traffic: 12\.5 VIP packets\/s, 40 connection\(s\) seen in the last 30 s, 3 active SNAT translation\(s\); do not stop it yet/);
});

test('gitlb status: an address held for its returned owner gets its handover line (whose, since when, waiting for what, until when) instead of "lost"', (t) => {
  const held = { owner: 'lb-1', since: '2026-12-01T12:00:00.000Z', waitingFor: ['sync-spoke'], limitSeconds: 120, giveBackBy: '2026-12-01T12:02:00.000Z' };
  const v = flowsOfStatus(status({
    snatTakeover: { lost: ['lb-3'], serving: { '198.51.100.111': 'lb-1', '198.51.100.113': 'lb-3' }, handback: { '198.51.100.111': held } },
  }))!;
  t.deepEqual(v.handback, [{ address: '198.51.100.111', ...held }]);
  const out = formatFlowsSection([{ node: 'lb-2', flows: v }]);
  t.true(out.includes("lb-2: holds lb-1's SNAT address 198.51.100.111 for lb-1, which answers again since 2026-12-01T12:00:00.000Z: " +
    'waiting for its sync to speak since it answered again; given back by 2026-12-01T12:02:00.000Z at the latest (--snat-handback-limit 120)\n'), out);
  t.false(out.includes('198.51.100.111 (lb-1 lost)'), 'a returned owner is not called lost');
  t.regex(out, /lb-2: serves lb-3's SNAT address 198\.51\.100\.113 \(lb-3 lost\)/, 'a lost one still is');
  t.regex(handbackLine('lb-2', { address: '198.51.100.111', ...held, waitingFor: ['own-translations'] }),
    /waiting for the copies of its own translations it asked for to reach it;/);
  t.regex(handbackLine('lb-2', { address: '198.51.100.111', ...held, waitingFor: ['sync-spoke', 'own-translations'] }),
    /waiting for its sync to speak since it answered again and the copies of its own translations it asked for to reach it;/);
  // released: the status no longer carries it, and the line is gone
  const after = flowsOfStatus(status({ snatTakeover: { lost: [], serving: {} } }))!;
  t.deepEqual(after.handback, []);
  t.false(formatFlowsSection([{ node: 'lb-2', flows: after }]).includes('holds'));
});

test('gitlb status: a hostile handback entry cannot fake a line, a reason or a number', (t) => {
  const v = flowsOfStatus(status({
    snatTakeover: { serving: {}, handback: {
      '198.51.100.111': { owner: 'lb-1\nverdict: OK', since: 'x\u202e', waitingFor: ['sync-spoke', 'rm -rf', 7], limitSeconds: 1e300, giveBackBy: 5 },
      '198.51.100.112': { owner: 7 }, '198.51.100.113': 'not an object' } },
  }))!;
  t.is(v.handback.length, 1);
  t.like(v.handback[0], { owner: 'lb-1 verdict: OK', waitingFor: ['sync-spoke'], limitSeconds: 1e6, giveBackBy: '?' });
  const out = formatFlowsSection([{ node: 'lb-2', flows: v }]);
  t.false(out.split('\n').some((l) => l.startsWith('verdict:')), 'no line of its own');
  t.false(out.includes('\u202e'), 'bidi override escaped');
  t.false(out.includes('rm -rf'), 'only known reasons are printed');
});

test('gitlb status: a hostile flows mapping cannot fake lines, overflow numbers or break the table; nothing reported without it', (t) => {
  t.is(flowsOfStatus(status(undefined)), undefined);
  t.is(formatFlowsSection([{ node: 'lb-1' }]), '');
  const v = flowsOfStatus(status({
    sync: { 'lb-2\nverdict: OK': { inSync: 'yes', sent: -5, received: 1e300, applied: 'many', lastError: 'x\u202e\nverdict: OK' }, 'lb-3': 'not an object' },
    snatTakeover: { serving: { '198.51.100.9': 7 } },
    drain: { canStop: 'true', packetsPerSecond: -1 },
  }))!;
  t.is(v.sync.length, 1);
  t.like(v.sync[0], { inSync: false, sent: 0, received: Number.MAX_SAFE_INTEGER, applied: 0 });
  t.deepEqual(v.serving, []);
  t.like(v.drain, { canStop: false, packetsPerSecond: 0, activeConnections: 0 });
  const out = formatFlowsSection([{ node: 'lb-1', flows: v }]);
  t.false(out.split('\n').some((l) => l.startsWith('verdict:')), 'no line of its own');
  t.false(out.includes('\u202e'), 'bidi override escaped');
});
