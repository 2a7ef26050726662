// The shipped alert rules, evaluated by Prometheus's own promtool on recorded series
// (deploy/prometheus/gitlb-rules.test.yml): digest disagreement, node behind, revision disagreement, real down,
// drops rising, SNAT ports near exhaustion, XDP fell back — each fires when it should and stays quiet when it should; and the
// dashboard's queries are valid PromQL.
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = join(fileURLToPath(new URL('..', import.meta.url)), '..', 'deploy', 'prometheus');

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

test('promtool: every query of the Grafana dashboard is valid PromQL', (t) => {
  const dash = JSON.parse(readFileSync(join(dir, '..', 'grafana', 'gitlb-dashboard.json'), 'utf8')) as
    { panels: { title: string; targets?: { expr: string }[] }[]; templating: { list: { query: string }[] } };
  const exprs = dash.panels.flatMap((p) => (p.targets ?? []).map((x) => ({ title: p.title, expr: x.expr })));
  t.true(exprs.length >= 20, `${exprs.length} queries`);
  // Grafana's variables as Prometheus would see them after substitution
  const promql = (e: string) => e.replaceAll('$__rate_interval', '1m').replaceAll('$node', '.*');
  const rules = 'groups:\n  - name: dashboard\n    rules:\n' +
    exprs.map((x, i) => `      - record: dashboard_query_${i}\n        expr: ${JSON.stringify(promql(x.expr))}\n`).join('');
  const dirTmp = mkdtempSync(join(tmpdir(), 'gitlb-dash-'));
  try {
    writeFileSync(join(dirTmp, 'dashboard.yml'), rules);
    const r = spawnSync('promtool', ['check', 'rules', join(dirTmp, 'dashboard.yml')], { encoding: 'utf8' });
    t.is(r.status, 0, r.stdout + r.stderr);
  } finally {
    rmSync(dirTmp, { recursive: true, force: true });
  }
});
