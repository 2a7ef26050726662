// Commit signature verification in the reconcile loop: commits signed by the real git CLI (ssh-keygen keys,
// gpg keys), pushed to git http-backend, applied to the real LB data plane (pinned under a per-run bpffs
// directory, attached to nothing). Refusals keep the last good revision, are named in status and never reverted.
import test from 'ava';
import { readFileSync, rmSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { Reconciler } from '../../src/reconciler/loops/reconciler.js';
import { StatusWriter } from '../../src/reconciler/status/status-writer.js';
import { parseStatus, type NodeStatus } from '../../src/reconciler/status/status-doc.js';
import type { Trust } from '../../src/reconciler/verify/trust.js';
import { loadSigningKey, type CommitSigner } from '../../src/reconciler/verify/signing-key.js';
import { verifyCommitRaw } from '../../src/reconciler/verify/verify-commit.js';
import { git, servedRepo, tempDir, configFiles, clusterYaml, serviceYaml, type ServedRepo } from '../reconcile-helpers.js';
import { sshKey, signerLine, gpgKey, signedCommit, tamperedCommit, trustOf, cli, type SshKey } from '../verify-helpers.js';

const execFileP = promisify(execFile);
const MAIN = new URL('../../src/cli/main.ts', import.meta.url).pathname;
const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-verify`;
const quiet = { info: () => {}, warn: () => {} };
const cleanups: (() => unknown)[] = [];
test.after.always(async () => {
  for (const f of cleanups.reverse()) await f();
  rmSync(PIN_BASE, { recursive: true, force: true });
});

const REALS = ['198.51.100.10', '198.51.100.11'];
const ajv = new Ajv2020({ allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validStatus = ajv.compile(JSON.parse(readFileSync(new URL('../../schemas/status.schema.json', import.meta.url), 'utf8')));

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

/** Config files with an optional Cluster.spec.verification / rollback policy. */
function config(o: { verification?: string; policy?: 'auto' | 'manual'; reals?: string[] } = {}): Record<string, string> {
  const files = configFiles(['lb-1', 'lb-2', 'lb-3'], o.reals ?? REALS, { policy: o.policy });
  if (o.verification) files['cluster.yaml'] = clusterYaml({ policy: o.policy }) + `  verification: ${o.verification}\n`;
  return files;
}

async function node(r: ServedRepo, name: string, trust: Trust | null, signer?: CommitSigner): Promise<Reconciler> {
  const dp = await openLbDataPlane({ pinRoot: join(PIN_BASE, `${name}-${Math.random().toString(36).slice(2, 8)}`) });
  cleanups.push(() => dp.close());
  const remote = new HttpRemote(r.url, join(await dir(name), 'git'));
  const writer = new StatusWriter({ remote, branch: 'gitlb-status', node: name, signer });
  return new Reconciler({
    node: name,
    branch: 'main',
    remote,
    dataPlane: dp,
    trust,
    signer,
    log: quiet,
    statusSink: async (s, _b, why) => void (await writer.write(s, why)),
  });
}

async function statusOf(r: ServedRepo, name: string, rec: Reconciler): Promise<NodeStatus> {
  await rec.flushStatus();
  await git(r.work, 'fetch', '-q', 'origin', 'gitlb-status');
  const s = parseStatus(await git(r.work, 'show', `FETCH_HEAD:status/${name}.yaml`));
  if (!validStatus(s)) throw new Error(`status does not match its schema: ${JSON.stringify(validStatus.errors)}`);
  return s;
}


async function push(r: ServedRepo, force = false): Promise<void> {
  await git(r.work, 'push', '-q', ...(force ? ['-f'] : []), 'origin', 'main');
}

/** `gitlb …` as a user runs it, in a child process (for `run`, which owns the process). */
async function gitlb(...args: string[]): Promise<{ code: number; stdout: string }> {
  try {
    const { stdout, stderr } = await execFileP(process.execPath, ['--import', 'tsx', MAIN, ...args]);
    return { code: 0, stdout: stdout + stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout + e.stderr };
  }
}

test.serial('enforce: a signed chain applies; unsigned, unknown-key, tampered and expired-key commits are refused', async (t) => {
  const r = await repo();
  const keys = await dir('keys');
  const alice = await sshKey(keys, 'alice');
  const mallory = await sshKey(keys, 'mallory');
  const carol = await gpgKey(keys, 'Carol <carol@example.com>');
  const year = 365 * 86400;
  const olga = await gpgKey(keys, 'Olga <olga@example.com>', { expire: '1y', fakedTime: Math.floor(Date.now() / 1000) - 2 * year });
  cleanups.push(() => carol.close(), () => olga.close());
  const trustFile = join(keys, 'trust');
  const trustText = `${signerLine('alice@example.com', alice)}\n${await carol.publicArmored()}${await olga.publicArmored()}`;
  await writeFile(trustFile, trustText);
  const lb = await node(r, 'lb-1', await trustOf(trustText));

  // Signed chain, SSH then OpenPGP: applied; the signer is recorded.
  await signedCommit(r.work, config({ policy: 'auto' }), 'initial', { ssh: alice });
  const c2 = await signedCommit(r.work, config({ policy: 'auto', reals: [...REALS, '198.51.100.12'] }), 'add a real', { gpg: carol });
  await push(r);
  t.is((await lb.reconcile('t')).kind, 'applied');
  let s = await statusOf(r, 'lb-1', lb);
  t.is(s.appliedRevision, c2);
  t.is(s.verification?.result, 'verified');
  t.is(s.verification?.commits, 2);
  t.regex(s.appliedCommit?.signer ?? '', /^Carol <carol@example.com> \(OpenPGP /);
  t.is(s.appliedCommit?.subject, 'add a real');

  // An unsigned commit under a signed tip: the tip is not applied, nothing is reverted (policy is auto).
  const unsigned = await signedCommit(r.work, config({ policy: 'auto', reals: ['198.51.100.20'] }), 'sneaky', null);
  const tip = await signedCommit(r.work, { 'README.md': 'signed on top\n' }, 'looks fine', { ssh: alice });
  await push(r);
  const live = await lb.dataPlane.readLive();
  const o = await lb.reconcile('t');
  t.is(o.kind, 'failed');
  if (o.kind === 'failed') {
    t.is(o.stage, 'verify');
    t.regex(o.reason, new RegExp(`commit ${unsigned.slice(0, 12)} by test <test@example.com>: unsigned`));
    t.is(o.rollback, undefined, 'no automatic revert of an unverified commit');
  }
  t.deepEqual(await lb.dataPlane.readLive(), live, 'data plane untouched');
  s = await statusOf(r, 'lb-1', lb);
  t.is(s.appliedRevision, c2, 'last good revision kept');
  t.is(s.lastAttempt?.stage, 'verify');
  const ready = s.conditions?.find((c) => c.type === 'Ready');
  t.like(ready, { status: 'False', reason: 'VerificationFailed' });
  t.regex(ready?.message ?? '', new RegExp(`${tip.slice(0, 12)} failed at verify: commit ${unsigned.slice(0, 12)} by test <test@example.com>: unsigned`));
  t.like(s.conditions?.find((c) => c.type === 'Stalled'), { status: 'True', reason: 'VerificationFailed' });
  t.like(s.verification, { mode: 'enforce', revision: tip, result: 'refused', commits: 2 });
  t.like(s.verification?.failures[0], { commit: unsigned, author: 'test <test@example.com>', reason: 'unsigned' });
  t.is(s.counters.rollbacksPushed, 0);
  t.is(await git(r.work, 'ls-remote', 'origin', 'refs/heads/main').then((l) => l.split('\t')[0]), tip, 'branch not reverted');
  const st = await cli('status', '--repo', r.url);
  t.is(st.code, 1, st.stdout);
  t.regex(st.stdout, new RegExp(`lb-1: condition Ready=False VerificationFailed: ${tip.slice(0, 12)} failed at verify: commit ${unsigned.slice(0, 12)} by test <test@example.com>: unsigned`));
  // The same range offline, as CI would check it.
  const v = await cli('verify', '--repo', r.work, '--range', `${c2}..${tip}`, '--trust', trustFile);
  t.is(v.code, 1, v.stdout);
  t.regex(v.stdout, /REFUSED commit [0-9a-f]{12} by test <test@example.com>: unsigned/);
  t.regex(v.stdout, /1 of 2 commit\(s\) refused/);
  // Over HTTP, from a shallow temporary cache that deepens until BASE is there.
  const vu = await cli('verify', '--repo', r.url, '--range', `${c2}..main`, '--trust', trustFile);
  t.is(vu.code, 1, vu.stdout);
  t.regex(vu.stdout, new RegExp(`REFUSED commit ${unsigned.slice(0, 12)} .*: unsigned[\\s\\S]*ok +commit ${tip.slice(0, 12)} .*alice@example.com`));

  // Unknown key, tampered commit, expired OpenPGP key: each refused with its reason.
  const refusal = async (make: () => Promise<string>, reason: string) => {
    await git(r.work, 'reset', '-q', '--hard', c2);
    const bad = await make();
    await git(r.work, 'reset', '-q', '--hard', bad);
    await push(r, true);
    const out = await lb.reconcile('t');
    t.is(out.kind, 'failed', reason);
    if (out.kind === 'failed') t.regex(out.reason, new RegExp(`commit ${bad.slice(0, 12)} by .*: ${reason}`), reason);
    const sr = await statusOf(r, 'lb-1', lb);
    t.is(sr.verification?.failures[0]?.reason, reason);
    t.is(sr.conditions?.find((c) => c.type === 'Ready')?.reason, 'VerificationFailed');
    t.is(lb.appliedRevision, c2);
  };
  await refusal(() => signedCommit(r.work, { 'README.md': 'm\n' }, 'by mallory', { ssh: mallory }), 'unknown-key');
  await refusal(async () => {
    const donor = await signedCommit(r.work, { 'README.md': 'honest\n' }, 'honest', { ssh: alice });
    await git(r.work, 'reset', '-q', '--hard', c2);
    const victim = await signedCommit(r.work, config({ policy: 'auto', reals: ['198.51.100.66'] }), 'honest', null);
    return tamperedCommit(r.work, victim, donor);
  }, 'bad-signature');
  await refusal(() => signedCommit(r.work, { 'README.md': 'o\n' }, 'by olga', { gpg: olga }), 'expired-key');

  // A signed commit on top of the last good one: applied, the condition is gone, history names the signer.
  await git(r.work, 'reset', '-q', '--hard', c2);
  const c3 = await signedCommit(r.work, config({ policy: 'auto' }), 'back to two reals', { ssh: alice });
  await push(r, true);
  t.is((await lb.reconcile('t')).kind, 'applied');
  s = await statusOf(r, 'lb-1', lb);
  t.is(s.appliedRevision, c3);
  t.like(s.conditions?.find((c) => c.type === 'Ready'), { status: 'True' });
  t.false(s.conditions?.some((c) => c.reason === 'VerificationFailed'));
  t.notRegex((await cli('status', '--repo', r.url)).stdout, /VerificationFailed/);
  const h = await cli('history', '--repo', r.url);
  t.regex(h.stdout, /SUBJECT\s+SIGNED BY/);
  t.regex(h.stdout, new RegExp(`${c3.slice(0, 12)}\\s+[0-9a-f]{12}\\s+test <test@example.com>\\s+back to two reals\\s+alice@example.com \\(SSH SHA256:`));
  t.regex(h.stdout, new RegExp(`${c2.slice(0, 12)}\\s+[0-9a-f]{12}\\s+test <test@example.com>\\s+add a real\\s+Carol <carol@example.com>`));
});

test.serial('warn mode applies unverified commits and records them', async (t) => {
  const r = await repo();
  const keys = await dir('keys-warn');
  const alice = await sshKey(keys, 'alice');
  const lb = await node(r, 'lb-1', await trustOf(signerLine('alice@example.com', alice)));
  await signedCommit(r.work, config({ verification: '{ mode: warn }' }), 'initial', { ssh: alice });
  await push(r);
  t.is((await lb.reconcile('t')).kind, 'applied');
  const unsigned = await signedCommit(r.work, config({ verification: '{ mode: warn }', reals: ['198.51.100.30'] }), 'unsigned change', null);
  await push(r);
  const o = await lb.reconcile('t');
  t.is(o.kind, 'applied');
  if (o.kind === 'applied') t.regex(o.warnings.join(), new RegExp(`verification \\(warn\\): commit ${unsigned.slice(0, 12)} by test <test@example.com>: unsigned`));
  const s = await statusOf(r, 'lb-1', lb);
  t.is(s.appliedRevision, unsigned);
  t.like(s.verification, { mode: 'warn', result: 'warned', commits: 1 });
  t.is(s.verification?.failures[0]?.commit, unsigned);
  t.is(s.appliedCommit?.signer, null);
  t.false(s.conditions?.some((c) => c.reason === 'VerificationFailed') ?? false, 'warn mode records, it does not raise a condition');
});

test.serial('signers list rotation: accepted when signed by a key trusted before the change, refused when signed only by the new key', async (t) => {
  const r = await repo();
  const keys = await dir('keys-rot');
  const alice = await sshKey(keys, 'alice');
  const bob = await sshKey(keys, 'bob');
  const dave = await sshKey(keys, 'dave');
  const lb = await node(r, 'lb-1', await trustOf(signerLine('alice@example.com', alice)));
  const list = (...lines: string[]) => ({ 'trust/allowed_signers': `# team\n${lines.join('\n')}\n` });
  await signedCommit(r.work, { ...config(), ...list(signerLine('alice@example.com', alice)) }, 'initial', { ssh: alice });
  await push(r);
  t.is((await lb.reconcile('t')).kind, 'applied');
  // Alice adds Bob; Bob's first commit comes after that change: both verified in one range.
  await signedCommit(r.work, list(signerLine('alice@example.com', alice), signerLine('bob@example.com', bob)), 'add bob', { ssh: alice });
  const byBob = await signedCommit(r.work, config({ reals: ['198.51.100.40'] }), 'bob changes reals', { ssh: bob });
  await push(r);
  const o = await lb.reconcile('t');
  t.is(o.kind, 'applied', JSON.stringify(o));
  t.regex((await statusOf(r, 'lb-1', lb)).appliedCommit?.signer ?? '', /^bob@example.com /);
  // Dave adds himself and signs that change himself: not trusted before the change, refused.
  const selfAdd = await signedCommit(r.work, list(signerLine('alice@example.com', alice), signerLine('bob@example.com', bob), signerLine('dave@example.com', dave)), 'add dave', {
    ssh: dave,
  });
  await push(r);
  const o2 = await lb.reconcile('t');
  t.is(o2.kind, 'failed');
  if (o2.kind === 'failed') t.regex(o2.reason, new RegExp(`commit ${selfAdd.slice(0, 12)} by .*: unknown-key`));
  t.is(lb.appliedRevision, byBob);
  // Removing Bob (signed by Alice) makes Bob's later commits unknown.
  await git(r.work, 'reset', '-q', '--hard', byBob);
  await signedCommit(r.work, list(signerLine('alice@example.com', alice)), 'remove bob', { ssh: alice });
  const lateBob = await signedCommit(r.work, { 'README.md': 'b\n' }, 'bob again', { ssh: bob });
  await push(r, true);
  const o3 = await lb.reconcile('t');
  t.is(o3.kind, 'failed');
  if (o3.kind === 'failed') t.regex(o3.reason, new RegExp(`commit ${lateBob.slice(0, 12)} by .*: unknown-key`));
});

test.serial('a node-signed automatic revert is accepted by the other nodes; one signed by an unknown node key is not', async (t) => {
  const r = await repo();
  const keys = await dir('keys-node');
  const alice = await sshKey(keys, 'alice');
  const k1 = await sshKey(keys, 'lb-1');
  const k3 = await sshKey(keys, 'lb-3');
  const signerOf = async (k: SshKey) => loadSigningKey(await readFile(k.private, 'utf8'), k.private);
  const trust = await trustOf(`${signerLine('alice@example.com', alice)}\n${signerLine('lb-1@gitlb.invalid', k1)}`);
  const lb1 = await node(r, 'lb-1', trust, await signerOf(k1));
  const lb2 = await node(r, 'lb-2', trust);
  const c1 = await signedCommit(r.work, config({ policy: 'auto' }), 'initial', { ssh: alice });
  await push(r);
  t.is((await lb1.reconcile('t')).kind, 'applied');
  t.is((await lb2.reconcile('t')).kind, 'applied');

  // A signed but invalid change: lb-1 refuses it at validate and pushes a revert signed with its node key.
  await signedCommit(r.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.300']) }, 'typo', { ssh: alice });
  await push(r);
  const o1 = await lb1.reconcile('t');
  t.is(o1.kind, 'failed');
  if (o1.kind !== 'failed' || !o1.rollback?.pushed) return t.fail(`no revert: ${JSON.stringify(o1)}`);
  const revert = o1.rollback.commit;
  const o2 = await lb2.reconcile('t');
  t.is(o2.kind, 'applied', JSON.stringify(o2));
  t.is(lb2.appliedRevision, revert);
  t.regex((await statusOf(r, 'lb-2', lb2)).appliedCommit?.signer ?? '', /^lb-1@gitlb.invalid \(SSH /);
  // lb-1's status commits are signed with its key too.
  await lb1.flushStatus();
  await git(r.work, 'fetch', '-q', 'origin', 'gitlb-status');
  const statusTip = await git(r.work, 'log', '-1', '--author=lb-1 <', '--format=%H', 'FETCH_HEAD');
  const { stdout: raw } = await execFileP('git', ['cat-file', 'commit', statusTip], { cwd: r.work, encoding: 'buffer' });
  const sv = await verifyCommitRaw(statusTip, raw as unknown as Buffer, trust, { formats: new Set(['ssh']), now: new Date() });
  t.true(sv.ok, JSON.stringify(sv));

  // A node whose key is not in the trust root pushes a revert: the other nodes refuse it.
  await git(r.work, 'pull', '-q', 'origin', 'main');
  const lb3 = await node(r, 'lb-3', trust, await signerOf(k3));
  t.is((await lb3.reconcile('t')).kind, 'applied');
  await signedCommit(r.work, { 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.301']) }, 'typo again', { ssh: alice });
  await push(r);
  const o3 = await lb3.reconcile('t');
  if (o3.kind !== 'failed' || !o3.rollback?.pushed) return t.fail(`no revert by lb-3: ${JSON.stringify(o3)}`);
  const o4 = await lb2.reconcile('t');
  t.is(o4.kind, 'failed');
  if (o4.kind === 'failed') t.regex(o4.reason, new RegExp(`commit ${o3.rollback.commit.slice(0, 12)} by gitlb lb-3 <lb-3@gitlb.invalid>: unknown-key`));
  t.is(lb2.appliedRevision, revert);
  void c1;
});

test.serial('gitlb run --once with --trust, --trust-from and --signing-key', async (t) => {
  const r = await repo();
  const keys = await dir('keys-cli');
  const alice = await sshKey(keys, 'alice');
  const nodeKey = await sshKey(keys, 'lb-1');
  const trustFile = join(keys, 'trust');
  await writeFile(trustFile, `${signerLine('alice@example.com', alice)}\n${signerLine('lb-1@gitlb.invalid', nodeKey)}\n`);
  // History from before the team signed: an unsigned first commit.
  const legacy = await signedCommit(r.work, { 'README.md': 'legacy\n' }, 'before signing', null);
  const signed = await signedCommit(r.work, config(), 'signed config', { ssh: alice });
  await push(r);
  const run = async (...extra: string[]) =>
    gitlb('run', '--repo', r.url, '--node', 'lb-1', '--role', 'lb', '--once', '--pin-root', join(PIN_BASE, 'cli'), '--cache-dir', await dir('cli-cache'), ...extra);

  const refused = await run('--trust', trustFile);
  t.is(refused.code, 1, refused.stdout);
  t.regex(refused.stdout, new RegExp(`last attempt failed: commit ${legacy.slice(0, 12)} by test <test@example.com>: unsigned`));

  const ok = await run('--trust', trustFile, '--trust-from', legacy, '--signing-key', nodeKey.private);
  t.is(ok.code, 0, ok.stdout);
  t.regex(ok.stdout, new RegExp(`applied ${signed}`));
  // The node's status commit carries its SSH signature: the git CLI checks it against the same trust file.
  await git(r.work, 'fetch', '-q', 'origin', 'gitlb-status');
  const statusCommit = await git(r.work, 'log', '-1', '--author=lb-1 <', '--format=%H', 'FETCH_HEAD');
  await t.notThrowsAsync(git(r.work, '-c', `gpg.ssh.allowedSignersFile=${trustFile}`, 'verify-commit', statusCommit));

  // Usage and key-file errors stop the start before anything is opened (checked in this process: no data plane).
  const pins = join(PIN_BASE, 'cli-none');
  const common = ['run', '--repo', r.url, '--node', 'lb-1', '--role', 'lb', '--once', '--pin-root', pins, '--cache-dir', await dir('cli-cache-x')];
  t.is((await cli(...common, '--trust', trustFile, '--trust-from', legacy.slice(0, 12))).code, 2, 'abbreviated --trust-from');
  const badTrust = join(keys, 'bad-trust');
  await writeFile(badTrust, `${signerLine('alice@example.com', alice)}\nbob@example.com ssh-ed25519 AAAA-not-base64\n`);
  const bad = await cli(...common, '--trust', badTrust);
  t.is(bad.code, 1);
  t.regex(bad.stdout, new RegExp(`${badTrust}:2: public key: not base64`));
});
