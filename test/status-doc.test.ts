// The status document is written after every apply: it must stay proportional to what is wrong, not to the size
// of the config. At 1,000 services x 100 reals it lists the few reals that need a look, counts the rest, fits the
// readers' size cap, validates against the schema, and `gitlb status` still names every unhealthy real.
import test from 'ava';
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { MAX_STATUS_BYTES, parseStatus, serialiseStatus, statusService, type StatusRealState } from '../src/reconciler/status/status-doc.js';
import { assessStatus } from '../src/reconciler/status/assess.js';
import { nodeStatus } from './reconcile-helpers.js';

const schema = JSON.parse(readFileSync(new URL('../schemas/status.schema.json', import.meta.url), 'utf8'));
const ajv = new Ajv2020({ allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validate = ajv.compile(schema);

/** Service i of 1,000 with 100 reals; every 100th service has real 7 down, every 250th has real 9 draining. */
function service(i: number) {
  const reals: StatusRealState[] = Array.from({ length: 100 }, (_, r) => ({
    address: `2001:db8:${i.toString(16)}::${(r + 1).toString(16)}`,
    weight: 100,
    state: r === 9 && i % 250 === 0 ? 'drain' : 'active',
    healthy: !(r === 7 && i % 100 === 0),
    entries: r === 7 && i % 100 === 0 ? 0 : 100,
  }));
  return { name: `svc-${i}`, id: i + 1, tableSize: 10007, reals };
}

test('1,000 services x 100 reals: unhealthy and draining reals listed, the rest counted; under the size cap; schema-valid', (t) => {
  const services = Array.from({ length: 1000 }, (_, i) => statusService(service(i), 'c'.repeat(64)));
  const rev = 'b'.repeat(40);
  const text = serialiseStatus(nodeStatus('lb-1', rev, { services }));
  t.true(text.length < MAX_STATUS_BYTES / 2, `${text.length} bytes`);
  const back = parseStatus(text);
  t.true(validate(back), JSON.stringify(validate.errors));
  t.deepEqual(back.services[0]!.realCounts, { total: 100, active: 99, drain: 1, disabled: 0, unhealthy: 1 });
  t.deepEqual(back.services[0]!.reals.map((r) => [r.state, r.healthy, r.entries]), [['active', false, 0], ['drain', true, 100]]);
  t.deepEqual(back.services[1]!.reals, []);
  t.deepEqual(back.services[1]!.realCounts, { total: 100, active: 100, drain: 0, disabled: 0, unhealthy: 0 });
  const listed = back.services.reduce((n, s) => n + s.reals.length, 0);
  t.is(listed, 10 + 4); // 10 down, 4 draining
  const verdict = assessStatus({ statuses: [back], head: { oid: rev, committedAt: new Date() }, configNodes: [], now: new Date(), behindGraceMs: 60_000, staleAfterMs: 60_000 });
  t.deepEqual(verdict.nodes[0]!.unhealthy, Array.from({ length: 10 }, (_, k) => `svc-${k * 100}/${service(k * 100).reals[7]!.address}`));
});

test('a status file of an older version (every real listed, no counts) is still read and judged', (t) => {
  const old = nodeStatus('lb-2', 'd'.repeat(40), { reals: ['198.51.100.1', '198.51.100.2'], down: '198.51.100.2' });
  t.is(old.services[0]!.realCounts, undefined);
  const back = parseStatus(serialiseStatus(old));
  t.true(validate(back), JSON.stringify(validate.errors));
  const verdict = assessStatus({ statuses: [back], head: null, configNodes: [], now: new Date(), behindGraceMs: 60_000, staleAfterMs: 60_000 });
  t.deepEqual(verdict.nodes[0]!.unhealthy, ['web/198.51.100.2']);
});
