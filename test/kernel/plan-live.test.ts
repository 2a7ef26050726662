// `gitlb plan --live`: the exact map operations a node would perform, read from its pinned maps (real kernel
// maps, nothing attached). After an apply of the same revision it prints nothing to do; after a config change it
// lists the ops (a new conntrack.maxEntries: the table resizes), and running them through the data plane leaves
// nothing to do.
import test from 'ava';
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { readConfigDir } from '../../src/reconciler/source/read-dir.js';
import { parseConfig } from '../../src/render/config/index.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { runPlan } from '../../src/cli/commands/plan.js';
import { tempDir } from '../helpers/cli-repo.js';
import { applyTo, planOf } from '../lib/converge.js';

const ROOT = `/sys/fs/bpf/glb${process.pid}-plive`;
test.after.always(() => rmSync(ROOT, { recursive: true, force: true }));

test('plan --live: nothing to do after an apply; the ops of a change, which the data plane then executes', async (t) => {
  const tmp = await tempDir('plan-live');
  const dir = tmp.path;
  cpSync('sample-config-repo', dir, { recursive: true });
  const render = async () => renderDesiredState(parseConfig(await readConfigDir(dir)).model!, 'lb-1');
  const live = (...extra: string[]) => runPlan(['--live', '--node', 'lb-1', '--head-dir', dir, '--pin-root', ROOT, ...extra]);

  // Nothing pinned (a wrong --pin-root looks the same): an error naming the pin dir, not a plan of everything.
  const err = await t.throwsAsync(live());
  t.regex(err!.message, new RegExp(`nothing is pinned under ${ROOT}/lb-1: no live data plane of lb-1`));
  const fresh = await live('--empty-live');
  t.regex(fresh.stdout, new RegExp(`^nothing is pinned under ${ROOT}/lb-1: the live side is empty`));
  t.regex(fresh.stdout, /lb-1 \(lb, pins .*\): \d+ map operations/, 'asked for: a node without pins plans everything');
  const dp = await openLbDataPlane({ pinRoot: join(ROOT, 'lb-1') });
  try {
    await applyTo(dp, await render());
    const same = await live('--exit-code');
    t.is(same.code, 0);
    t.regex(same.stdout, /: nothing to do\n$/);

    // drop the last real of web: one new ring, one switch, the real deleted
    const web = join(dir, 'services/web.yaml');
    const text = readFileSync(web, 'utf8');
    const lines = text.split('\n');
    const lastReal = lines.map((l, i) => [l, i] as const).filter(([l]) => /^\s*- address:/.test(l)).pop()!;
    writeFileSync(web, lines.filter((_, i) => i !== lastReal[1] && i !== lastReal[1] + 1).join('\n'));
    const changed = await live('--exit-code');
    t.is(changed.code, 3);
    t.regex(changed.stdout, /new ring for service web/);
    t.regex(changed.stdout, /lb_rings\[\d+\] = ring [0-9a-f]{12} \(was [0-9a-f]{12}\)/);
    const json = JSON.parse((await live('--format', 'json')).stdout) as Array<{ op: string; ring?: unknown }>;
    t.true(json.some((o) => o.op === 'service.switch'));
    t.false(json.some((o) => 'ring' in o), 'rings are summarised, not listed');
    const desired = await render();
    t.deepEqual((await planOf(dp, desired)).map((o) => o.op), json.map((o) => o.op), 'the CLI prints what the data plane would do');
    await applyTo(dp, desired);
    t.regex((await live()).stdout, /nothing to do/);

    // a new conntrack.maxEntries: the resize of each table sized by it, first, as the data plane plans it
    const cluster = join(dir, 'cluster.yaml');
    writeFileSync(cluster, readFileSync(cluster, 'utf8').replace('maxEntries: 65536', 'maxEntries: 131072'));
    const resized = await live('--exit-code');
    t.is(resized.code, 3);
    t.regex(resized.stdout, /: 4 map operations\n +1\. resize lb_conntrack: 65536 -> 131072 entries/);
    t.regex(resized.stdout, /resize lb_snat_rev: 65536 -> 131072 entries/);
    t.regex(resized.stdout, /resize lb_affinity: 65536 -> 131072 entries/);
    const grown = await render();
    t.deepEqual((await planOf(dp, grown)).map((o) => o.op), ['table.resize', 'table.resize', 'table.resize', 'table.resize']);
    await applyTo(dp, grown);
    t.regex((await live()).stdout, /nothing to do/);
  } finally {
    dp.close();
    await tmp.remove();
  }
});
