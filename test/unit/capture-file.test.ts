// `gitlb capture --write FILE` runs as root: the file it writes must never be one it was tricked into
// (src/cli/capture-file.ts): no symlink followed, no second link to another file, no file of another user, no FIFO
// or device (opened without blocking, so a FIFO cannot hang it either); the capture (client traffic) readable by its owner only. Attacker cases and the benign ones it must allow.
import test from 'ava';
import { chmodSync, chownSync, linkSync, lstatSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openCaptureFile } from '../../src/cli/capture-file.js';

function dir(t: { teardown(f: () => void): void }): string {
  const d = mkdtempSync(join(tmpdir(), 'gitlb-capfile-'));
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

test('a symlink planted at the path is not followed: its target keeps its content (attacker)', (t) => {
  const d = dir(t);
  const victim = join(d, 'shadow');
  writeFileSync(victim, 'root:secret\n');
  symlinkSync(victim, join(d, 'cap.pcapng'));
  t.throws(() => openCaptureFile(join(d, 'cap.pcapng')), { message: /--write .*cap\.pcapng: .*symbolic link/ });
  t.is(readFileSync(victim, 'utf8'), 'root:secret\n');
});

test('a hard link to another file is refused, the file kept (attacker)', (t) => {
  const d = dir(t);
  const victim = join(d, 'passwd');
  writeFileSync(victim, 'keep\n');
  linkSync(victim, join(d, 'cap.pcapng'));
  t.throws(() => openCaptureFile(join(d, 'cap.pcapng')), { message: /--write .*: .*2 links/ });
  t.is(readFileSync(victim, 'utf8'), 'keep\n');
});

test('a file another user placed there is refused (they would read the capture) (attacker)', (t) => {
  if (process.getuid?.() !== 0) return t.pass('needs root to give the file to another user');
  const d = dir(t);
  chmodSync(d, 0o1777);
  const planted = join(d, 'cap.pcapng');
  writeFileSync(planted, 'x');
  chownSync(planted, 65534, 65534);
  t.throws(() => openCaptureFile(planted), { message: /--write .*: owned by uid 65534/ });
  t.is(readFileSync(planted, 'utf8'), 'x');
});

test('a device is refused (attacker)', (t) => {
  t.throws(() => openCaptureFile('/dev/null'), { message: /--write \/dev\/null: not a regular file/ });
});

test('a new file is created for its owner only; an own existing file is truncated and rewritten (benign)', (t) => {
  const d = dir(t);
  const fresh = join(d, 'new.pcapng');
  const fd = openCaptureFile(fresh);
  writeSync(fd, 'abc');
  closeSync(fd);
  t.is(readFileSync(fresh, 'utf8'), 'abc');
  t.is(statSync(fresh).mode & 0o777, 0o600);
  const old = join(d, 'old.pcapng');
  writeFileSync(old, 'a much longer earlier capture', { mode: 0o644 });
  const fd2 = openCaptureFile(old);
  writeSync(fd2, 'xy');
  closeSync(fd2);
  t.is(readFileSync(old, 'utf8'), 'xy');
  t.is(lstatSync(old).mode & 0o777, 0o600, 'the capture holds client traffic: owner only');
});
