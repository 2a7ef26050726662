// rerenderServices (src/render/desired.ts): the health loop renders again only the services a HealthChange names,
// on top of the previous render. Pinned to the full render: after any sequence of flips, each re-rendering only the
// flipped service, the result equals renderDesiredState under the same view, field for field.
import test from 'ava';
import { renderDesiredState, rerenderServices, type HealthView } from '../../src/render/desired.js';
import { cluster, model, node, real, service } from '../helpers/model-builder.js';
import { prng } from '../lib/prng.js';

const REALS = Array.from({ length: 8 }, (_, i) => `198.51.100.${i + 10}`);
const config = model({
  cluster: cluster({ tableSize: 251 }),
  nodes: [node('lb-1', { role: 'lb', allowedVips: ['203.0.113.0/24'] })],
  services: [
    service('web', { vip: '203.0.113.10', reals: REALS.map((a, i) => real(a, 1 + (i % 3))) }),
    service('api', { vip: '203.0.113.11', reals: REALS.slice(0, 5).map((a) => real(a)) }),
    // a drained and a disabled real: listed (or not) whatever their health
    service('mail', { vip: '203.0.113.12', reals: [real(REALS[1]!), real(REALS[2]!, 1, 'drain'), real(REALS[3]!, 1, 'disabled')] }),
    service('dns', { vip: '203.0.113.13', reals: [real(REALS[6]!), real(REALS[7]!)] }),
  ],
});
const viewOf = (down: ReadonlySet<string>): HealthView => ({ isHealthy: (svc, address) => !down.has(`${svc}/${address}`) });

test('re-rendering only the flipped service after each of 300 random flips equals the full render', (t) => {
  const rnd = prng(27);
  const down = new Set<string>();
  let state = renderDesiredState(config, 'lb-1', viewOf(down));
  const names = config.services.map((s) => s.metadata.name);
  for (let i = 0; i < 300; i++) {
    const svc = config.services[Math.floor(rnd() * names.length)]!;
    const key = `${svc.metadata.name}/${svc.spec.reals[Math.floor(rnd() * svc.spec.reals.length)]!.address}`;
    if (down.has(key)) down.delete(key);
    else down.add(key);
    state = rerenderServices(config, state, viewOf(down), new Set([svc.metadata.name]));
    t.deepEqual(state, renderDesiredState(config, 'lb-1', viewOf(down)), `after flip ${i + 1} (${key})`);
  }
  t.true(state.services.some((s) => s.reals.some((r) => !r.healthy)), 'the sequence ends with unhealthy reals');
});

test('only the named services are rendered again; the others keep their objects', (t) => {
  const base = renderDesiredState(config, 'lb-1');
  const down = new Set([`web/${REALS[0]}`, `api/${REALS[0]}`]);
  const next = rerenderServices(config, base, viewOf(down), new Set(['web']));
  const byName = (s: typeof base, n: string) => s.services.find((x) => x.name === n)!;
  t.not(byName(next, 'web').digest, byName(base, 'web').digest, 'web left the real out');
  t.is(byName(next, 'api'), byName(base, 'api'), 'api (not named) is the very same object, though its view changed');
  t.is(next.reals, base.reals);
  t.is(next.vips, base.vips);
  // benign: naming a service whose health did not change gives the same content
  t.deepEqual(rerenderServices(config, base, undefined, new Set(['dns', 'mail'])), base);
});
