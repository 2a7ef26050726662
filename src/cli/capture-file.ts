// The file `gitlb capture --write FILE` writes. The command runs as root and the path may lie in a directory others
// can write (/tmp): it must never write through a symlink or a second hard link into another file, into a file
// another user placed there (they would read the capture), or into a FIFO or device; and a capture holds client
// traffic, so it is its owner's only (0600, an existing file too). An existing own regular file is truncated, as
// tcpdump -w does. Checked on the opened descriptor (fstat), so nothing can be swapped in between check and write.
import { closeSync, constants, fchmodSync, fstatSync, ftruncateSync, openSync } from 'node:fs';

export function openCaptureFile(path: string): number {
  const { O_WRONLY, O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;
  let fd: number;
  try {
    // no O_TRUNC: nothing is cut before the checks; O_NONBLOCK: a FIFO without a reader fails instead of waiting
    fd = openSync(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0o600);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ELOOP') throw new Error(`--write ${path}: is a symbolic link; give the file itself`);
    if (err.code === 'ENXIO') throw new Error(`--write ${path}: not a regular file`);
    throw new Error(`--write ${path}: ${err.message}`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`--write ${path}: not a regular file`);
    if (st.nlink !== 1) throw new Error(`--write ${path}: has ${st.nlink} links; another name may be a file that must not be overwritten`);
    const uid = process.geteuid?.();
    if (uid !== undefined && st.uid !== uid) throw new Error(`--write ${path}: owned by uid ${st.uid}, not this user (${uid})`);
    fchmodSync(fd, 0o600);
    ftruncateSync(fd, 0);
    return fd;
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}
