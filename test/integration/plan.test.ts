// `gitlb plan`: the pure diff (models built directly) and the command on real Git repositories.
import test from 'ava';
import { planChanges, invalidHeadPlan } from '../../src/render/plan.js';
import { formatPlanMarkdown, formatPlanText, planToJson } from '../../src/render/plan-format.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { cluster, model, node, real, service } from '../helpers/model-builder.js';
import { commitTree, configFiles, git, gitlb, tempDir, writeTree } from '../helpers/cli-repo.js';
import { EXIT_CHANGES, runPlan } from '../../src/cli/commands/plan.js';
import { readConfigAtRevision } from '../../src/reconciler/source/git-tree.js';
import { UsageError } from '../../src/cli/command.js';

function baseModel() {
  const reals = Array.from({ length: 10 }, (_, i) => real(`198.51.100.${i + 1}`));
  return model({
    cluster: cluster({ tableSize: 4093 }),
    nodes: [node('lb-1', { role: 'lb', allowedVips: ['192.0.2.0/24'] })],
    services: [
      service('web', { vip: '192.0.2.10', reals }),
      service('api', { vip: '192.0.2.11', reals: [real('198.51.100.50'), real('198.51.100.51')] }),
    ],
  });
}
const svc = (m: ReturnType<typeof baseModel>, name: string) => m.services.find((s) => s.metadata.name === name)!;

test('identical revisions: no change', (t) => {
  const plan = planChanges(baseModel(), baseModel());
  t.false(plan.changed);
  t.deepEqual(plan.services, []);
  t.is(plan.unchangedServices, 2);
  t.regex(formatPlanText(plan), /no changes/);
});

test('removing one of ten reals: its share moves, survivors keep their entries', (t) => {
  const head = baseModel();
  svc(head, 'web').spec.reals = svc(head, 'web').spec.reals.filter((r) => r.address !== '198.51.100.3');
  const plan = planChanges(baseModel(), head);
  t.true(plan.changed);
  t.is(plan.services.length, 1);
  const web = plan.services[0]!;
  t.is(web.change, 'changed');
  t.deepEqual(web.reals.filter((r) => r.change !== 'unchanged').map((r) => [r.address, r.change]), [['198.51.100.3', 'removed']]);
  // The removed real owned ~10%; Maglev moves little else, so the moved share is close to its share.
  const removed = web.reals.find((r) => r.address === '198.51.100.3')!;
  t.true(web.movedShare >= removed.shareBefore);
  t.true(web.movedShare <= removed.shareBefore + 0.02, `moved ${web.movedShare}`);
  // Cross-check the moved count against the rendered rings, compared by address.
  const before = renderDesiredState(baseModel(), 'lb-1').services.find((s) => s.name === 'web')!;
  const after = renderDesiredState(head, 'lb-1').services.find((s) => s.name === 'web')!;
  const addr = (s: typeof before, id: number) => s.reals.find((r) => r.realId === id)?.address;
  let moved = 0;
  for (let j = 0; j < before.ring.length; j++) if (addr(before, before.ring[j]!) !== addr(after, after.ring[j]!)) moved++;
  t.is(web.movedEntries, moved);
  const losing = web.reals.filter((r) => r.entriesAfter < r.entriesBefore).map((r) => r.address);
  t.deepEqual(losing, ['198.51.100.3']);
  const text = formatPlanText(plan);
  t.regex(text, /service web \(192\.0\.2\.10\): changed/);
  t.regex(text, /real 198\.51\.100\.3 removed \(was weight \d+, active\); its open connections break: set state: drain first/);
  t.regex(text, /of table entries change backend/);
  // a real drained first is removed without the reminder
  const drained = baseModel();
  svc(drained, 'web').spec.reals = svc(drained, 'web').spec.reals.map((r) => (r.address === '198.51.100.3' ? { ...r, state: 'drain' as const } : r));
  const afterDrain = formatPlanText(planChanges(drained, head));
  t.regex(afterDrain, /real 198\.51\.100\.3 removed \(was weight \d+, drain\)\n/);
  t.notRegex(afterDrain, /open connections break/);
  t.regex(text, /loses: 198\.51\.100\.3/);
});

test('weight, state and mode changes are reported with gainers and losers', (t) => {
  const head = baseModel();
  const web = svc(head, 'web');
  web.spec.reals[0] = real('198.51.100.1', 3);
  web.spec.reals[1] = real('198.51.100.2', 1, 'drain');
  web.spec.dispatch = { mode: 'hybrid', encap: 'ipip' };
  const plan = planChanges(baseModel(), head);
  const p = plan.services.find((s) => s.name === 'web')!;
  t.deepEqual(p.fields.map((f) => `${f.field}:${f.before}->${f.after}`), ['dispatch.mode:dsr->hybrid', 'dispatch.encap:l2->ipip']);
  const r1 = p.reals.find((r) => r.address === '198.51.100.1')!;
  const r2 = p.reals.find((r) => r.address === '198.51.100.2')!;
  t.is(r1.change, 'changed');
  t.true(r1.shareAfter > r1.shareBefore * 2.5);
  t.is(r2.entriesAfter, 0);
  const markdown = formatPlanMarkdown(plan);
  t.regex(markdown, /^### gitlb plan: services 1 changed/);
  t.regex(markdown, /\| `web` \| `192\.0\.2\.10` \| changed \| \d+\.\d\d% \|/);
  t.regex(markdown, /weight 1 → 3/);
  t.regex(markdown, /state active → drain/);
  t.regex(markdown, /\| `198\.51\.100\.1` \| 10\.\d\d% \| 2\d\.\d\d% \| \+/);
  const json = JSON.parse(planToJson(plan));
  t.is(json.services[0].name, 'web');
  t.is(json.changed, true);
});

test('plan warns about dispatch changes: encap changes are safe in any apply order, DSR <-> SNAT is not', (t) => {
  const withDispatch = (dispatch: { mode: 'dsr' | 'hybrid' | 'snat'; encap?: 'l2' | 'ipip' | 'ipopt' }) => {
    const m = baseModel();
    svc(m, 'web').spec.dispatch = dispatch;
    return m;
  };
  const warnings = (a: Parameters<typeof withDispatch>[0], b: Parameters<typeof withDispatch>[0]) =>
    planChanges(withDispatch(a), withDispatch(b)).services.find((s) => s.name === 'web')?.warnings ?? [];

  const l2ToIpip = warnings({ mode: 'dsr', encap: 'l2' }, { mode: 'dsr', encap: 'ipip' });
  t.is(l2ToIpip.length, 1);
  t.regex(l2ToIpip[0]!, /80\/TCP dsr-l2 -> dsr-ipip: backends accept l2, ipip, gue and ipopt .* any order/);
  t.regex(l2ToIpip[0]!, /open connections keep working/);
  const ipipToIpopt = warnings({ mode: 'dsr', encap: 'ipip' }, { mode: 'dsr', encap: 'ipopt' });
  t.regex(ipipToIpopt[0]!, /dsr-ipip -> dsr-ipopt: .*connections open at the switch break/);

  const toSnat = warnings({ mode: 'dsr', encap: 'l2' }, { mode: 'snat' });
  t.is(toSnat.length, 1);
  t.regex(toSnat[0]!, /80\/TCP dsr-l2 -> snat: between DSR and SNAT .* can fail until every node has applied/);
  // hybrid keeps TCP on DSR: only the encap of the TCP port changes, no DSR <-> SNAT flip.
  t.deepEqual(warnings({ mode: 'dsr', encap: 'l2' }, { mode: 'hybrid', encap: 'l2' }), []);
  t.deepEqual(warnings({ mode: 'dsr', encap: 'l2' }, { mode: 'dsr', encap: 'l2' }), []);

  // An ipopt targetPort change is order-dependent (backends check it): warned; with snat it is not.
  const retarget = (encap: 'ipopt' | undefined, mode: 'dsr' | 'snat') => {
    const [b, h] = [withDispatch({ mode, ...(encap && { encap }) }), withDispatch({ mode, ...(encap && { encap }) })];
    svc(b, 'web').spec.ports = [{ port: 80, protocol: 'TCP', targetPort: 8080 }];
    svc(h, 'web').spec.ports = [{ port: 80, protocol: 'TCP', targetPort: 9090 }];
    return planChanges(b, h).services.find((s) => s.name === 'web')!.warnings;
  };
  const ipoptRetarget = retarget('ipopt', 'dsr');
  t.is(ipoptRetarget.length, 1);
  t.regex(ipoptRetarget[0]!, /^targetPort of 80\/TCP 8080 -> 9090 with ipopt: /);
  t.deepEqual(retarget(undefined, 'snat'), []);

  const plan = planChanges(withDispatch({ mode: 'dsr', encap: 'l2' }), withDispatch({ mode: 'dsr', encap: 'ipopt' }));
  t.regex(formatPlanText(plan), /\n {2}warning: dispatch 80\/TCP dsr-l2 -> dsr-ipopt: /);
  t.regex(formatPlanMarkdown(plan), /\n- \*\*warning\*\*: dispatch 80\/TCP dsr-l2 → dsr-ipopt: /);
  t.is(JSON.parse(planToJson(plan)).services[0].warnings.length, 1);
});

test('added and removed services, table size change moves everything, node changes', (t) => {
  const head = baseModel();
  head.services = head.services.filter((s) => s.metadata.name !== 'api');
  head.services.push(service('new', { vip: '192.0.2.12', reals: [real('198.51.100.60')] }));
  svc(head, 'web').spec.maglev = { tableSize: 1021 };
  head.nodes.push(node('lb-2', { role: 'lb', allowedVips: ['192.0.2.0/24'] }));
  head.nodes[0]!.spec.allowedVips = ['192.0.2.0/25'];
  const plan = planChanges(baseModel(), head);
  const by = Object.fromEntries(plan.services.map((s) => [s.name, s]));
  t.is(by.api!.change, 'removed');
  t.is(by.new!.change, 'added');
  t.is(by.web!.movedShare, 1);
  t.deepEqual(by.web!.fields.map((f) => f.field), ['maglev.tableSize']);
  t.deepEqual(plan.nodes.map((n) => `${n.name}:${n.change}:${n.fields.map((f) => f.field).join(',')}`), ['lb-1:changed:allowedVips', 'lb-2:added:']);
  const text = formatPlanText(plan);
  t.regex(text, /service api \(192\.0\.2\.11\): removed/);
  t.regex(text, /service new \(192\.0\.2\.12\): added/);
});

test('seed change is a cluster change and reshuffles every table', (t) => {
  const head = baseModel();
  head.cluster.spec.maglev.seed = 'AAAAAAAAAAAAAAAA';
  const plan = planChanges(baseModel(), head);
  t.deepEqual(plan.cluster.map((c) => c.field), ['maglev.seed']);
  t.is(plan.services.length, 2);
  // A new seed is a new random permutation: about (1 - 1/N) of the entries move.
  t.true(plan.services.find((s) => s.name === 'web')!.movedShare > 0.8);
  t.true(plan.services.find((s) => s.name === 'api')!.movedShare > 0.3);
});

test('a conntrack.newFlowRate change is a cluster change (every lb node rewrites lb_config), moving no flow', (t) => {
  const head = baseModel();
  head.cluster.spec.conntrack.newFlowRate = 5000;
  const plan = planChanges(baseModel(), head);
  t.is(baseModel().cluster.spec.conntrack.newFlowRate, 0, 'the base has the guard off');
  t.deepEqual(plan.cluster, [{ field: 'conntrack.newFlowRate', before: '0', after: '5000' }]);
  t.true(plan.changed);
  t.deepEqual(plan.services, []);
  t.regex(formatPlanText(plan), /cluster conntrack\.newFlowRate: 0 -> 5000/);
});

test('no valid base: everything is added; invalid head: diagnostics only', (t) => {
  const plan = planChanges(null, baseModel());
  t.true(plan.changed);
  t.deepEqual(plan.services.map((s) => s.change), ['added', 'added']);
  const bad = invalidHeadPlan([{ severity: 'error', file: 'services/web.yaml', line: 4, col: 7, message: 'weight must be >= 0' }]);
  t.false(bad.headValid);
  t.regex(formatPlanText(bad), /services\/web\.yaml:4:7: error: weight must be >= 0/);
  t.regex(formatPlanMarkdown(bad), /\*\*Errors in head\*\*/);
});

// ---------- the command, on real Git repositories made with the git CLI ----------


const tenReals = Array.from({ length: 10 }, (_, i) => `{address: 198.51.100.${i + 1}}`);

test('gitlb plan --base/--head reads revisions from Git objects: no change, changes, invalid head', async (t) => {
  const repo = await tempDir('plan');
  try {
    await git(repo.path, 'init', '-q', '-b', 'main');
    await commitTree(repo.path, configFiles({ webReals: tenReals }), 'base');
    await git(repo.path, 'tag', '-a', '-m', 'base release', 'v1'); // annotated: peeled to its commit
    const changed = [...tenReals.slice(0, 9), '{address: 198.51.100.10, weight: 300}', '{address: 198.51.100.11}'];
    await commitTree(repo.path, configFiles({ webReals: changed }), 'weights');
    await commitTree(repo.path, configFiles({ webReals: ['{address: 198.51.100.1, weight: -4}'] }), 'broken');
    // Uncommitted edits in the working tree must not matter: revisions are read from objects.
    await writeTree(repo.path, { 'services/web.yaml': 'garbage: [' });

    // The command's core runs in-process (the machine is shared; spawning tsx is slow); one real spawn below.
    const same = await runPlan(['--repo', repo.path, '--base', 'v1', '--head', 'main~1~1']);
    t.is(same.code, 0);
    t.regex(same.stdout, /no changes \(2 services unchanged\)/);

    const text = await runPlan(['--repo', repo.path, '--base', 'v1', '--head', 'HEAD^']);
    t.is(text.code, 0, 'changes are a success without --exit-code');
    t.regex(text.stdout, /service web \(192\.0\.2\.10\): changed/);
    t.regex(text.stdout, /real 198\.51\.100\.10: weight 100 -> 300/);
    t.regex(text.stdout, /real 198\.51\.100\.11 added \(weight 100, active\)/);
    t.regex(text.stdout, /gains: 198\.51\.100\.10/);
    t.notRegex(text.stdout, /service dns/);

    const sha = await git(repo.path, 'rev-parse', '--short=10', 'HEAD~1');
    const md = await gitlb(['plan', '--repo', repo.path, '--base', 'v1', '--head', sha, '--format', 'markdown']);
    t.is(md.code, 0, md.stderr);
    t.regex(md.stdout, /^### gitlb plan: services 1 changed, 0 added, 0 removed, 1 unchanged/);
    t.regex(md.stdout, /\| `web` \| `192\.0\.2\.10` \| changed \| \d+\.\d\d% \|/);

    const json = await runPlan(['--repo', repo.path, '--base', 'v1', '--head', 'HEAD~1', '--format', 'json', '--exit-code']);
    t.is(json.code, EXIT_CHANGES);
    const plan = JSON.parse(json.stdout);
    const web = plan.services.find((s: { name: string }) => s.name === 'web');
    t.true(web.movedShare > 0 && web.movedShare < 0.5);

    const bad = await runPlan(['--repo', repo.path, '--base', 'v1', '--head', 'HEAD']);
    t.is(bad.code, 1, 'an invalid head is a failure, not a usage error');
    t.regex(bad.stdout, /does not validate/);
    t.regex(bad.stdout, /services\/web\.yaml:\d+:\d+: error: .*weight/);

    await t.throwsAsync(runPlan(['--repo', repo.path, '--base', 'nope', '--head', 'HEAD']), { message: /unknown revision 'nope'/ });

    // Bare repositories work too; only YAML config files are read (README.md is skipped).
    await git(repo.path, 'clone', '-q', '--bare', '.', 'bare.git');
    const fromBare = await readConfigAtRevision(`${repo.path}/bare.git`, 'v1');
    t.deepEqual(fromBare, await readConfigAtRevision(repo.path, 'v1'));
    t.deepEqual(fromBare.map((f) => f.path), ['cluster.yaml', 'nodes/lb.yaml', 'services/dns.yaml', 'services/web.yaml']);
    await t.throwsAsync(readConfigAtRevision(repo.path, 'v1~5'), { message: /has no parent/ });
  } finally {
    await repo.remove();
  }
});

test('gitlb plan --base-dir/--head-dir compares directories; usage errors', async (t) => {
  const a = await tempDir('plan-a');
  const b = await tempDir('plan-b');
  try {
    await writeTree(a.path, configFiles({ webReals: tenReals }));
    await writeTree(b.path, configFiles({ webReals: tenReals.slice(1) }));
    const r = await runPlan(['--base-dir', a.path, '--head-dir', b.path, '--exit-code']);
    t.is(r.code, EXIT_CHANGES);
    t.regex(r.stdout, /real 198\.51\.100\.1 removed/);
    await t.throwsAsync(runPlan(['--base-dir', a.path]), { instanceOf: UsageError, message: 'no head: give --head REV or --head-dir DIR' });
    await t.throwsAsync(runPlan(['--base-dir', a.path, '--head-dir', b.path, '--format', 'yaml']), { instanceOf: UsageError });
  } finally {
    await a.remove();
    await b.remove();
  }
});

test('gitlb plan mixes a revision and a directory: --base HEAD --head-dir . plans uncommitted edits, and the reverse', async (t) => {
  const repo = await tempDir('plan-mixed');
  const other = await tempDir('plan-mixed-other');
  try {
    await git(repo.path, 'init', '-q', '-b', 'main');
    await commitTree(repo.path, configFiles({ webReals: tenReals }), 'base');

    // A clean working tree: the same config as HEAD.
    const clean = await runPlan(['--repo', repo.path, '--base', 'HEAD', '--head-dir', repo.path, '--exit-code']);
    t.is(clean.code, 0, clean.stdout);
    t.regex(clean.stdout, /no changes \(2 services unchanged\)/);

    // Uncommitted edits: a real removed from a tracked file, a new untracked service file.
    await writeTree(repo.path, {
      'services/web.yaml': configFiles({ webReals: tenReals.slice(1) })['services/web.yaml']!,
      'services/extra.yaml': 'apiVersion: gitlb/v1\nkind: Service\nmetadata: {name: extra}\nspec:\n  vip: 192.0.2.20\n  ports: [{port: 80}]\n  dispatch: {mode: snat}\n  reals: [{address: 198.51.100.70}]\n',
    });
    const edits = await runPlan(['--repo', repo.path, '--base', 'HEAD', '--head-dir', repo.path, '--exit-code']);
    t.is(edits.code, EXIT_CHANGES, edits.stdout);
    t.regex(edits.stdout, /service web \(192\.0\.2\.10\): changed/);
    t.regex(edits.stdout, /real 198\.51\.100\.1 removed/);
    t.regex(edits.stdout, /service extra \(192\.0\.2\.20\): added/);
    // The reverse: the directory is the base, a revision the head (what going back to HEAD would do).
    const back = await runPlan(['--repo', repo.path, '--base-dir', repo.path, '--head', 'HEAD']);
    t.is(back.code, 0, back.stdout);
    t.regex(back.stdout, /real 198\.51\.100\.1 added/);
    t.regex(back.stdout, /service extra \(192\.0\.2\.20\): removed/);
    // The head directory may be anywhere, not only the repository's working tree.
    await writeTree(other.path, configFiles({ webReals: [...tenReals, '{address: 198.51.100.11}'] }));
    const elsewhere = await runPlan(['--repo', repo.path, '--base', 'HEAD', '--head-dir', other.path]);
    t.regex(elsewhere.stdout, /real 198\.51\.100\.11 added/);

    // --path applies to both sides: the revision's subdirectory and the directory's.
    await git(repo.path, 'checkout', '-q', '--', '.');
    await git(repo.path, 'clean', '-qfd');
    await commitTree(repo.path, Object.fromEntries(Object.entries(configFiles({ webReals: tenReals })).map(([p, c]) => [`lb/${p}`, c])), 'config in lb/');
    await writeTree(repo.path, { 'lb/services/web.yaml': configFiles({ webReals: tenReals.slice(0, 9) })['services/web.yaml']! });
    const sub = await runPlan(['--repo', repo.path, '--path', 'lb', '--base', 'HEAD', '--head-dir', repo.path]);
    t.is(sub.code, 0, sub.stdout);
    t.regex(sub.stdout, /real 198\.51\.100\.10 removed/);

    // The user's command, as typed in the working tree: --repo defaults to the current directory.
    const typed = await gitlb(['plan', '--path', 'lb', '--base', 'HEAD', '--head-dir', '.'], repo.path);
    t.is(typed.code, 0, typed.stderr);
    t.regex(typed.stdout, /real 198\.51\.100\.10 removed/);
  } finally {
    await repo.remove();
    await other.remove();
  }
});

test('gitlb plan: each side needs one of its two options; errors name the option', async (t) => {
  const repo = await tempDir('plan-errors');
  const plain = await tempDir('plan-errors-plain');
  try {
    await git(repo.path, 'init', '-q', '-b', 'main');
    await commitTree(repo.path, configFiles({ webReals: tenReals }), 'base');
    const usage = async (args: string[], message: string) => {
      const err = await t.throwsAsync(runPlan(args), { instanceOf: UsageError });
      t.is(err?.message, message, args.join(' '));
    };
    await usage([], 'give the base (--base REV or --base-dir DIR) and the head (--head REV or --head-dir DIR)');
    await usage(['--head-dir', repo.path], 'no base: give --base REV or --base-dir DIR');
    await usage(['--base', 'HEAD'], 'no head: give --head REV or --head-dir DIR');
    await usage(['--base', 'HEAD', '--base-dir', repo.path, '--head-dir', repo.path], '--base and --base-dir both give the base: give one of them');
    await usage(['--base', 'HEAD', '--head', 'HEAD', '--head-dir', repo.path], '--head and --head-dir both give the head: give one of them');
    await usage(['--base', '', '--head-dir', repo.path], '--base: empty revision');
    await usage(['--repo', repo.path, '--base-dir', repo.path, '--head-dir', repo.path], '--repo holds the revisions of --base/--head: with --base-dir and --head-dir there is none');

    // Runtime failures (exit 1) name the option too.
    await t.throwsAsync(runPlan(['--repo', repo.path, '--base', 'nope', '--head-dir', repo.path]), { message: "--base: unknown revision 'nope'" });
    await t.throwsAsync(runPlan(['--repo', repo.path, '--base-dir', repo.path, '--head', 'HEAD~3']), { message: /^--head: revision 'HEAD~3': commit [0-9a-f]{12} has no parent #1$/ });
    await t.throwsAsync(runPlan(['--repo', plain.path, '--base', 'HEAD', '--head-dir', repo.path]), {
      message: `--repo: ${plain.path}: not a Git repository (no .git directory, not a bare repository)`,
    });
    await t.throwsAsync(runPlan(['--repo', repo.path, '--base', 'HEAD', '--head-dir', `${plain.path}/nope`]), { message: `--head-dir ${plain.path}/nope: no such directory` });
    const typed = await gitlb(['plan', '--base', 'HEAD', '--head-dir', '.'], plain.path);
    t.is(typed.code, 1);
    t.is(typed.stderr, 'gitlb plan: --repo (default .): .: not a Git repository (no .git directory, not a bare repository)\n');
  } finally {
    await repo.remove();
    await plain.remove();
  }
});

test('gitlb plan --live reads --head / --head-dir under --path, like the other sides', async (t) => {
  const repo = await tempDir('plan-live-path');
  try {
    // The config in lb/, something that is not valid config beside it: only --path keeps it out.
    const inLb = Object.fromEntries(Object.entries(configFiles({ webReals: tenReals })).map(([p, c]) => [`lb/${p}`, c]));
    await git(repo.path, 'init', '-q', '-b', 'main');
    await commitTree(repo.path, { ...inLb, 'other/broken.yaml': 'not: [yaml' }, 'config in lb/');
    const pins = `${repo.path}/no-pins`; // a node without pins plans everything, when asked to (--empty-live)
    for (const head of [['--head-dir', repo.path], ['--repo', repo.path, '--head', 'HEAD']]) {
      const r = await runPlan(['--live', '--node', 'lb-1', '--pin-root', pins, '--empty-live', '--path', 'lb', ...head]);
      t.is(r.code, 0, r.stdout);
      t.regex(r.stdout, /^lb-1 \(lb, pins .*\): \d+ map operations/m, head.join(' '));
    }
    await t.throwsAsync(runPlan(['--live', '--node', 'lb-1', '--pin-root', pins, '--repo', repo.path, '--head', 'nope']), { message: "--head: unknown revision 'nope'" });
  } finally {
    await repo.remove();
  }
});

test('gitlb plan --repo: a .git file (separate git dir, submodule, linked worktree) is followed; HEAD is that working tree\'s own', async (t) => {
  const tmp = await tempDir('plan-gitfile');
  try {
    const wt = `${tmp.path}/wt`;
    await git(tmp.path, 'init', '-q', '-b', 'main', '--separate-git-dir', `${tmp.path}/sep.git`, wt);
    await commitTree(wt, configFiles({ webReals: tenReals }), 'base');
    await writeTree(wt, { 'services/web.yaml': configFiles({ webReals: tenReals.slice(1) })['services/web.yaml']! });
    const r = await runPlan(['--repo', wt, '--base', 'HEAD', '--head-dir', wt]);
    t.is(r.code, 0, r.stdout);
    t.regex(r.stdout, /real 198\.51\.100\.1 removed/);

    // A linked worktree on another branch, one commit further (real .1 gone): its HEAD, not the main tree's, is the
    // base, so its own uncommitted edit (real .2 gone too) is the only change; the main tree still plans .1.
    const linked = `${tmp.path}/linked`;
    await git(wt, 'worktree', 'add', '-q', '-b', 'other', linked);
    await commitTree(linked, configFiles({ webReals: tenReals.slice(1) }), 'drop .1');
    await writeTree(linked, { 'services/web.yaml': configFiles({ webReals: tenReals.slice(2) })['services/web.yaml']! });
    const own = await runPlan(['--repo', linked, '--base', 'HEAD', '--head-dir', linked]);
    t.is(own.code, 0, own.stdout);
    t.regex(own.stdout, /real 198\.51\.100\.2 removed/);
    t.notRegex(own.stdout, /198\.51\.100\.1\b/);
    // refs and objects are the common ones: the main tree's branch reads from the worktree too
    const main = await runPlan(['--repo', linked, '--base', 'main', '--head', 'other']);
    t.is(main.code, 0, main.stdout);
    t.regex(main.stdout, /real 198\.51\.100\.1 removed/);
    // a detached HEAD in the worktree is followed as well
    await git(linked, 'checkout', '-qf', '--detach', 'main');
    const detached = await runPlan(['--repo', linked, '--base', 'HEAD', '--head', 'other']);
    t.regex(detached.stdout, /real 198\.51\.100\.1 removed/);
  } finally {
    await tmp.remove();
  }
});

test('plan warns when targetPort moves away from an explicit healthCheck.port that stays; lets the rest through', async (t) => {
  const { parseConfig } = await import('../../src/render/config/index.js');
  const enc = (s: string) => new TextEncoder().encode(s);
  const cfg = (targetPort: number, hc: string) => {
    const r = parseConfig([
      { path: 'cluster.yaml', content: enc('apiVersion: gitlb/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  maglev: {tableSize: 1021, seed: Z2l0bGItc2VlZC0x}\n') },
      { path: 'nodes/lb.yaml', content: enc('apiVersion: gitlb/v1\nkind: Node\nmetadata: {name: lb-1}\nspec:\n  role: lb\n  interface: eth0\n  allowedVips: [192.0.2.0/24]\n  snatAddress: 192.0.2.250\n') },
      { path: 'services/dns.yaml', content: enc(`apiVersion: gitlb/v1\nkind: Service\nmetadata: {name: dns}\nspec:\n  vip: 192.0.2.53\n  ports: [{port: 53, protocol: UDP, targetPort: ${targetPort}}]\n  dispatch: {mode: snat}\n${hc}  reals: [{address: 198.51.100.53}]\n`) },
    ]);
    t.deepEqual(r.diagnostics.filter((d) => d.severity === 'error'), []);
    return r.model!;
  };
  const warned = (a: ReturnType<typeof cfg>, b: ReturnType<typeof cfg>) => planChanges(a, b).diagnostics.filter((d) => /health check still probes/.test(d.message));
  const explicit = (port: number) => `  healthCheck: {type: tcp, port: ${port}}\n`;

  const w = warned(cfg(5353, explicit(5353)), cfg(5354, explicit(5353)));
  t.is(w.length, 1);
  t.like(w[0], { severity: 'warning', file: 'services/dns.yaml', line: 1 }); // the Service document; the message names the fields
  t.regex(w[0]!.message, /spec\.ports\[0\]\.targetPort 5353 -> 5354 .*the health check still probes port 5353; it will not see whether the reals serve the new targetPort 5354/);
  t.regex(formatPlanText(planChanges(cfg(5353, explicit(5353)), cfg(5354, explicit(5353)))), /health check still probes port 5353/);
  // Let through: the health port follows, no explicit port (the default follows), targetPort unchanged, a separate health port.
  t.deepEqual(warned(cfg(5353, explicit(5353)), cfg(5354, explicit(5354))), []);
  t.deepEqual(warned(cfg(5353, ''), cfg(5354, '')), []);
  t.deepEqual(warned(cfg(5353, explicit(5353)), cfg(5353, explicit(5353))), []);
  t.deepEqual(warned(cfg(5353, explicit(8080)), cfg(5354, explicit(8080))), []);
});
