// writeNewFiles (gitlb init): all-or-nothing, never over an existing file, no temporary file left behind. On real
// directories; the helper itself does no "exists?" pre-check, so an existing path here is exactly a file that
// appeared after the caller's check.
import test from 'ava';
import { lstatSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/cli-repo.js';
import { FileExistsError, writeNewFiles } from '../../src/cli/write-new-files.js';

const list = (dir: string) => (readdirSync(dir, { recursive: true }) as string[]).sort();

test('writes every file in full under new directories; only the final names remain, each a single link', async (t) => {
  const dir = await tempDir('wnf-ok');
  try {
    const big = new Uint8Array(4 << 20).fill(0x61);
    await writeNewFiles(join(dir.path, 'repo'), { 'a.yaml': 'a\n', 'x/y/b.json': big, 'x/c.md': 'c' });
    t.deepEqual(list(join(dir.path, 'repo')), ['a.yaml', 'x', 'x/c.md', 'x/y', 'x/y/b.json']);
    t.is(readFileSync(join(dir.path, 'repo/a.yaml'), 'utf8'), 'a\n');
    t.true(readFileSync(join(dir.path, 'repo/x/y/b.json')).equals(big)); // not deepEqual: its diffing of 4 MiB is slow
    t.is(lstatSync(join(dir.path, 'repo/x/y/b.json')).nlink, 1); // the temporary name is gone
  } finally {
    await dir.remove();
  }
});

test('an existing file part-way: named, untouched, and what this call wrote (files and directories) is removed', async (t) => {
  const dir = await tempDir('wnf-exists');
  try {
    const repo = join(dir.path, 'repo');
    mkdirSync(join(repo, 'services'), { recursive: true });
    writeFileSync(join(repo, 'services/web.yaml'), 'theirs\n');
    const err = await t.throwsAsync(
      writeNewFiles(repo, { 'cluster.yaml': 'c', 'nodes/lb-1.yaml': 'n', 'services/web.yaml': 'ours', 'README.md': 'r' }),
      { instanceOf: FileExistsError },
    );
    t.is(err!.message, `${join(repo, 'services/web.yaml')} already exists`);
    t.is(readFileSync(join(repo, 'services/web.yaml'), 'utf8'), 'theirs\n');
    t.deepEqual(list(repo), ['services', 'services/web.yaml']); // no cluster.yaml, no nodes/, no temporary file
  } finally {
    await dir.remove();
  }
});

test('a dangling symbolic link counts as existing (existsSync says no, link(2) says EEXIST)', async (t) => {
  const dir = await tempDir('wnf-link');
  try {
    symlinkSync('nowhere', join(dir.path, 'cluster.yaml'));
    await t.throwsAsync(writeNewFiles(dir.path, { 'README.md': 'r', 'cluster.yaml': 'c' }), { instanceOf: FileExistsError });
    t.deepEqual(list(dir.path), ['cluster.yaml']);
    t.true(lstatSync(join(dir.path, 'cluster.yaml')).isSymbolicLink());
  } finally {
    await dir.remove();
  }
});

test('an I/O failure part-way (a directory where a file must go) also leaves nothing of this call behind', async (t) => {
  const dir = await tempDir('wnf-io');
  try {
    writeFileSync(join(dir.path, 'nodes'), 'a file, not a directory\n');
    const err = await t.throwsAsync(writeNewFiles(dir.path, { 'cluster.yaml': 'c', 'schemas/s.json': '{}', 'nodes/lb-1.yaml': 'n' }));
    t.false(err instanceof FileExistsError);
    t.deepEqual(list(dir.path), ['nodes']);
  } finally {
    await dir.remove();
  }
});
