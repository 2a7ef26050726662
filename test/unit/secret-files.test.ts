// Files holding secrets (--credentials-file, --signing-key; --webhook-secret-file and --peer-secret-file read the
// same way): capped, regular files only, and a warning naming the file (never its content) when group or others
// may read it.
import test from 'ava';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCredentials } from '../../src/reconciler/source/credentials.js';
import { loadSigningKeyFile } from '../../src/reconciler/verify/load.js';
import { checkWebhookSecret } from '../../src/reconciler/doctor/doctor.js';

const dir = mkdtempSync(join(tmpdir(), 'gitlb-secret-files-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

test('a credentials file readable by others is used, with a warning that names the file and not the token', (t) => {
  const file = join(dir, 'token-0644');
  writeFileSync(file, 'ghp_secret_token\n');
  chmodSync(file, 0o644);
  const warnings: string[] = [];
  t.deepEqual(loadCredentials({ file, env: {}, warn: (m) => warnings.push(m) }), { username: 'gitlb', password: 'ghp_secret_token' });
  t.is(warnings.length, 1);
  t.regex(warnings[0]!, /--credentials-file .*token-0644 holds a secret but its mode is 0644; chmod 600/);
  t.false(warnings[0]!.includes('ghp_secret_token'));
  chmodSync(file, 0o600);
  loadCredentials({ file, env: {}, warn: (m) => warnings.push(m) });
  t.is(warnings.length, 1, 'no warning for 0600');
});

test('an oversized or non-regular credentials file is refused before it is read', (t) => {
  const big = join(dir, 'big');
  writeFileSync(big, 'x'.repeat(2 * 1024 * 1024), { mode: 0o600 });
  t.throws(() => loadCredentials({ file: big, env: {} }), { message: /--credentials-file .*big: larger than 65536 bytes/ });
  t.throws(() => loadCredentials({ file: '/dev/null', env: {} }), { message: /--credentials-file \/dev\/null: not a regular file/ });
  t.throws(() => loadCredentials({ file: join(dir, 'absent'), env: {} }), { message: /cannot read: no such file/ });
});

test('a signing key readable by others is warned about', async (t) => {
  const file = join(dir, 'key-0640');
  writeFileSync(file, 'not a key\n');
  chmodSync(file, 0o640);
  const warnings: string[] = [];
  await t.throwsAsync(loadSigningKeyFile(file, (m) => warnings.push(m)));
  t.regex(warnings.join('\n'), /--signing-key .*key-0640 holds a secret but its mode is 0640/);
});

test('gitlb run refuses a webhook secret shorter than 16 characters (a GitLab token is compared as it is)', async (t) => {
  const { gitlbInProcess } = await import('../helpers/cli-repo.js');
  const file = join(dir, 'webhook-short');
  writeFileSync(file, 'hunter2\n', { mode: 0o600 });
  const r = await gitlbInProcess(['run', '--node', 'lb-1', '--repo', join(dir, 'no-repo'), '--interface', 'gitlbnone0', '--metrics', 'off',
    '--webhook', '127.0.0.1:0', '--webhook-secret-file', file, '--once']);
  t.is(r.code, 2, r.stdout + r.stderr);
  t.regex(r.stderr, /webhook secret must be at least 16 characters/);
  t.false(r.stderr.includes('hunter2'));
});

test('gitlb doctor judges the webhook secret by the rule gitlb run enforces: 15 characters fail, 16 pass', (t) => {
  const short = join(dir, 'webhook-15');
  writeFileSync(short, `${'x'.repeat(15)}\n`, { mode: 0o600 });
  const r = checkWebhookSecret({ webhookSecretFile: short, env: {} });
  t.is(r.level, 'fail');
  t.regex(r.detail, /webhook-15: the webhook secret must be at least 16 characters \(it has 15\); gitlb run --webhook refuses it$/);
  t.is(checkWebhookSecret({ env: { GITLB_WEBHOOK_SECRET: 'y'.repeat(15) } }).level, 'fail');
  const good = checkWebhookSecret({ env: { GITLB_WEBHOOK_SECRET: 'y'.repeat(16) } });
  t.deepEqual([good.level, good.detail], ['ok', 'GITLB_WEBHOOK_SECRET (16 characters)']);
  t.false(JSON.stringify([r, good]).includes('xxxxxxxx'), 'the secret itself is never shown');
  t.is(checkWebhookSecret({ env: {} }).level, 'warn');
});
