// The verification state is local and monotonic (docs/security.md, "Config branch and local state"): the base of
// verification is the node's own last verified revision (<cache-dir>/state.json) or --trust-from, never its status
// file; under enforce a rewind is refused unless the operator allows it; a signer revoked in the verified history
// does not come back through a fork. Attacks as tests, each beside the benign change its guard must let through.
// Real git commits signed by the git CLI with ssh-keygen keys, served by git http-backend on 127.0.0.1; the
// in-memory data plane (no root).
import test from 'ava';
import { rmSync, existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { MemoryDataPlane } from '../../src/bpf/dataplane/memory.js';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { Reconciler, type ReconcilerOptions } from '../../src/reconciler/loops/reconciler.js';
import { startDaemon } from '../../src/reconciler/daemon.js';
import { getCondition } from '../../src/reconciler/status/conditions.js';
import { serialiseStatus } from '../../src/reconciler/status/status-doc.js';
import { readLocalState } from '../../src/reconciler/state/local-state.js';
import type { Trust } from '../../src/reconciler/verify/trust.js';
import { git, servedRepo, tempDir, configFiles, clusterYaml, nodeStatus, type ServedRepo } from '../reconcile-helpers.js';
import { sshKey, signerLine, signedCommit, trustOf, cli, type SshKey } from '../verify-helpers.js';

const REALS = ['198.51.100.10', '198.51.100.11'];
const quiet = { info: () => {}, warn: () => {} };
const cleanups: (() => unknown)[] = [];
test.after.always(async () => {
  for (const f of cleanups.reverse()) await f();
});

async function dir(name: string): Promise<string> {
  const d = await tempDir(name);
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

async function repo(): Promise<ServedRepo> {
  const r = await servedRepo();
  cleanups.push(() => r.cleanup());
  return r;
}

/** Config files for lb-1 with an optional Cluster.spec.verification. */
function config(o: { verification?: string; reals?: string[] } = {}): Record<string, string> {
  const files = configFiles(['lb-1'], o.reals ?? REALS);
  if (o.verification) files['cluster.yaml'] = clusterYaml() + `  verification: ${o.verification}\n`;
  return files;
}

const push = (r: ServedRepo, force = false) => git(r.work, 'push', '-q', ...(force ? ['-f'] : []), 'origin', 'main');

interface Keys { alice: SshKey; bob: SshKey; trustFile: string; trust: Trust }

async function keys(name: string): Promise<Keys> {
  const d = await dir(name);
  const alice = await sshKey(d, 'alice');
  const bob = await sshKey(d, 'bob');
  const text = `${signerLine('alice@example.com', alice)}\n`;
  const trustFile = join(d, 'trust');
  await writeFile(trustFile, text);
  return { alice, bob, trustFile, trust: await trustOf(text) };
}

function node(r: ServedRepo, dp: MemoryDataPlane, cache: string, o: Partial<ReconcilerOptions> = {}): Reconciler {
  return new Reconciler({ node: 'lb-1', branch: 'main', remote: new HttpRemote(r.url, join(cache, 'git')), dataPlane: dp, log: quiet, ...o });
}

/** An outcome in one short line for assertion messages (without its plan). */
const brief = (o: unknown): string => JSON.stringify(o, (k, v) => (k === 'plan' || k === 'report' ? undefined : v));

const cond = (rec: Reconciler, type: 'Ready' | 'Stalled') => getCondition(rec.snapshot().conditions, type);

/** Puts `status/lb-1.yaml` on the status branch saying lb-1 applied `applied`: what anyone with push access can do. */
async function forgeStatus(r: ServedRepo, applied: string): Promise<void> {
  const d = join(r.root, 'forgery');
  await git(r.root, 'init', '-q', '-b', 'gitlb-status', d);
  await mkdir(join(d, 'status'), { recursive: true });
  await writeFile(join(d, 'status', 'lb-1.yaml'), serialiseStatus(nodeStatus('lb-1', applied, { reals: REALS })));
  await git(d, 'add', '-A');
  await git(d, 'commit', '-q', '-m', 'status of lb-1');
  await git(d, 'push', '-qf', r.url, 'gitlb-status');
}

test('a forged status file of the node itself is no verification base: an empty cache under enforce verifies from the root', async (t) => {
  const outcomes: Record<string, { reason: string; applied: string | null; executed: number }> = {};
  for (const forged of [true, false]) {
    const r = await repo();
    const k = await keys(`forge-${forged}`);
    // An unsigned revision that switches verification off, and the status file claiming lb-1 applied it.
    const x = await signedCommit(r.work, config({ verification: '{ mode: off }' }), 'verification off', null);
    await push(r);
    if (forged) await forgeStatus(r, x);
    const dp = new MemoryDataPlane();
    const cacheDir = await dir('forge-cache');
    const d = await startDaemon({ repo: r.url, branch: 'main', node: 'lb-1', dataPlane: dp, cacheDir, trust: k.trust, log: quiet, writeStatus: false });
    try {
      await d.idle();
      const out = d.reconciler.lastOutcome!;
      t.is(out.kind, 'failed', `forged=${forged}: ${brief(out)}`);
      if (out.kind !== 'failed') continue;
      t.is(out.stage, 'verify');
      t.regex(out.reason, new RegExp(`commit ${x.slice(0, 12)} by test <test@example.com>: unsigned .*verified from the root commit: this node has no local state and no --trust-from`));
      t.like(getCondition(d.reconciler.snapshot().conditions, 'Stalled'), { status: 'True', reason: 'VerificationFailed' });
      outcomes[String(forged)] = { reason: out.reason.replaceAll(x.slice(0, 12), 'X'), applied: d.reconciler.appliedRevision, executed: dp.executed.length };

      // Later unsigned commits on top are refused too; nothing was recorded as verified.
      await signedCommit(r.work, config({ verification: '{ mode: off }', reals: ['198.51.100.66'] }), 'more', null);
      await push(r);
      d.trigger('test');
      await d.idle();
      t.is(d.reconciler.lastOutcome?.kind, 'failed');
      t.is(d.reconciler.appliedRevision, null);
      t.is(dp.executed.length, 0, 'nothing ever applied');
      t.false(existsSync(join(cacheDir, 'state.json')), 'no local state written');
    } finally {
      await d.stop();
    }
  }
  // The forgery changes nothing: the node refuses exactly as it does without it.
  t.deepEqual(outcomes['true'], outcomes['false']);
  t.deepEqual(outcomes['false'], { reason: outcomes['false']!.reason, applied: null, executed: 0 });
});

test('benign: a new node with --trust-from applies signed history on top of unsigned history; a restart with its local state writes nothing', async (t) => {
  const r = await repo();
  const k = await keys('trust-from');
  const legacy = await signedCommit(r.work, config(), 'before signing', null);
  const signed = await signedCommit(r.work, config({ reals: [...REALS, '198.51.100.12'] }), 'signed', { ssh: k.alice });
  await push(r);
  const dp = new MemoryDataPlane();
  const cacheDir = await dir('tf-cache');
  const o = { repo: r.url, branch: 'main', node: 'lb-1', dataPlane: dp, cacheDir, trust: k.trust, log: quiet, writeStatus: false };
  const d1 = await startDaemon({ ...o, trustFrom: legacy });
  await d1.idle();
  await d1.stop();
  t.is(d1.reconciler.appliedRevision, signed, brief(d1.reconciler.lastOutcome));
  const state = await readLocalState(join(cacheDir, 'state.json'));
  t.deepEqual(state, { node: 'lb-1', branch: 'main', appliedRevision: signed, verification: null });
  t.false(existsSync(join(cacheDir, 'state.json.tmp')));
  const executed = dp.executed.length;

  // Restarted without --trust-from: the local state is the base; nothing changed, so nothing is written.
  const d2 = await startDaemon(o);
  await d2.idle();
  await d2.stop();
  t.is(d2.reconciler.appliedRevision, signed);
  t.is(d2.reconciler.counters.mapWrites + d2.reconciler.counters.mapDeletes, 0);
  t.true(dp.executed.slice(executed).every((plan) => plan.length === 0), 'empty plans only');
  t.is(d2.reconciler.snapshot().lastAttempt?.result, 'unchanged');

  // A normal fast-forward, signed: applied on top of the local state.
  const next = await signedCommit(r.work, config(), 'back to two reals', { ssh: k.alice });
  await push(r);
  const d3 = await startDaemon(o);
  await d3.idle();
  await d3.stop();
  t.is(d3.reconciler.appliedRevision, next);
  t.is((await readLocalState(join(cacheDir, 'state.json')))?.appliedRevision, next);
});

test('force-push rewind under enforce: refused (NonFastForward) with the unsigned commit on top; --allow-rewind-to applies the rewind, not the unsigned commit', async (t) => {
  const r = await repo();
  const k = await keys('rewind');
  const c1 = await signedCommit(r.work, config({ verification: '{ mode: warn }' }), 'warn while rolling out', { ssh: k.alice });
  const c2 = await signedCommit(r.work, config({ verification: '{ mode: enforce }' }), 'enforce', { ssh: k.alice });
  const c3 = await signedCommit(r.work, config({ verification: '{ mode: enforce }', reals: [...REALS, '198.51.100.12'] }), 'add a real', { ssh: k.alice });
  await push(r);
  const dp = new MemoryDataPlane();
  const cache = await dir('rw-cache');
  const lb = node(r, dp, cache, { trust: k.trust });
  t.is((await lb.reconcile('t')).kind, 'applied');
  t.is(lb.appliedRevision, c3);
  const live = await dp.readLive();

  // The attacker rewinds main to c2 (signed, but not what the node verified last), then adds an unsigned commit.
  await git(r.work, 'reset', '-q', '--hard', c2);
  await push(r, true);
  const o1 = await lb.reconcile('t');
  t.true(o1.kind === 'failed' && o1.stage === 'verify', brief(o1));
  if (o1.kind === 'failed')
    t.regex(o1.reason, new RegExp(`^${c2.slice(0, 12)} does not descend from the last verified revision ${c3.slice(0, 12)} .*--allow-rewind-to <commit>; roll back with git revert`));
  t.like(cond(lb, 'Stalled'), { status: 'True', reason: 'NonFastForward' });
  t.like(cond(lb, 'Ready'), { status: 'False', reason: 'NonFastForward' });
  t.is(lb.counters.forcePushes, 1);
  const unsigned = await signedCommit(r.work, config({ verification: '{ mode: enforce }', reals: ['198.51.100.66'] }), 'unsigned', null);
  await push(r);
  const o2 = await lb.reconcile('t');
  t.true(o2.kind === 'failed' && o2.stage === 'verify', brief(o2));
  t.is(cond(lb, 'Stalled')?.reason, 'NonFastForward');
  t.is(lb.appliedRevision, c3, 'last good kept');
  t.deepEqual(await dp.readLive(), live, 'data plane untouched');

  // Restarted with --allow-rewind-to c2 while the unsigned commit is on top: still refused, as unsigned.
  const allowed = (rev: string, on = dp) => node(r, on, cache, { trust: k.trust, lastVerified: { revision: c3, verification: { mode: 'enforce', formats: ['ssh', 'openpgp'], signersFile: 'trust/allowed_signers' } }, allowRewindTo: rev });
  const lb2 = allowed(c2);
  const o3 = await lb2.reconcile('t');
  t.true(o3.kind === 'failed' && o3.stage === 'verify', brief(o3));
  if (o3.kind === 'failed') t.regex(o3.reason, new RegExp(`commit ${unsigned.slice(0, 12)} by test <test@example.com>: unsigned`));
  t.is(cond(lb2, 'Stalled')?.reason, 'VerificationFailed');
  t.deepEqual(await dp.readLive(), live);

  // An abbreviated id allows nothing, not even the tip it abbreviates (a tip matching a short prefix is easy to grind).
  await git(r.work, 'reset', '-q', '--hard', c2);
  await push(r, true);
  const short = await allowed(c2.slice(0, 10), new MemoryDataPlane()).reconcile('t');
  t.true(short.kind === 'failed' && short.stage === 'verify', brief(short));
  if (short.kind === 'failed') t.regex(short.reason, new RegExp(`it is not --allow-rewind-to ${c2.slice(0, 10)} nor one of its descendants`));

  // The branch back at c2, allowed by its full id: the rewind applies (said in the warnings); the unsigned commit on top is refused.
  const lb3 = allowed(c2, new MemoryDataPlane());
  const o4 = await lb3.reconcile('t');
  t.is(o4.kind, 'applied', brief(o4));
  if (o4.kind === 'applied') t.regex(o4.warnings.join('\n'), new RegExp(`rewind allowed by --allow-rewind-to ${c2}: ${c2.slice(0, 12)} does not descend`));
  t.is(lb3.appliedRevision, c2);
  await git(r.work, 'reset', '-q', '--hard', unsigned);
  await push(r, true);
  const o5 = await lb3.reconcile('t');
  t.true(o5.kind === 'failed' && o5.stage === 'verify', brief(o5));
  if (o5.kind === 'failed') t.regex(o5.reason, /: unsigned/);
  t.is(lb3.appliedRevision, c2);

  // An allowed rewind may not lower the policy: c1 says warn.
  await git(r.work, 'reset', '-q', '--hard', c1);
  await push(r, true);
  const lb4 = allowed(c1, new MemoryDataPlane());
  const o6 = await lb4.reconcile('t');
  t.true(o6.kind === 'failed' && o6.stage === 'verify', brief(o6));
  if (o6.kind === 'failed') t.regex(o6.reason, /would lower the verification policy \(mode enforce -> warn\)/);
  t.is(cond(lb4, 'Stalled')?.reason, 'NonFastForward');

  // Benign: a rollback by `git revert` (a new, signed commit descending from c3) applies.
  await git(r.work, 'reset', '-q', '--hard', c3);
  await push(r, true);
  t.is((await lb.reconcile('t')).kind, 'unchanged');
  await git(r.work, '-c', 'gpg.format=ssh', '-c', `user.signingkey=${k.alice.private}`, 'revert', '--no-edit', '-S', c3);
  const revert = await git(r.work, 'rev-parse', 'HEAD');
  await push(r);
  const o7 = await lb.reconcile('t');
  t.is(o7.kind, 'applied', brief(o7));
  t.is(lb.appliedRevision, revert);
  t.is(cond(lb, 'Ready')?.status, 'True');
  t.is((await dp.readLive()).reals.length, 2, 'the added real is gone again');
  t.is(live.reals.length, 3);
});

test('warn and off: a rewind is applied and said out loud (warn protects nothing)', async (t) => {
  const r = await repo();
  const k = await keys('rewind-warn');
  const c1 = await signedCommit(r.work, config({ verification: '{ mode: warn }' }), 'one', { ssh: k.alice });
  await signedCommit(r.work, config({ verification: '{ mode: warn }', reals: ['198.51.100.12'] }), 'two', { ssh: k.alice });
  await push(r);
  const lb = node(r, new MemoryDataPlane(), await dir('rwarn-cache'), { trust: k.trust });
  t.is((await lb.reconcile('t')).kind, 'applied');
  await git(r.work, 'reset', '-q', '--hard', c1);
  await push(r, true);
  const o = await lb.reconcile('t');
  t.is(o.kind, 'applied', JSON.stringify(o));
  if (o.kind === 'applied') t.regex(o.warnings.join('\n'), /^force-push: [0-9a-f]{12} does not descend from the last verified revision/m);
  t.is(lb.counters.forcePushes, 1);
});

test('a signer revoked in the verified history does not come back through a fork: refused by the daemon and by gitlb verify', async (t) => {
  const r = await repo();
  const k = await keys('revoke');
  const list = (...lines: string[]) => ({ 'trust/allowed_signers': `${lines.join('\n')}\n` });
  const withBob = list(signerLine('alice@example.com', k.alice), signerLine('bob@example.com', k.bob));
  await signedCommit(r.work, { ...config(), ...withBob }, 'team: alice and bob', { ssh: k.alice });
  const c2 = await signedCommit(r.work, config({ reals: [...REALS, '198.51.100.12'] }), 'bob adds a real', { ssh: k.bob });
  const c3 = await signedCommit(r.work, list(signerLine('alice@example.com', k.alice)), 'revoke bob', { ssh: k.alice });
  await push(r);
  const dp = new MemoryDataPlane();
  const cache = await dir('rv-cache');
  const lb = node(r, dp, cache, { trust: k.trust });
  t.is((await lb.reconcile('t')).kind, 'applied');
  t.is(lb.appliedRevision, c3);

  // Bob forks from c2, where he was still listed, and force-pushes.
  await git(r.work, 'reset', '-q', '--hard', c2);
  const fork = await signedCommit(r.work, config({ reals: ['198.51.100.66'] }), 'bob is back', { ssh: k.bob });
  await push(r, true);
  const o1 = await lb.reconcile('t');
  t.true(o1.kind === 'failed' && o1.stage === 'verify', brief(o1));
  t.is(cond(lb, 'Stalled')?.reason, 'NonFastForward');
  // Even with the rewind allowed, his commit is judged by the verified list (c3's): unknown-key.
  const lb2 = node(r, dp, cache, { trust: k.trust, lastVerified: { revision: c3, verification: null }, allowRewindTo: fork });
  const o2 = await lb2.reconcile('t');
  t.true(o2.kind === 'failed' && o2.stage === 'verify', brief(o2));
  if (o2.kind === 'failed') t.regex(o2.reason, new RegExp(`commit ${fork.slice(0, 12)} by test <test@example.com>: unknown-key`));
  t.is(lb2.snapshot().verification?.failures[0]?.reason, 'unknown-key');
  t.is(lb.appliedRevision, c3);
  t.is((await dp.readLive()).reals.length, 3, 'data plane untouched');

  // gitlb verify: from c3 the fork is unknown-key; from c2 (where bob was listed) it verifies.
  const v = await cli('verify', '--repo', r.work, '--range', `${c3}..${fork}`, '--trust', k.trustFile);
  t.is(v.code, 1, v.stdout);
  t.regex(v.stdout, new RegExp(`REFUSED commit ${fork.slice(0, 12)} by test <test@example.com>: unknown-key`));
  t.regex(v.stdout, new RegExp(`note: ${fork.slice(0, 12)} does not descend from ${c3.slice(0, 12)}`));
  const ok = await cli('verify', '--repo', r.work, '--range', `${c2}..${fork}`, '--trust', k.trustFile);
  t.is(ok.code, 0, ok.stdout);

  // Benign: a rotation signed by a trusted key on top of c3 brings bob back; his next commit applies.
  await git(r.work, 'reset', '-q', '--hard', c3);
  await signedCommit(r.work, withBob, 'bob rejoins', { ssh: k.alice });
  const byBob = await signedCommit(r.work, config({ reals: ['198.51.100.13', '198.51.100.14'] }), 'bob changes reals', { ssh: k.bob });
  await push(r, true);
  const o3 = await lb.reconcile('t');
  t.is(o3.kind, 'applied', brief(o3));
  t.is(lb.appliedRevision, byBob);
});

test('an allowed rewind may not bring a revoked signer back: refused when the target\'s signers list trusts a key the verified one does not', async (t) => {
  const r = await repo();
  const k = await keys('rewind-revoked');
  const list = (...lines: string[]) => ({ 'trust/allowed_signers': `${lines.join('\n')}\n` });
  const enforce = (reals = REALS) => config({ verification: '{ mode: enforce }', reals });
  await signedCommit(r.work, { ...enforce(), ...list(signerLine('alice@example.com', k.alice), signerLine('bob@example.com', k.bob)) }, 'team: alice and bob', { ssh: k.alice });
  const c2 = await signedCommit(r.work, enforce([...REALS, '198.51.100.12']), 'add a real', { ssh: k.alice });
  const c3 = await signedCommit(r.work, list(signerLine('alice@example.com', k.alice)), 'revoke bob', { ssh: k.alice });
  await push(r);
  const dp = new MemoryDataPlane();
  const cache = await dir('rwr-cache');
  const lb = node(r, dp, cache, { trust: k.trust });
  t.is((await lb.reconcile('t')).kind, 'applied');
  t.is(lb.appliedRevision, c3);
  const live = await dp.readLive();

  // The operator rolls back to c2 (signed by alice), whose list still holds bob: refused, naming bob's entry.
  await git(r.work, 'reset', '-q', '--hard', c2);
  await push(r, true);
  const lastVerified = { revision: c3, verification: lb.verifiedPolicy };
  const lb2 = node(r, dp, cache, { trust: k.trust, lastVerified, allowRewindTo: c2 });
  const o1 = await lb2.reconcile('t');
  t.true(o1.kind === 'failed' && o1.stage === 'verify', brief(o1));
  if (o1.kind === 'failed') t.regex(o1.reason, new RegExp(`rewind to ${c2.slice(0, 12)} would trust signers the last verified revision ${c3.slice(0, 12)} does not \\(trust/allowed_signers: bob@example.com \\(trust/allowed_signers@${c2.slice(0, 12)}:2\\)\\)`));
  t.is(cond(lb2, 'Stalled')?.reason, 'NonFastForward');
  t.is(lb2.appliedRevision, c3);
  // So bob's commit on top of c2 is not applied either.
  await signedCommit(r.work, enforce(['198.51.100.66']), 'bob is back', { ssh: k.bob });
  await push(r);
  const o2 = await lb2.reconcile('t');
  t.true(o2.kind === 'failed' && o2.stage === 'verify', brief(o2));
  t.deepEqual(await dp.readLive(), live, 'data plane untouched');

  // Benign: a rewind to a commit on top of c2 that revokes bob again (signed by alice) is allowed and applies.
  await git(r.work, 'reset', '-q', '--hard', c2);
  const c2b = await signedCommit(r.work, list(signerLine('alice@example.com', k.alice)), 'revoke bob on the old line', { ssh: k.alice });
  await push(r, true);
  const lb3 = node(r, new MemoryDataPlane(), cache, { trust: k.trust, lastVerified, allowRewindTo: c2b });
  const o3 = await lb3.reconcile('t');
  t.is(o3.kind, 'applied', brief(o3));
  t.is(lb3.appliedRevision, c2b);
});

test('the policy in force is kept in the local state: a node that lost its Git cache still enforces its last verified policy', async (t) => {
  // No --trust: the repository's own list and `mode: enforce` are the node's only trust (trust on first use).
  const r = await repo();
  const k = await keys('policy-state');
  const team = { 'trust/allowed_signers': `${signerLine('alice@example.com', k.alice)}\n` };
  const c1 = await signedCommit(r.work, { ...config({ verification: '{ mode: enforce }' }), ...team }, 'enforce', { ssh: k.alice });
  await push(r);
  const dp = new MemoryDataPlane();
  const cacheDir = await dir('ps-cache');
  const o = { repo: r.url, branch: 'main', node: 'lb-1', dataPlane: dp, cacheDir, log: quiet, writeStatus: false };
  const d1 = await startDaemon(o);
  await d1.idle();
  await d1.stop();
  t.is(d1.reconciler.appliedRevision, c1);
  t.like(await readLocalState(join(cacheDir, 'state.json')), { appliedRevision: c1, verification: { mode: 'enforce', signersFile: 'trust/allowed_signers' } });

  // The Git cache is gone (state.json kept), and an unsigned commit that switches verification off is pushed.
  rmSync(join(cacheDir, 'git'), { recursive: true, force: true });
  const unsigned = await signedCommit(r.work, { ...config({ verification: '{ mode: off }', reals: ['198.51.100.66'] }) }, 'off', null);
  await push(r);
  const d2 = await startDaemon(o);
  await d2.idle();
  await d2.stop();
  const out = d2.reconciler.lastOutcome!;
  t.true(out.kind === 'failed' && out.stage === 'verify', brief(out));
  if (out.kind === 'failed') t.regex(out.reason, new RegExp(`commit ${unsigned.slice(0, 12)} by test <test@example.com>: unsigned`));
  t.is(d2.reconciler.appliedRevision, c1);

  // Benign: a signed commit by the listed key, on top of the unsigned one removed again, applies.
  await git(r.work, 'reset', '-q', '--hard', c1);
  const signed = await signedCommit(r.work, config({ verification: '{ mode: enforce }', reals: ['198.51.100.12'] }), 'signed change', { ssh: k.alice });
  await push(r, true);
  const d3 = await startDaemon(o);
  await d3.idle();
  await d3.stop();
  t.is(d3.reconciler.appliedRevision, signed, brief(d3.reconciler.lastOutcome));
});

test('a local state from before the policy was recorded, whose revision the cache cannot give: enforce, not off (fail closed)', async (t) => {
  // No --trust: the repository's list is the only trust. c1 enforces and lists alice.
  const r = await repo();
  const k = await keys('old-state');
  const team = { 'trust/allowed_signers': `${signerLine('alice@example.com', k.alice)}\n` };
  const c1 = await signedCommit(r.work, { ...config({ verification: '{ mode: enforce }' }), ...team }, 'enforce', { ssh: k.alice });
  // The branch is rewritten to a new, unsigned history; the node's cache is empty, its state names c1 without a policy.
  await git(r.work, 'checkout', '-q', '--orphan', 'other');
  const forged = await signedCommit(r.work, { ...config({ verification: '{ mode: off }', reals: ['198.51.100.66'] }), ...team }, 'new history', null);
  await git(r.work, 'push', '-q', '-f', 'origin', 'other:main');
  const dp = new MemoryDataPlane();
  const lb = node(r, dp, await dir('old-state-cache'), { lastVerified: { revision: c1 } });
  const o1 = await lb.reconcile('t');
  t.true(o1.kind === 'failed' && o1.stage === 'verify', brief(o1));
  if (o1.kind === 'failed') t.regex(o1.reason, new RegExp(`^${forged.slice(0, 12)} does not descend from the last verified revision ${c1.slice(0, 12)}`));
  t.is(lb.snapshot().verification?.mode, 'enforce');
  t.is(lb.appliedRevision, c1);
  t.deepEqual((await dp.readLive()).reals, [], 'nothing applied');

  // Benign: the same old state whose revision the cache does give adopts its config (mode enforce) and applies a
  // signed descendant.
  await git(r.work, 'checkout', '-q', 'main');
  await git(r.work, 'reset', '-q', '--hard', c1);
  const signed = await signedCommit(r.work, config({ verification: '{ mode: enforce }', reals: ['198.51.100.12'] }), 'signed change', { ssh: k.alice });
  await push(r, true);
  const lb2 = node(r, new MemoryDataPlane(), await dir('old-state-cache2'), { lastVerified: { revision: c1 } });
  const o2 = await lb2.reconcile('t');
  t.is(o2.kind, 'applied', brief(o2));
  t.is(lb2.appliedRevision, signed);
});

test('gitlb run --allow-rewind-to takes a full 40-hex commit id only', async (t) => {
  for (const rev of ['HEAD~1', 'abcd', 'a'.repeat(39)]) {
    const bad = await cli('run', '--repo', '/nonexistent', '--node', 'lb-1', '--role', 'lb', '--once', '--allow-rewind-to', rev);
    t.is(bad.code, 2, bad.stdout);
    t.regex(bad.stdout, /--allow-rewind-to.*expected a full 40-character commit id/);
  }
});
