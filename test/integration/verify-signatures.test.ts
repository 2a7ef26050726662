// Signature verification without the data plane: SSHSIG against ssh-keygen both ways (every key type),
// allowed_signers options, OpenPGP keys made by gpg (expired, revoked, unknown), commits signed by the git CLI,
// ranges with merges, and hostile signature blocks (refused with a reason, never a crash).
import test from 'ava';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { rmSync, readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseSshSignature, verifySshSignature, signSshMessage } from '../../src/reconciler/verify/sshsig.js';
import { parseOpenSshPrivateKey, loadSigningKey } from '../../src/reconciler/verify/signing-key.js';
import { parseTrustText } from '../../src/reconciler/verify/allowed-signers.js';
import { verifyCommitRaw } from '../../src/reconciler/verify/verify-commit.js';
import { verifyRange, DEFAULT_POLICY } from '../../src/reconciler/verify/verify-range.js';
import { writeCommitObject } from '../../src/reconciler/source/git-objects.js';
import { wireString, wireUint32 } from '../../src/reconciler/verify/ssh-wire.js';
import { git, tempDir, configFiles, clusterYaml } from '../reconcile-helpers.js';
import { parseConfig, formatDiagnostic } from '../../src/render/config/index.js';
import { sshKey, signerLine, gpgKey, signedCommit, tamperedCommit, trustOf, cli, type GpgKey } from '../verify-helpers.js';

const execFileP = promisify(execFile);
const cleanups: (() => unknown)[] = [];
test.after.always(async () => {
  for (const f of cleanups.reverse()) await f();
});

async function dir(name: string): Promise<string> {
  const d = await tempDir(name);
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

const NOW = () => new Date();
const BOTH = new Set(['ssh', 'openpgp'] as const);
const policy = { ...DEFAULT_POLICY, mode: 'enforce' as const };

async function rawCommit(work: string, oid: string): Promise<Buffer> {
  const { stdout } = await execFileP('git', ['cat-file', 'commit', oid], { cwd: work, encoding: 'buffer' });
  return stdout as unknown as Buffer;
}

test('SSHSIG: ssh-keygen signatures verify here and ours verify with ssh-keygen, for every key type', async (t) => {
  const d = await dir('sshsig');
  const msg = Buffer.from('tree 0123\nauthor a <a@x> 1 +0000\n\npayload\n');
  await writeFile(join(d, 'msg'), msg);
  for (const [type, bits] of [['ed25519'], ['ecdsa', 256], ['ecdsa', 384], ['ecdsa', 521], ['rsa', 3072]] as [string, number?][]) {
    const key = await sshKey(d, `k-${type}-${bits ?? ''}`, type, bits);
    await execFileP('ssh-keygen', ['-Y', 'sign', '-n', 'git', '-f', key.private, join(d, 'msg')]);
    const theirs = parseSshSignature(await readFile(join(d, 'msg.sig'), 'utf8'));
    rmSync(join(d, 'msg.sig'));
    t.true(verifySshSignature(theirs, msg), `${type} ${bits}: ssh-keygen's signature`);
    t.false(verifySshSignature(theirs, Buffer.concat([msg, Buffer.from('x')])), `${type} ${bits}: other content`);
    const { privateKey, publicKey } = parseOpenSshPrivateKey(await readFile(key.private, 'utf8'));
    t.is(publicKey.type, theirs.publicKey.type);
    await writeFile(join(d, 'ours.sig'), signSshMessage(privateKey, publicKey, msg));
    await writeFile(join(d, 'allowed'), signerLine('node@x', key) + '\n');
    const check = await new Promise<string>((resolve) => {
      const c = execFile('ssh-keygen', ['-Y', 'verify', '-f', join(d, 'allowed'), '-I', 'node@x', '-n', 'git', '-s', join(d, 'ours.sig')], (err, out, errOut) =>
        resolve(err ? `FAILED ${errOut}` : out),
      );
      c.stdin!.end(msg);
    });
    t.regex(check, /Good "git" signature for node@x/, `${type} ${bits}: ssh-keygen accepts ours`);
  }
});

test('allowed_signers: options, windows and per-line problems with line numbers', async (t) => {
  const d = await dir('as');
  const k = await sshKey(d, 'k');
  const text = [
    '# team signers',
    signerLine('"alice@example.com,bob@example.com"', k),
    signerLine('carol@example.com', k, 'namespaces="file,git",valid-after="20200101",valid-before="20991231Z"'),
    signerLine('dave@example.com', k, 'cert-authority'),
    'eve@example.com ssh-ed25519 !!!notbase64',
    signerLine('frank@example.com', k, 'valid-after="2020-01-01"'),
    'sk@example.com sk-ssh-ed25519@openssh.com AAAA',
  ].join('\n');
  const p = parseTrustText(text, 'signers');
  t.is(p.ssh.length, 2);
  t.deepEqual(p.ssh[0]!.principals, ['alice@example.com', 'bob@example.com']);
  t.deepEqual(p.ssh[1]!.namespaces, ['file', 'git']);
  t.is(p.ssh[1]!.validBefore!.toISOString(), '2099-12-31T00:00:00.000Z');
  t.is(p.problems.length, 4);
  t.regex(p.problems[0]!, /^signers:4: cert-authority/);
  t.regex(p.problems[1]!, /^signers:5: /);
  t.regex(p.problems[2]!, /^signers:6: bad time/);
  t.regex(p.problems[3]!, /^signers:7: security-key/);
});

/** A local repository with one file per commit; returns a helper to commit. */
async function localRepo(name: string) {
  const d = await dir(name);
  const work = join(d, 'w');
  await git(d, 'init', '-q', '-b', 'main', work);
  let n = 0;
  return { d, work, commit: (signing: Parameters<typeof signedCommit>[3], msg = `c${++n}`) => signedCommit(work, { [`f${n}.txt`]: msg }, msg, signing) };
}


test('commits signed by the git CLI (SSH): signed, unsigned, unknown key, tampered, expired window', async (t) => {
  const r = await localRepo('ssh-commits');
  const alice = await sshKey(r.d, 'alice');
  const mallory = await sshKey(r.d, 'mallory');
  const trust = await trustOf(signerLine('alice@example.com', alice));
  const o = { formats: BOTH, now: NOW() };
  const good = await r.commit({ ssh: alice });
  const v = await verifyCommitRaw(good, await rawCommit(r.work, good), trust, o);
  t.true(v.ok, JSON.stringify(v));
  t.regex(v.signer!, /^alice@example.com \(SSH SHA256:/);
  t.is(v.author, 'test <test@example.com>');
  const unsigned = await r.commit(null);
  t.is((await verifyCommitRaw(unsigned, await rawCommit(r.work, unsigned), trust, o)).reason, 'unsigned');
  const stranger = await r.commit({ ssh: mallory });
  t.is((await verifyCommitRaw(stranger, await rawCommit(r.work, stranger), trust, o)).reason, 'unknown-key');
  const forged = await tamperedCommit(r.work, unsigned, good);
  const tv = await verifyCommitRaw(forged, await rawCommit(r.work, forged), trust, o);
  t.is(tv.reason, 'bad-signature', JSON.stringify(tv));
  // A window that closed yesterday: the key is expired; one that opens tomorrow: not yet valid.
  const day = (d: number) => new Date(Date.now() + d * 86400_000).toISOString().slice(0, 10).replace(/-/g, '');
  const expired = await trustOf(signerLine('alice@example.com', alice, `valid-before="${day(-1)}"`));
  t.is((await verifyCommitRaw(good, await rawCommit(r.work, good), expired, o)).reason, 'expired-key');
  const future = await trustOf(signerLine('alice@example.com', alice, `valid-after="${day(2)}"`));
  t.is((await verifyCommitRaw(good, await rawCommit(r.work, good), future, o)).reason, 'not-yet-valid');
  const otherNs = await trustOf(signerLine('alice@example.com', alice, 'namespaces="file"'));
  t.is((await verifyCommitRaw(good, await rawCommit(r.work, good), otherNs, o)).reason, 'unknown-key');
  // The policy's formats: SSH not accepted.
  t.is((await verifyCommitRaw(good, await rawCommit(r.work, good), trust, { formats: new Set(['openpgp']), now: NOW() })).reason, 'format-not-allowed');
});

test('commits signed by gpg (OpenPGP): signed, unknown, expired and revoked keys', async (t) => {
  const r = await localRepo('pgp-commits');
  const year = 365 * 86400;
  const carol = await gpgKey(r.d, 'Carol <carol@example.com>');
  const old = await gpgKey(r.d, 'Olga <olga@example.com>', { expire: '1y', fakedTime: Math.floor(Date.now() / 1000) - 2 * year });
  const other = await gpgKey(r.d, 'Oscar <oscar@example.com>');
  const gone = await gpgKey(r.d, 'Rita <rita@example.com>');
  cleanups.push(...[carol, old, other, gone].map((k: GpgKey) => () => k.close()));
  const o = { formats: BOTH, now: NOW() };
  const signed = await r.commit({ gpg: carol });
  const signedOld = await r.commit({ gpg: old });
  const signedOther = await r.commit({ gpg: other });
  const signedGone = await r.commit({ gpg: gone });
  await gone.revoke();
  const trust = await trustOf([await carol.publicArmored(), await old.publicArmored(), await gone.publicArmored()].join('\n'));
  t.is(trust.pgp.length, 3);
  const v = await verifyCommitRaw(signed, await rawCommit(r.work, signed), trust, o);
  t.true(v.ok, JSON.stringify(v));
  t.regex(v.signer!, /Carol <carol@example.com> \(OpenPGP [0-9A-F]{40}\)/);
  const e = await verifyCommitRaw(signedOld, await rawCommit(r.work, signedOld), trust, o);
  t.is(e.reason, 'expired-key', JSON.stringify(e));
  t.is((await verifyCommitRaw(signedOther, await rawCommit(r.work, signedOther), trust, o)).reason, 'unknown-key');
  const rv = await verifyCommitRaw(signedGone, await rawCommit(r.work, signedGone), trust, o);
  t.is(rv.reason, 'revoked-key', JSON.stringify(rv));
});

test('range: every commit since the base is checked, merges and their side branches included', async (t) => {
  const r = await localRepo('range');
  const alice = await sshKey(r.d, 'alice');
  const root = await trustOf(signerLine('alice@example.com', alice));
  const base = await r.commit({ ssh: alice });
  await git(r.work, 'checkout', '-q', '-b', 'side');
  const sideUnsigned = await r.commit(null, 'side work, unsigned');
  await r.commit({ ssh: alice }, 'side work, signed');
  await git(r.work, 'checkout', '-q', 'main');
  await r.commit({ ssh: alice });
  await git(r.work, '-c', 'gpg.format=ssh', '-c', `user.signingkey=${alice.private}`, 'merge', '-q', '-S', '--no-ff', '-m', 'merge side', 'side');
  const head = await git(r.work, 'rev-parse', 'HEAD');
  const gitdir = join(r.work, '.git');
  const res = await verifyRange({ gitdir, head, base, policy, root, now: NOW() });
  t.is(res.verdicts.length, 4, 'two side commits, one main commit, the merge; not the base');
  t.false(res.verdicts.some((v) => v.commit === base));
  t.deepEqual(res.failures.map((f) => [f.commit, f.reason]), [[sideUnsigned, 'unsigned']]);
  t.is(res.verdicts.at(-1)!.commit, head, 'parents first: the merge last');
  // From the merge on, nothing new.
  t.is((await verifyRange({ gitdir, head, base: head, policy, root, now: NOW() })).verdicts.length, 0);
});

test('hostile signature blocks: refused with a reason, never a crash', async (t) => {
  const r = await localRepo('hostile');
  const alice = await sshKey(r.d, 'alice');
  const trust = await trustOf(signerLine('alice@example.com', alice));
  const good = await r.commit({ ssh: alice });
  const raw = (await rawCommit(r.work, good)).toString('latin1');
  const realSig = /-----BEGIN SSH SIGNATURE-----[\s\S]*?-----END SSH SIGNATURE-----/.exec(raw.replace(/\n /g, '\n'))![0];
  const realBlob = Buffer.from(realSig.replace(/-----[A-Z ]+-----/g, '').replace(/\s+/g, ''), 'base64');
  const arm = (b: Buffer) => `-----BEGIN SSH SIGNATURE-----\n${(b.toString('base64').match(/.{1,70}/g) ?? []).join('\n')}\n-----END SSH SIGNATURE-----`;
  const sshsig = (fields: { version?: number; key?: Buffer; ns?: string; hash?: string; sig?: Buffer }) =>
    arm(
      Buffer.concat([
        Buffer.from('SSHSIG'),
        wireUint32(fields.version ?? 1),
        wireString(fields.key ?? Buffer.alloc(0)),
        wireString(fields.ns ?? 'git'),
        wireString(''),
        wireString(fields.hash ?? 'sha512'),
        wireString(fields.sig ?? Buffer.alloc(0)),
      ]),
    );
  const pub = Buffer.from(alice.publicText.split(' ')[1]!, 'base64');
  const dssKey = Buffer.concat([wireString('ssh-dss'), wireString(Buffer.alloc(128, 1))]);
  const skKey = Buffer.concat([wireString('sk-ssh-ed25519@openssh.com'), wireString(Buffer.alloc(32, 1)), wireString('ssh:')]);
  const cases: [string, string, RegExp][] = [
    ['not base64', '-----BEGIN SSH SIGNATURE-----\n!!!!\n-----END SSH SIGNATURE-----', /malformed/],
    ['no end line', '-----BEGIN SSH SIGNATURE-----\nU1NIU0lH', /malformed/],
    ['empty body', '-----BEGIN SSH SIGNATURE-----\n-----END SSH SIGNATURE-----', /malformed/],
    ['bad magic', arm(Buffer.concat([Buffer.from('NOTSIG'), realBlob.subarray(6)])), /malformed/],
    ['truncated', arm(realBlob.subarray(0, realBlob.length - 10)), /malformed/],
    ['trailing bytes', arm(Buffer.concat([realBlob, Buffer.from('xx')])), /malformed/],
    ['huge length field', arm(Buffer.concat([realBlob.subarray(0, 10), Buffer.from([0x7f, 0xff, 0xff, 0xff])])), /malformed/],
    ['huge signature', `-----BEGIN SSH SIGNATURE-----\n${'QUFB'.repeat(300_000)}\n-----END SSH SIGNATURE-----`, /malformed/],
    ['version 2', sshsig({ version: 2, key: pub }), /unsupported/],
    ['DSA key', sshsig({ key: dssKey }), /unsupported/],
    ['security key', sshsig({ key: skKey }), /unsupported/],
    ['sha1 hash', sshsig({ key: pub, hash: 'sha1' }), /unsupported/],
    ['wrong namespace', sshsig({ key: pub, ns: 'file', sig: Buffer.concat([wireString('ssh-ed25519'), wireString(Buffer.alloc(64))]) }), /malformed/],
    ['wrong signature algorithm', sshsig({ key: pub, sig: Buffer.concat([wireString('rsa-sha2-512'), wireString(Buffer.alloc(64))]) }), /unsupported/],
    ['short ed25519 signature', sshsig({ key: pub, sig: Buffer.concat([wireString('ssh-ed25519'), wireString(Buffer.alloc(3))]) }), /bad-signature/],
    ['OpenPGP garbage', '-----BEGIN PGP SIGNATURE-----\n\nAAAAAAAA\n=AAAA\n-----END PGP SIGNATURE-----', /malformed/],
    ['huge OpenPGP', `-----BEGIN PGP SIGNATURE-----\n\n${'A'.repeat(200_000)}\n-----END PGP SIGNATURE-----`, /malformed/],
    ['x509 block', '-----BEGIN SIGNED MESSAGE-----\nMIAGCSqGSIb3DQEHAqCAMIACAQExDzANBglghkgBZQMEAgEFADCABgkqhkiG9w0BBwEAAKCAMIID\n-----END SIGNED MESSAGE-----', /unsupported/],
    ['binary junk', '\u0000\u0001\u00ff', /unsupported/],
  ];
  const o = { formats: BOTH, now: NOW() };
  for (const [name, sig, reason] of cases) {
    const withSig = raw.replace(/gpgsig [\s\S]*?\n(?! )/, `gpgsig ${sig.split('\n').join('\n ')}\n`);
    const v = await verifyCommitRaw('0'.repeat(40), Buffer.from(withSig, 'latin1'), trust, o);
    t.false(v.ok, name);
    t.regex(`${v.reason}`, reason, `${name}: ${v.reason} ${v.detail}`);
    t.truthy(v.detail, name);
  }
  // Two signature headers, and an object far above the size cap.
  const twice = raw.replace(/(gpgsig [\s\S]*?\n)(?! )/, '$1$1');
  t.is((await verifyCommitRaw('0'.repeat(40), Buffer.from(twice, 'latin1'), trust, o)).reason, 'malformed');
  t.is((await verifyCommitRaw('0'.repeat(40), Buffer.alloc(2 << 20, 0x61), trust, o)).reason, 'malformed');
});

test('node signing keys: commits written by gitlb are signed so that git itself and gitlb verify them', async (t) => {
  const r = await localRepo('node-sign');
  const nodeSsh = await sshKey(r.d, 'lb-1');
  const nodePgp = await gpgKey(r.d, 'lb-2 <lb-2@gitlb.invalid>');
  cleanups.push(() => nodePgp.close());
  const { stdout: secret } = await execFileP('gpg', ['--homedir', nodePgp.home, '--batch', '--pinentry-mode', 'loopback', '--passphrase', '', '--armor', '--export-secret-keys', nodePgp.fingerprint]);
  await r.commit(null, 'base');
  const gitdir = join(r.work, '.git');
  const tree = await git(r.work, 'rev-parse', 'HEAD^{tree}');
  const parent = await git(r.work, 'rev-parse', 'HEAD');
  const allowed = join(r.d, 'allowed');
  await writeFile(allowed, signerLine('lb-1@gitlb.invalid', nodeSsh) + '\n');
  const trust = await trustOf(`${signerLine('lb-1@gitlb.invalid', nodeSsh)}\n${await nodePgp.publicArmored()}`);
  for (const [name, text] of [['ssh', await readFile(nodeSsh.private, 'utf8')], ['openpgp', secret]] as const) {
    const signer = await loadSigningKey(text, name);
    t.is(signer.format, name);
    const oid = await writeCommitObject(
      gitdir,
      { tree, parents: [parent], message: `status(${name}): x\n`, author: { name: 'lb', email: 'lb@gitlb.invalid', timestamp: 1_700_000_000, timezoneOffset: 0 } },
      signer,
    );
    const v = await verifyCommitRaw(oid, await rawCommit(r.work, oid), trust, { formats: BOTH, now: NOW() });
    t.true(v.ok, `${name}: ${JSON.stringify(v)}`);
    // git's own verification (ssh-keygen / gpg underneath) accepts the signature too.
    const args =
      name === 'ssh' ? ['-c', `gpg.ssh.allowedSignersFile=${allowed}`, 'verify-commit', oid] : ['-c', `gpg.program=${nodePgp.program}`, 'verify-commit', oid];
    await t.notThrowsAsync(git(r.work, ...args), `${name}: git verify-commit`);
  }
  await t.throwsAsync(loadSigningKey('-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n', 'k'), { message: /^k: / });
  await t.throwsAsync(loadSigningKey('hello', 'k'), { message: /neither an OpenSSH private key nor/ });
});

test('Cluster.spec.verification: defaults, and bad values refused at the field with file:line:col', (t) => {
  const parse = (verification: string) => {
    const files = configFiles(['lb-1'], ['198.51.100.10']);
    files['cluster.yaml'] = clusterYaml() + `  verification: ${verification}\n`;
    return parseConfig(Object.entries(files).map(([path, text]) => ({ path, content: new TextEncoder().encode(text) })));
  };
  t.deepEqual(parse('{ mode: enforce }').model?.cluster.spec.verification, { mode: 'enforce', formats: ['openpgp', 'ssh'], signersFile: 'trust/allowed_signers' });
  t.is(parseConfig(Object.entries(configFiles(['lb-1'], ['198.51.100.10'])).map(([path, text]) => ({ path, content: new TextEncoder().encode(text) }))).model?.cluster.spec.verification, undefined);
  const errors = (v: string) => parse(v).diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic).join('\n');
  t.regex(errors('{ mode: strict }'), /^cluster\.yaml:8:\d+: error: .*mode/m);
  t.regex(errors('{ formats: [ssh, ssh] }'), /^cluster\.yaml:8:\d+: error: .*formats/m);
  t.regex(errors('{ formats: [x509] }'), /^cluster\.yaml:8:\d+: error: .*formats/m);
  t.regex(errors('{ signersFile: ../keys }'), /^cluster\.yaml:8:\d+: error: .*repository-relative path/m);
  t.regex(errors('{ signersFile: trust/signers.yaml }'), /^cluster\.yaml:8:\d+: error: spec\.verification\.signersFile: 'trust\/signers\.yaml' is a YAML path/m);
  t.regex(errors('{ signersFile: status/keys }'), /^cluster\.yaml:8:\d+: error: spec\.verification\.signersFile: 'status\/keys' is under status\//m);
});

test('the CI snippets verify every commit of a pull request: their gitlb verify commands run on a PR-shaped repository', async (t) => {
  const d = await dir('ci-verify');
  const alice = await sshKey(d, 'alice');
  const trust = join(d, 'trust');
  await writeFile(trust, signerLine('alice@example.com', alice) + '\n');
  const origin = join(d, 'origin');
  await git(d, 'init', '-q', '-b', 'main', origin);
  await signedCommit(origin, configFiles(['lb-1'], ['198.51.100.1']), 'base', { ssh: alice });
  const clone = join(d, 'clone');
  await git(d, 'clone', '-q', origin, clone);
  await git(clone, 'checkout', '-qb', 'change');
  const unsigned = await signedCommit(clone, { 'README.md': 'x\n' }, 'unsigned', null);
  await signedCommit(clone, configFiles(['lb-1'], ['198.51.100.1', '198.51.100.2']), 'add a real', { ssh: alice });
  const read = (f: string) => parse(readFileSync(new URL(`../../deploy/ci/${f}`, import.meta.url), 'utf8'));
  const lines = [
    ...read('github-actions.yml').jobs.verify.steps.map((s: { run?: string }) => s.run ?? ''),
    ...read('gitlab-ci.yml')['gitlb-verify'].script,
  ] as string[];
  const commands = lines.map((l) => /(?:"\$GITLB_IMAGE"|^gitlb) (verify .*)$/.exec(l.trim())?.[1]).filter((c): c is string => !!c);
  t.is(commands.length, 2);
  const run = async (command: string) => {
    const head = await git(clone, 'rev-parse', 'HEAD');
    const vars: Record<string, string> = { GITHUB_BASE_REF: 'main', CI_MERGE_REQUEST_TARGET_BRANCH_NAME: 'main', PR_HEAD: head, CI_COMMIT_SHA: head, GITLB_TRUST: trust };
    const args = command.split(' ').map((a) => a.replace(/^"(.*)"$/, '$1').replace(/\$(\w+)/g, (_, v: string) => vars[v] ?? `$${v}`));
    return cli(...args.map((a) => (a === '.' ? clone : a === '/trust' ? trust : a)));
  };
  for (const c of commands) {
    const r = await run(c);
    t.is(r.code, 1, r.stdout);
    t.regex(r.stdout, new RegExp(`REFUSED commit ${unsigned.slice(0, 12)} by test <test@example.com>: unsigned`));
  }
  // Signed again on the branch (rebase re-signing every commit): both snippets pass.
  await git(clone, '-c', 'gpg.format=ssh', '-c', `user.signingkey=${alice.private}`, 'rebase', '-q', '--exec', 'git -c gpg.format=ssh -c user.signingkey=' + alice.private + ' commit -q --amend --no-edit -S', 'main');
  for (const c of commands) {
    const r = await run(c);
    t.is(r.code, 0, r.stdout);
    t.regex(r.stdout, /2 commit\(s\) verified/);
  }
});
