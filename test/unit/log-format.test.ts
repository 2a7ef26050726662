// Logging and trigger text: JSON lines carry time, level, node, revision and the call site's fields; the text form
// is one line per event; a burst of identical triggers prints once with its count. Pure (no root, no network).
import test from 'ava';
import { createLogger } from '../../src/reconciler/log/logger.js';
import { formatRecord } from '../../src/reconciler/log/text-format.js';
import { SerialRunner, describeTriggers } from '../../src/reconciler/triggers/serial-runner.js';
import { parsePromText, sumOf } from '../../src/reconciler/metrics/prom-text.js';

function capture(isTTY = false) {
  const lines: string[] = [];
  return { out: { isTTY, write: (s: string) => { lines.push(...s.split('\n').filter(Boolean)); return true; } }, lines };
}

test('json: one object per line with time, level, node, served revision and fields; debug only when asked', (t) => {
  const c = capture();
  let revision: string | null = null;
  const log = createLogger({ node: 'lb-1', out: c.out, revision: () => revision });
  log.debug('not shown');
  log.info('started');
  revision = 'a'.repeat(40);
  log.warn('revision failed', { revision: 'b'.repeat(40), stage: 'validate', reason: 'x.yaml:3:1: bad' });
  log.child({ stage: 'health' }).info('flip', { service: 'web', real: '198.51.100.21' });
  t.is(c.lines.length, 3);
  const [a, b, h] = c.lines.map((l) => JSON.parse(l));
  t.is(a.level, 'info');
  t.is(a.node, 'lb-1');
  t.false('revision' in a, 'nothing applied yet: no revision field');
  t.true(!Number.isNaN(Date.parse(a.time)), 'ISO time');
  t.is(b.level, 'warn');
  t.is(b.revision, 'b'.repeat(40), 'the call site names the revision it attempted');
  t.is(b.stage, 'validate');
  t.is(b.reason, 'x.yaml:3:1: bad');
  t.is(h.revision, 'a'.repeat(40), 'other lines carry the served revision');
  t.deepEqual([h.stage, h.service, h.real], ['health', 'web', '198.51.100.21']);
  const d = capture();
  createLogger({ node: 'n', out: d.out, level: 'debug' }).debug('shown');
  t.is(d.lines.length, 1);
});

test('text: a terminal gets one readable line per event', (t) => {
  const c = capture(true);
  createLogger({ node: 'lb-1', out: c.out, revision: () => 'c'.repeat(40) }).warn('health: web real 198.51.100.22 up -> down',
    { stage: 'health', reason: 'connect ECONNREFUSED' });
  t.is(c.lines.length, 1);
  t.regex(c.lines[0]!, /^\d\d:\d\d:\d\d\.\d{3} WARN  health: web real 198\.51\.100\.22 up -> down revision=c{12} stage=health reason="connect ECONNREFUSED"$/);
  t.is(formatRecord({ level: 30, time: 0, msg: 'm', count: 3 }).split(' ').slice(1).join(' '), 'INFO  m count=3');
});

test('triggers: a burst of polls coalesces into one run described once with its count', async (t) => {
  t.is(describeTriggers(new Map([['poll', 8], ['webhook', 1]])), 'poll x8, webhook');
  const runs: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const runner = new SerialRunner({ reconcile: async (why) => { runs.push(why); if (runs.length === 1) await gate; } });
  runner.trigger('reconcile', 'start');
  for (let i = 0; i < 8; i++) runner.trigger('reconcile', 'poll');
  runner.trigger('reconcile', 'ref change');
  release();
  await runner.idle();
  t.deepEqual(runs, ['start', 'poll x8, ref change']);
});

test('prom text: samples with labels and escapes read back', (t) => {
  const s = parsePromText('# HELP x y\n# TYPE x counter\nx_total{a="1",b="q\\"z"} 5\nx_total{a="2"} 7\ny 1.5e3\nz{le="+Inf"} +Inf\n');
  t.is(sumOf(s, 'x_total'), 12);
  t.is(sumOf(s, 'x_total', { b: 'q"z' }), 5);
  t.is(sumOf(s, 'y'), 1500);
  t.is(s.find((x) => x.name === 'z')!.value, Infinity);
});
