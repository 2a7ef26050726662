// The test Git server: push and fetch through git http-backend with the git CLI and with isomorphic-git.
import test from 'ava';
import * as fs from 'node:fs';
import { request } from 'node:http';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';
import git from 'isomorphic-git';
import http from 'isomorphic-git/http/node';
import { git as gitCli, servedRepo, commitFiles, tempDir } from '../reconcile-helpers.js';

test('git CLI pushes and clones through the server', async (t) => {
  const repo = await servedRepo();
  try {
    const head = await commitFiles(repo.work, { 'a.yaml': 'x: 1\n' }, 'first');
    await gitCli(repo.work, 'push', '-q', 'origin', 'main');
    const clone = join(repo.root, 'clone');
    await gitCli(repo.root, 'clone', '-q', repo.url, clone);
    t.is(await gitCli(clone, 'rev-parse', 'HEAD'), head);
    t.is(fs.readFileSync(join(clone, 'a.yaml'), 'utf8'), 'x: 1\n');
  } finally {
    await repo.cleanup();
  }
});

test('isomorphic-git fetches and pushes through the server', async (t) => {
  const repo = await servedRepo();
  const dir = await tempDir('iso');
  try {
    const first = await commitFiles(repo.work, { 'a.yaml': 'x: 1\n' }, 'first');
    await gitCli(repo.work, 'push', '-q', 'origin', 'main');
    await git.clone({ fs, http, dir, url: repo.url, ref: 'main', singleBranch: true, depth: 1 });
    t.is(await git.resolveRef({ fs, dir, ref: 'HEAD' }), first);

    fs.writeFileSync(join(dir, 'b.yaml'), 'y: 2\n');
    await git.add({ fs, dir, filepath: 'b.yaml' });
    const second = await git.commit({ fs, dir, message: 'second', author: { name: 'iso', email: 'iso@example.com' } });
    const pushed = await git.push({ fs, http, dir, remote: 'origin', ref: 'main' });
    t.true(pushed.ok);
    await gitCli(repo.work, 'pull', '-q', 'origin', 'main');
    t.is(await gitCli(repo.work, 'rev-parse', 'HEAD'), second);
    t.is(fs.readFileSync(join(repo.work, 'b.yaml'), 'utf8'), 'y: 2\n');

    // A non-fast-forward push is refused by the server, as the status writer relies on.
    await commitFiles(repo.work, { 'c.yaml': 'z: 3\n' }, 'third (CLI)');
    await gitCli(repo.work, 'push', '-q', 'origin', 'main');
    fs.writeFileSync(join(dir, 'd.yaml'), 'w: 4\n');
    await git.add({ fs, dir, filepath: 'd.yaml' });
    await git.commit({ fs, dir, message: 'diverging', author: { name: 'iso', email: 'iso@example.com' } });
    const err = await t.throwsAsync(git.push({ fs, http, dir, remote: 'origin', ref: 'main' }));
    t.regex(String(err?.message), /not a simple fast-forward|non-fast-forward|rejected|fetch first/i);
  } finally {
    await repo.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a gzip-encoded upload-pack request body is passed through', async (t) => {
  const repo = await servedRepo();
  try {
    const head = await commitFiles(repo.work, { 'a.yaml': 'x: 1\n' }, 'first');
    await gitCli(repo.work, 'push', '-q', 'origin', 'main');
    const pkt = (s: string) => (s.length + 4).toString(16).padStart(4, '0') + s;
    const body = gzipSync(Buffer.from(pkt(`want ${head}\n`) + '0000' + pkt('done\n')));
    const reply = await new Promise<{ status: number; body: Buffer }>((ok, fail) => {
      const req = request(
        `${repo.url}/git-upload-pack`,
        {
          method: 'POST',
          headers: {
            'content-type': 'application/x-git-upload-pack-request',
            'content-encoding': 'gzip',
            'content-length': body.length,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => ok({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
        },
      );
      req.on('error', fail);
      req.end(body);
    });
    t.is(reply.status, 200);
    t.true(reply.body.includes(Buffer.from('PACK')), 'the reply carries a packfile');
  } finally {
    await repo.cleanup();
  }
});

test('unknown repositories get 404 and the server closes cleanly', async (t) => {
  const repo = await servedRepo();
  try {
    const status = await new Promise<number>((ok, fail) => {
      request(`${repo.server.url}/nope.git/info/refs?service=git-upload-pack`, (res) => {
        res.resume();
        ok(res.statusCode ?? 0);
      })
        .on('error', fail)
        .end();
    });
    t.is(status, 404);
  } finally {
    await repo.cleanup();
  }
});
