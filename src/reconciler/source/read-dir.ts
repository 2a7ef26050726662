// Reads the config files of a checked-out directory (a working tree, or `gitlb validate DIR`).
// Skips what is not config (.git/, status/, hidden entries, non-YAML files); a YAML symlink is passed on as a
// link (parseConfig refuses it, as it does for a link in Git objects); reads at most a little over the config stage's limits, so a huge file or
// tree is refused by parseConfig quickly instead of being read in full.
import { open, readdir, readlink, realpath } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { type ConfigFile, LIMITS, isConfigPath } from '../../render/config/index.js';

/** Reads up to `max` bytes of a file (the buffer sized by the file, not by `max`: a thousand small files stay small). */
async function readCapped(path: string, max: number): Promise<Uint8Array> {
  const handle = await open(path, 'r');
  try {
    const buf = Buffer.alloc(Math.min(max, (await handle.stat()).size + 1));
    let used = 0;
    while (used < buf.length) {
      const { bytesRead } = await handle.read(buf, used, buf.length - used, used);
      if (bytesRead === 0) break;
      used += bytesRead;
    }
    return new Uint8Array(buf.buffer, buf.byteOffset, used);
  } finally {
    await handle.close();
  }
}

/** A `--path` that resolves (through a symbolic link) to a place outside its repository directory. */
export class ConfigPathOutside extends Error {}

/**
 * The config files under `configPath` of the repository directory `repoDir` (`--path`, normalised; '' the root).
 * The path may pass through symbolic links only while it stays inside the repository: a link that leads out (to
 * /etc, another checkout) is refused with ConfigPathOutside, since `--path` names a part of the repository.
 */
export async function readConfigDir(repoDir: string, configPath = ''): Promise<ConfigFile[]> {
  const repo = await realpath(repoDir);
  const root = await realpath(join(repoDir, configPath));
  if (root !== repo && !root.startsWith(repo.endsWith(sep) ? repo : `${repo}${sep}`)) {
    throw new ConfigPathOutside(`--path ${configPath}: leads outside ${repoDir} (a symbolic link, to ${root}); refused`);
  }
  const files: ConfigFile[] = [];
  // One byte over a cap is enough for parseConfig to see that the cap is exceeded.
  const maxFiles = LIMITS.maxFiles + 1;
  const pending: string[] = ['']; // repo-relative directories, '/' separated
  while (pending.length > 0 && files.length < maxFiles) {
    const relDir = pending.shift()!;
    const entries = (await readdir(join(root, relDir), { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (files.length >= maxFiles) break;
      if (entry.name.startsWith('.')) continue; // .git/, editor swap files, hidden config
      const relPath = relDir === '' ? entry.name : `${relDir}/${entry.name}`;
      if (relPath === 'status') continue; // written by the nodes, not config
      const abs = join(root, relPath);
      if (entry.isDirectory()) {
        pending.push(relPath);
        continue;
      }
      if (!isConfigPath(relPath)) continue;
      if (entry.isSymbolicLink()) {
        files.push({ path: relPath, content: new Uint8Array(), symlinkTarget: await readlink(abs) });
        continue;
      } else if (!entry.isFile()) {
        continue; // fifos, sockets, devices
      }
      files.push({ path: relPath, content: await readCapped(abs, LIMITS.maxFileBytes + 1) });
    }
  }
  return files;
}
