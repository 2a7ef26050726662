// --peer-key files as ssh-keygen writes them: an ed25519 key loads and its public line is the .pub file's; an RSA
// key, a passphrase-protected key and a missing file are refused naming the file.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPeerKeyFile, nodeKeyAuth } from '../../src/reconciler/peer/index.js';

const dir = mkdtempSync(join(tmpdir(), 'gitlb-peer-key-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

function keygen(name: string, type: string, passphrase = ''): string {
  const f = join(dir, name);
  execFileSync('ssh-keygen', ['-q', '-t', type, ...(type === 'rsa' ? ['-b', '2048'] : []), '-N', passphrase, '-C', `${name}@test`, '-f', f]);
  return f;
}

test('an ed25519 key from ssh-keygen loads; its public line is the .pub file\'s; it signs what its line verifies', (t) => {
  const f = keygen('lb-1', 'ed25519');
  const key = loadPeerKeyFile(f);
  const pub = readFileSync(`${f}.pub`, 'utf8').trim().split(' ');
  t.is(key.publicLine, `${pub[0]} ${pub[1]}`);
  const auth = nodeKeyAuth(key, (n) => (n === 'lb-1' ? readFileSync(`${f}.pub`, 'utf8') : undefined));
  const sig = auth.sign('text');
  t.true(auth.verify('lb-1', 'text', sig));
  t.false(auth.verify('lb-1', 'other text', sig));
  t.false(auth.verify('lb-2', 'text', sig), 'a node without a key verifies nothing');
});

test('RSA, passphrase-protected and missing key files are refused naming the file', (t) => {
  const rsa = keygen('rsa', 'rsa');
  t.throws(() => loadPeerKeyFile(rsa), { message: new RegExp(`^--peer-key ${rsa}: a ssh-rsa key; the peer channel takes ed25519 keys only`) });
  const locked = keygen('locked', 'ed25519', 'secret passphrase');
  t.throws(() => loadPeerKeyFile(locked), { message: new RegExp(`^--peer-key ${locked}: .*passphrase-protected`) });
  t.throws(() => loadPeerKeyFile(join(dir, 'nope')), { message: /--peer-key .*nope: cannot read: no such file/ });
});
