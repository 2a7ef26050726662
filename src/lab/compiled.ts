// The compiled twin of a source module, for the processes the lab and the demo start (daemons, servers, the traffic
// client). Run from source (tests, development), they would start through tsx, which costs about 0.9 s of CPU more
// per gitlb command than dist/'s JavaScript (`gitlb validate`: 1.75 s against 0.85 s; 0.3 s more per small script),
// and the netns tier starts hundreds of them. So they run from dist/ whenever dist/ was built from the
// sources as they are now, and through tsx otherwise (an edit not compiled yet is run as written, never an older
// build).
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = fileURLToPath(new URL('..', import.meta.url));
const ROOT = join(SRC, '..');
const DIST = join(ROOT, 'dist');
/** tsc's build state: written by every `make ts` that compiled anything (tsconfig.json's tsBuildInfoFile). */
const BUILD_INFO = join(DIST, '.tsbuildinfo');

let fresh: boolean | undefined;

/** Newest modification time (ms) of a .ts file under `dir`. */
function newestSource(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (e.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** Was dist/ built after the last change to any source file? (Checked once per process: sources do not change
 * under a running test; a source touched without a change reads as newer, and its twin is then not used.) */
function distIsFresh(): boolean {
  if (fresh === undefined) {
    try {
      fresh = statSync(BUILD_INFO).mtimeMs >= newestSource(SRC);
    } catch {
      fresh = false;
    }
  }
  return fresh;
}

/**
 * The argv prefix (node, loader) and script that run the module at `source` (a `.ts` file under src/, or a `.js`
 * file under dist/ when the caller itself runs compiled): its compiled twin in dist/ when dist/ is fresh, else the
 * source through tsx.
 */
export function nodeModuleArgv(source: string): string[] {
  if (!source.endsWith('.ts')) return [process.execPath, source];
  const twin = join(DIST, relative(SRC, source)).replace(/\.ts$/, '.js');
  if (!relative(SRC, source).startsWith('..') && distIsFresh() && existsSync(twin)) return [process.execPath, twin];
  return [process.execPath, '--import', import.meta.resolve('tsx'), source];
}
