// Helpers for CLI tests of render and plan: YAML config trees, real Git repositories made with the git CLI in a
// temporary directory, and running `gitlb` as a child process.
import { execFile } from 'node:child_process';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { nodeModuleArgv } from '../../src/lab/compiled.js';

const run = promisify(execFile);
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export async function tempDir(prefix: string): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), `gitlb-${prefix}-`));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

export async function writeTree(dir: string, files: Record<string, string>): Promise<void> {
  for (const [path, content] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), content);
  }
}

const gitEnv = {
  ...process.env,
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_AUTHOR_NAME: 'test',
  GIT_AUTHOR_EMAIL: 'test@example.invalid',
  GIT_COMMITTER_NAME: 'test',
  GIT_COMMITTER_EMAIL: 'test@example.invalid',
};

export async function git(dir: string, ...args: string[]): Promise<string> {
  const { stdout } = await run('git', args, { cwd: dir, env: gitEnv });
  return stdout.trim();
}

/** Replaces the working tree's config with `files` and commits everything; returns the commit id. */
export async function commitTree(dir: string, files: Record<string, string>, message: string): Promise<string> {
  await git(dir, 'rm', '-rq', '--ignore-unmatch', '.');
  await writeTree(dir, files);
  await git(dir, 'add', '-A');
  await git(dir, 'commit', '-qm', message);
  return git(dir, 'rev-parse', 'HEAD');
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `gitlb ARGS` in `cwd` and returns its exit code and output: dist/'s CLI when dist/ is up to date with the
 * sources, else src/cli/main.ts under tsx (src/lab/compiled.ts; tsx by its resolved URL there: a bare 'tsx' is looked
 * up from `cwd`, which may be outside the project). */
export async function gitlb(args: string[], cwd = root): Promise<CliResult> {
  try {
    const [node, ...argv] = nodeModuleArgv(join(root, 'src/cli/main.ts'));
    const { stdout, stderr } = await run(node!, [...argv, ...args], {
      cwd,
      timeout: 60_000,
      maxBuffer: 64 * 1024 * 1024,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number | string; stdout?: string; stderr?: string };
    if (typeof e.code !== 'number') throw err;
    return { code: e.code, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

/** `gitlb ARGS` in this process (the same dispatcher as the binary), stdout and stderr captured: spawning tsx
 * costs seconds on the shared machine. Calls must not overlap (they swap the process's write functions). */
export async function gitlbInProcess(args: string[]): Promise<CliResult> {
  const { runCli } = await import('../../src/cli/main.js');
  const out = process.stdout.write;
  const err = process.stderr.write;
  let stdout = '';
  let stderr = '';
  process.stdout.write = ((s: string) => ((stdout += s), true)) as typeof process.stdout.write;
  process.stderr.write = ((s: string) => ((stderr += s), true)) as typeof process.stderr.write;
  try {
    return { code: await runCli(args), stdout, stderr };
  } finally {
    process.stdout.write = out;
    process.stderr.write = err;
  }
}

/** A small valid config as YAML files; `web` reals and weights are parameters so revisions can differ. */
export function configFiles(opts: { webReals: string[]; tableSize?: number; extra?: Record<string, string> }): Record<string, string> {
  return {
    'cluster.yaml': `apiVersion: gitlb/v1
kind: Cluster
metadata: {name: main}
spec:
  maglev: {tableSize: ${opts.tableSize ?? 1021}, seed: Z2l0bGItc2VlZC0x}
`,
    'nodes/lb.yaml': `apiVersion: gitlb/v1
kind: Node
metadata: {name: lb-1}
spec:
  role: lb
  interface: eth0
  allowedVips: [192.0.2.0/24]
  snatAddress: 192.0.2.250
---
apiVersion: gitlb/v1
kind: Node
metadata: {name: lb-2}
spec:
  role: lb
  interface: eth1
  allowedVips: [192.0.2.0/25]
  snatAddress: 192.0.2.251
`,
    'services/web.yaml': `apiVersion: gitlb/v1
kind: Service
metadata: {name: web}
spec:
  vip: 192.0.2.10
  ports: [{port: 80}, {port: 443}]
  dispatch: {mode: snat}
  reals:
${opts.webReals.map((r) => `    - ${r}`).join('\n')}
`,
    'services/dns.yaml': `apiVersion: gitlb/v1
kind: Service
metadata: {name: dns}
spec:
  vip: 192.0.2.53
  ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
  dispatch: {mode: snat}
  reals:
    - {address: 198.51.100.53}
    - {address: 198.51.100.54}
`,
    'README.md': 'not config\n',
    ...opts.extra,
  };
}
