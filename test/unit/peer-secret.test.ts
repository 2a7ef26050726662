// The peer secret rule (src/reconciler/peer/auth.ts): weak secrets are refused naming the file (never the content),
// a random one of 32 bytes (base64 or hex, as the docs say to generate it) is accepted.
import test from 'ava';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPeerSecretFile, peerSecretProblem } from '../../src/reconciler/peer/index.js';

const dir = mkdtempSync(join(tmpdir(), 'gitlb-peer-secret-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const f = join(dir, name);
  writeFileSync(f, text);
  chmodSync(f, 0o600);
  return f;
}

const weak: [string, string, RegExp][] = [
  ['16 identical characters (the issue\'s example)', 'x'.repeat(16), /at most 96 bits/],
  ['64 identical characters', 'a'.repeat(64), /only 1 distinct/],
  ['a short random base64 (16 bytes)', randomBytes(16).toString('base64'), /at most 13\d bits/],
  ['a repeated pattern', 'Zq8#kL2!mN4$pR6%xY'.repeat(3), /repeats a 18-character pattern/],
  ['few distinct characters (random over 10 letters)', [...randomBytes(60)].map((b) => 'ghijklmnop'[b % 10]).join(''), /only \d distinct|only 10 distinct/],
  ['empty', '\n', /is empty/],
];

for (const [name, secret, why] of weak) {
  test(`refused: ${name}, naming the file and not the secret`, (t) => {
    const f = file(name.replace(/\W+/g, '-'), `${secret}\n`);
    const err = t.throws(() => loadPeerSecretFile(f));
    t.regex(err!.message, new RegExp(`^--peer-secret-file ${f.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: the peer secret `));
    t.regex(err!.message, why);
    t.regex(err!.message, /head -c 32 \/dev\/urandom \| base64/);
    if (secret.trim()) t.false(err!.message.includes(secret.trim()), 'the secret is never echoed');
  });
}

test('accepted: 32 random bytes as base64 (head -c 32 /dev/urandom | base64), as hex, and raw text of 32 bytes', (t) => {
  for (let i = 0; i < 50; i++) {
    const b = randomBytes(32);
    t.is(peerSecretProblem(b.toString('base64')), undefined);
    t.is(peerSecretProblem(b.toString('hex')), undefined);
    t.is(peerSecretProblem(b.toString('base64url')), undefined);
  }
  const auth = loadPeerSecretFile(file('good', `${randomBytes(32).toString('base64')}\n`));
  t.is(auth.scheme, 'hmac-sha256');
  t.true(auth.verify('lb-2', 'x', auth.sign('x')));
  t.false(auth.verify('lb-2', 'y', auth.sign('x')));
});

test('a missing secret file is an error naming it', (t) => {
  t.throws(() => loadPeerSecretFile(join(dir, 'nope')), { message: /--peer-secret-file .*nope: cannot read: no such file/ });
});
