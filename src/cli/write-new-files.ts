// Writing a set of new files all-or-nothing, never over an existing one (`gitlb init`). Each file is written
// in full to a temporary name beside it, flushed, then hard-linked to its final name: link(2) fails with EEXIST
// instead of replacing (rename(2) would replace), so a file that appeared since any earlier check is never
// clobbered, and a reader sees either no file or the whole file, never a partial one. On any failure the files
// and directories this call created are removed again, so "nothing written" holds for the caller.
import { randomBytes } from 'node:crypto';
import { link, mkdir, open, rmdir, unlink } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';

/** A file that must not be overwritten already exists. */
export class FileExistsError extends Error {
  constructor(readonly path: string) {
    super(`${path} already exists`);
  }
}

/** Writes `files` (path relative to `dir` -> content) under `dir`; throws FileExistsError naming the first
 * existing path, or the I/O error, after removing everything it created. */
export async function writeNewFiles(dir: string, files: Record<string, string | Uint8Array>): Promise<void> {
  const createdFiles: string[] = [];
  const createdDirs: string[] = [];
  let tmp: string | null = null;
  try {
    for (const [rel, content] of Object.entries(files)) {
      const path = resolve(dir, rel);
      await makeDirs(dirname(path), createdDirs);
      tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
      const fh = await open(tmp, 'wx', 0o644);
      try {
        await fh.writeFile(content);
        await fh.sync();
      } finally {
        await fh.close();
      }
      try {
        await link(tmp, path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new FileExistsError(path);
        throw err;
      }
      createdFiles.push(path);
      await unlink(tmp);
      tmp = null;
    }
  } catch (err) {
    // Undo in reverse: the temp file, our files, then our directories deepest first (only if empty).
    const quiet = (p: Promise<unknown>) => p.catch(() => undefined);
    if (tmp) await quiet(unlink(tmp));
    for (const f of createdFiles.reverse()) await quiet(unlink(f));
    for (const d of createdDirs.reverse()) await quiet(rmdir(d));
    throw err;
  }
}

/** mkdir -p that records each directory it created, outermost first. */
async function makeDirs(path: string, created: string[]): Promise<void> {
  const first = await mkdir(path, { recursive: true }); // the outermost directory created, if any
  if (first === undefined) return;
  const chain: string[] = [];
  for (let d = path; d.length >= first.length; d = dirname(d)) {
    chain.unshift(d);
    if (d === first) break;
  }
  created.push(...chain);
}
