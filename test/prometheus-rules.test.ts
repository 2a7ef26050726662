// The shipped alert rules, evaluated by Prometheus's own promtool on recorded series
// (deploy/prometheus/gitlb-rules.test.yml): digest disagreement, node behind, revision disagreement, real down,
// drops rising, SNAT ports near exhaustion — each fires when it should and stays quiet when it should.
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = join(fileURLToPath(new URL('.', import.meta.url)), '..', 'deploy', 'prometheus');

test('promtool: the alert rules are valid and pass their recorded-series tests', (t) => {
  const check = spawnSync('promtool', ['check', 'rules', 'gitlb-rules.yml'], { cwd: dir, encoding: 'utf8' });
  t.is(check.status, 0, check.stdout + check.stderr);
  const run = spawnSync('promtool', ['test', 'rules', 'gitlb-rules.test.yml'], { cwd: dir, encoding: 'utf8' });
  t.is(run.status, 0, run.stdout + run.stderr);
  t.regex(run.stdout + run.stderr, /SUCCESS/);
});

test('promtool: a wrong expectation fails (the rule tests can fail)', (t) => {
  const broken = execFileSync('sed', ['s/summary: "lb-1 drops 20 packets\\/s (no_real)"/summary: "lb-1 drops 21 packets\\/s (no_real)"/',
    join(dir, 'gitlb-rules.test.yml')], { encoding: 'utf8' });
  t.not(broken, '', 'sed produced the altered file');
  const r = spawnSync('sh', ['-c', 'f=$(mktemp -p . .broken-XXXX.yml) && cat > "$f" && promtool test rules "$f"; rc=$?; rm -f "$f"; exit $rc'],
    { cwd: dir, input: broken, encoding: 'utf8' });
  t.not(r.status, 0, 'promtool must report the mismatch');
});
