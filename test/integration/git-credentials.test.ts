// Credentials: file formats, environment precedence, redaction, and a real authenticated fetch.
import test from 'ava';
import { writeFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { loadCredentials, redactUrl, redactText } from '../../src/reconciler/source/credentials.js';
import { HttpRemote } from '../../src/reconciler/source/git-remote.js';
import { startGitHttpServer } from '../../src/lab/git-http-server.js';
import { git, commitFiles, tempDir } from '../reconcile-helpers.js';

test('credentials come from a file or the environment; the environment wins', async (t) => {
  const dir = await tempDir('cred');
  try {
    const tokenOnly = join(dir, 'token');
    writeFileSync(tokenOnly, 'ghp_abc\n');
    t.deepEqual(loadCredentials({ file: tokenOnly, env: {} }), { username: 'gitlb', password: 'ghp_abc' });
    const kv = join(dir, 'kv');
    writeFileSync(kv, '# deploy token\nusername=deployer\ntoken=glpat-xyz\n');
    t.deepEqual(loadCredentials({ file: kv, env: {} }), { username: 'deployer', password: 'glpat-xyz' });
    t.deepEqual(loadCredentials({ file: kv, env: { GITLB_GIT_TOKEN: 'env-tok' } }), { username: 'deployer', password: 'env-tok' });
    t.is(loadCredentials({ env: {} }), undefined);
    const bad = join(dir, 'bad');
    writeFileSync(bad, 'user=x\ntoken=y\n');
    t.throws(() => loadCredentials({ file: bad, env: {} }), { message: /unknown key 'user'/ });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('URLs and messages are redacted', (t) => {
  t.is(redactUrl('https://user:s3cret@git.example.com/x.git'), 'https://***@git.example.com/x.git');
  t.is(redactUrl('https://git.example.com/x.git'), 'https://git.example.com/x.git');
  t.is(redactText('failed: http://a:b@h/x and token tok123', { username: 'u', password: 'tok123' }), 'failed: http://***@h/x and token ***');
});

test('an authenticated server: fetch works with the token and fails without it, never printing it', async (t) => {
  const root = await tempDir('auth');
  const server = await startGitHttpServer({ projectRoot: root, auth: { username: 'deployer', password: 'tok-SECRET-1' } });
  try {
    await git(root, 'init', '-q', '--bare', '-b', 'main', join(root, 'c.git'));
    const work = join(root, 'w');
    await git(root, 'init', '-q', '-b', 'main', work);
    const head = await commitFiles(work, { 'a.yaml': 'a: 1\n' }, 'x');
    const authed = server.url.replace('http://', 'http://deployer:tok-SECRET-1@');
    await git(work, 'push', '-q', `${authed}/c.git`, 'main');

    const ok = new HttpRemote(`${server.url}/c.git`, join(root, 'cache-ok'), { username: 'deployer', password: 'tok-SECRET-1' });
    t.is(await ok.fetch('main'), head);
    const anon = new HttpRemote(`${server.url}/c.git`, join(root, 'cache-anon'));
    const err = await t.throwsAsync(anon.fetch('main'));
    t.regex(String(err?.message), /401|auth/i);
    const inUrl = new HttpRemote(`${server.url.replace('http://', 'http://deployer:wrong-SECRET@')}/c.git`, join(root, 'cache-url'));
    t.false(inUrl.description.includes('wrong-SECRET'));
    const err2 = await t.throwsAsync(inUrl.fetch('main'));
    t.false(String(err2?.message).includes('wrong-SECRET'), String(err2?.message));
  } finally {
    await server.close();
    rmSync(root, { recursive: true, force: true });
  }
});
