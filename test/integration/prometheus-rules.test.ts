// The shipped alert rules, evaluated by Prometheus's own promtool on recorded series
// (deploy/prometheus/gitlb-rules.test.yml): digest disagreement, node behind, revision disagreement, real down,
// drops rising, SNAT ports near exhaustion, XDP fell back — each fires when it should and stays quiet when it should; and the
// dashboard's queries are valid PromQL.
import test from 'ava';
import { spawnSync } from 'node:child_process';
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
  const original = readFileSync(join(dir, 'gitlb-rules.test.yml'), 'utf8');
  const expected = 'summary: "lb-1 drops 20 packets/s (no_real)"';
  t.is(original.split(expected).length, 2, 'the expectation to break is in the test file exactly once');
  const broken = original.replace(expected, 'summary: "lb-1 drops 21 packets/s (no_real)"');
  t.not(broken, original);
  // Written beside the rules so the test file's relative rule_files path still resolves.
  const file = join(dir, `.broken-${process.pid}.yml`);
  writeFileSync(file, broken);
  try {
    const r = spawnSync('promtool', ['test', 'rules', file], { cwd: dir, encoding: 'utf8' });
    t.is(r.error, undefined, 'promtool ran');
    t.is(r.status, 1, 'promtool reports a failed test (exit 1), not a missing tool or a bad file');
    const out = r.stdout + r.stderr;
    t.regex(out, /FAILED/);
    // promtool names the mismatch: the expected alert carries the altered summary, the one it got the real one.
    t.regex(out, /21 packets\/s \(no_real\)/);
    t.regex(out, /20 packets\/s \(no_real\)/);
  } finally {
    rmSync(file, { force: true });
  }
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
