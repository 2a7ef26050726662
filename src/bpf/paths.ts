// Locates the package's built artefacts (BPF objects, the Node-API addon) from the
// package root, so the same code works from src/ under tsx and from dist/.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

let cachedRoot: string | undefined;

/** The directory holding gitlb's package.json (walks up from this module). */
export function packageRoot(): string {
  if (cachedRoot) return cachedRoot;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if (JSON.parse(readFileSync(pkg, 'utf8')).name === 'gitlb') return (cachedRoot = dir);
      } catch {
        /* not ours: keep walking */
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new Error(`gitlb package root not found above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
}

/** Directory of compiled BPF objects (`make bpf`); GITLB_BPF_DIR overrides it. */
export function bpfObjectDir(): string {
  return process.env.GITLB_BPF_DIR ? resolve(process.env.GITLB_BPF_DIR) : join(packageRoot(), 'build', 'bpf');
}

/** `bpfObjectPath('selftest')` -> <root>/build/bpf/selftest.o; absolute paths pass through. */
export function bpfObjectPath(nameOrPath: string): string {
  if (isAbsolute(nameOrPath)) return nameOrPath;
  if (nameOrPath.includes('/')) return resolve(nameOrPath);
  return join(bpfObjectDir(), nameOrPath.endsWith('.o') ? nameOrPath : `${nameOrPath}.o`);
}

/** The compiled addon (`make addon`). */
export function addonPath(): string {
  return join(packageRoot(), 'src', 'bpf', 'napi', 'build', 'Release', 'gitlb_bpf.node');
}
