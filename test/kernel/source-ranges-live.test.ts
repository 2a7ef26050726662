// Source ranges in the real maps (lb_source_ranges, an LPM trie pinned beside the other maps): read back from a
// running data plane and from the pins alone (`gitlb plan --live`), so an apply ends in an empty plan, a changed
// list shows as its map operations, an entry removed or added behind the daemon's back is drift that the next
// converge repairs, and an execute that fails half way leaves the trie as it was. Nothing attached, no traffic.
import test from 'ava';
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { openLbDataPlane, readPinnedLbLive } from '../../src/bpf/dataplane/index.js';
import { SOURCE_RANGE_ALLOW, encodeSourceRangeKey } from '../../src/bpf/dataplane/codec.js';
import { readConfigDir } from '../../src/reconciler/source/read-dir.js';
import { parseConfig } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { desiredSourceRanges } from '../../src/render/ops.js';
import { describeOp } from '../../src/render/ops-text.js';
import { runPlan } from '../../src/cli/commands/plan.js';
import { tempDir } from '../helpers/cli-repo.js';
import { applyTo, planOf } from '../lib/converge.js';

const ROOT = `/sys/fs/bpf/glb${process.pid}-srlive`;
test.after.always(() => rmSync(ROOT, { recursive: true, force: true }));

test('source ranges: applied, read back live and from the pins, changed, drifted, rolled back', async (t) => {
  const tmp = await tempDir('source-ranges-live');
  const dir = tmp.path;
  cpSync('sample-config-repo', dir, { recursive: true });
  const setRanges = (file: string, ranges: string | null) => {
    const path = join(dir, 'services', file);
    const text = readFileSync(path, 'utf8').replace(/\n {2}sourceRanges: .*/, '');
    writeFileSync(path, ranges === null ? text : text.replace(/\n {2}reals:/, `\n  sourceRanges: ${ranges}\n  reals:`));
  };
  const render = async () => {
    const r = parseConfig(await readConfigDir(dir));
    if (!r.model) throw new Error(JSON.stringify(r.diagnostics));
    return renderDesiredState(r.model, 'lb-1');
  };
  const live = (...extra: string[]) => runPlan(['--live', '--node', 'lb-1', '--head-dir', dir, '--pin-root', ROOT, ...extra]);
  setRanges('web.yaml', '[198.51.100.0/24, 192.0.2.0/24]');
  setRanges('web6.yaml', '["2001:db8:c::/48"]');
  const pins = join(ROOT, 'lb-1');
  const dp = await openLbDataPlane({ pinRoot: pins });
  try {
    const first = await render();
    t.deepEqual(desiredSourceRanges(first).map((r) => r.prefix).sort(), ['192.0.2.0/24', '198.51.100.0/24', '2001:db8:c::/48']);
    await applyTo(dp, first);
    const want = desiredSourceRanges(first);
    t.deepEqual((await dp.readLive()).sourceRanges, want, 'read back from the running data plane');
    t.deepEqual(readPinnedLbLive(pins).sourceRanges, want, 'and from the pins alone');
    t.true(readPinnedLbLive(pins).vips.filter((v) => v.sourceRanges).length >= 2, 'the listeners of both services check');
    t.regex((await live('--exit-code')).stdout, /: nothing to do\n$/);

    // a changed list: one put, one delete, printed by plan --live as the data plane plans them
    setRanges('web.yaml', '[192.0.2.0/24, 203.0.113.128/25]');
    const changed = await live('--exit-code');
    t.is(changed.code, 3);
    const web = (await render()).services.find((s) => s.name === 'web')!.id;
    t.regex(changed.stdout, new RegExp(`lb_source_ranges\\[service ${web}, 203\\.0\\.113\\.128/25\\] = allow`));
    t.regex(changed.stdout, new RegExp(`delete lb_source_ranges\\[service ${web}, 198\\.51\\.100\\.0/24\\]`));
    const second = await render();
    t.deepEqual((await planOf(dp, second)).map((o) => o.op), ['source-range.put', 'source-range.delete']);
    await applyTo(dp, second);
    t.regex((await live()).stdout, /nothing to do/);

    // drift: an entry deleted and a foreign one added behind the daemon's back
    const trie = BpfMap.open(join(pins, 'lb_source_ranges'), 'lb_source_ranges');
    try {
      t.true(trie.delete(encodeSourceRangeKey(web, '192.0.2.0/24')));
      trie.update(encodeSourceRangeKey(web, '0.0.0.0/0'), SOURCE_RANGE_ALLOW);
    } finally {
      trie.close();
    }
    const repair = await planOf(dp, second);
    t.deepEqual(repair.map(describeOp).sort(), [
      `delete lb_source_ranges[service ${web}, 0.0.0.0/0]`, `lb_source_ranges[service ${web}, 192.0.2.0/24] = allow`]);
    await applyTo(dp, second);
    t.deepEqual((await dp.readLive()).sourceRanges, desiredSourceRanges(second));

    // an execute that fails half way leaves the trie as it was (a put undone by a delete, a delete by a put)
    const extra = { serviceId: web, prefix: '192.0.2.0/25' };
    const gone = desiredSourceRanges(second)[0]!;
    await t.throwsAsync(dp.execute([{ op: 'source-range.put', range: extra }, { op: 'source-range.delete', range: gone },
      { op: 'real.delete', real: { id: 4242, address: '198.51.100.99', family: 4 } }, { op: 'bogus' } as never]));
    t.deepEqual((await dp.readLive()).sourceRanges, desiredSourceRanges(second), 'both undone');
    // a put of a prefix the trie holds writes nothing (and an enclosing prefix is not mistaken for it)
    const again = await dp.execute([{ op: 'source-range.put', range: gone }]);
    t.is(again.mapWrites, 0);
    const nested = await dp.execute([{ op: 'source-range.put', range: extra }]);
    t.is(nested.mapWrites, 1, '192.0.2.0/25 is new although 192.0.2.0/24 answers a lookup of it');
    t.deepEqual((await planOf(dp, second)).map(describeOp), [`delete lb_source_ranges[service ${web}, 192.0.2.0/25]`]);

    // ranges removed: the listeners stop checking first, the entries go after them
    setRanges('web.yaml', null);
    setRanges('web6.yaml', null);
    const open = await render();
    const ops = await planOf(dp, open);
    const lastVip = ops.map((o) => o.op).lastIndexOf('vip.put');
    const firstDelete = ops.findIndex((o) => o.op === 'source-range.delete');
    t.true(lastVip >= 0 && firstDelete > lastVip, ops.map(describeOp).join('\n'));
    await applyTo(dp, open);
    t.deepEqual(readPinnedLbLive(pins).sourceRanges, []);
    t.false(readPinnedLbLive(pins).vips.some((v) => v.sourceRanges));
  } finally {
    dp.close();
    await tmp.remove();
  }
});
