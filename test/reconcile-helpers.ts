// Test helpers: real Git repositories made with the git CLI, served by git http-backend on 127.0.0.1.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtemp, mkdir, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { startGitHttpServer, type GitHttpServer } from '../src/lab/git-http-server.js';
import { emptyCounters, type NodeStatus } from '../src/reconciler/status/status-doc.js';

const execFileP = promisify(execFile);

const GIT_ENV = {
  GIT_AUTHOR_NAME: 'test',
  GIT_AUTHOR_EMAIL: 'test@example.com',
  GIT_COMMITTER_NAME: 'test',
  GIT_COMMITTER_EMAIL: 'test@example.com',
  GIT_CONFIG_NOSYSTEM: '1',
  HOME: tmpdir(),
};

export async function git(cwd: string, ...args: string[]): Promise<string> {
  const { stdout } = await execFileP('git', args, { cwd, env: { ...process.env, ...GIT_ENV }, maxBuffer: 64 << 20 });
  return stdout.trim();
}

export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `gitlb-${prefix}-`));
}

/** A bare repository `<root>/<name>.git` served over HTTP, plus a working clone to make commits in. */
export interface ServedRepo {
  root: string;
  server: GitHttpServer;
  url: string; // of the repository
  work: string; // a git CLI working clone
  cleanup(): Promise<void>;
}

export async function servedRepo(name = 'config', branch = 'main'): Promise<ServedRepo> {
  const root = await tempDir('srv');
  const bare = join(root, `${name}.git`);
  await git(root, 'init', '-q', '--bare', '-b', branch, bare);
  const server = await startGitHttpServer({ projectRoot: root });
  const url = `${server.url}/${name}.git`;
  const work = join(root, 'work');
  await git(root, 'init', '-q', '-b', branch, work);
  await git(work, 'remote', 'add', 'origin', url);
  return {
    root,
    server,
    url,
    work,
    cleanup: async () => {
      await server.close();
      await rm(root, { recursive: true, force: true });
    },
  };
}

/** Writes files (repo-relative path -> content; null deletes) and commits them; returns the commit id. */
export async function commitFiles(work: string, files: Record<string, string | null>, message: string): Promise<string> {
  for (const [path, content] of Object.entries(files)) {
    const full = join(work, path);
    if (content === null) await rm(full, { force: true });
    else {
      await mkdir(dirname(full), { recursive: true });
      await writeFile(full, content);
    }
  }
  await git(work, 'add', '-A');
  await git(work, 'commit', '-q', '--allow-empty', '-m', message);
  return git(work, 'rev-parse', 'HEAD');
}

// ---- config fixtures (YAML as a user would write it; see schemas/*.schema.json) ----

export function clusterYaml(o: { tableSize?: number; policy?: 'auto' | 'manual'; statusBranch?: string } = {}): string {
  return [
    'apiVersion: gitlb/v1',
    'kind: Cluster',
    'metadata: { name: test }',
    'spec:',
    `  maglev: { tableSize: ${o.tableSize ?? 251}, seed: JLfvgnHc2kaSUFaI }`,
    `  status: { branch: ${o.statusBranch ?? 'gitlb-status'} }`,
    `  rollback: { policy: ${o.policy ?? 'manual'} }`,
    '',
  ].join('\n');
}

export function lbNodeYaml(name: string): string {
  return [
    'apiVersion: gitlb/v1',
    'kind: Node',
    `metadata: { name: ${name} }`,
    'spec:',
    '  role: lb',
    '  interface: eth0',
    '  allowedVips: [203.0.113.0/24]',
    '',
  ].join('\n');
}

export function serviceYaml(name: string, vip: string, reals: string[], o: { port?: number; tableSize?: number; weight?: number } = {}): string {
  return [
    'apiVersion: gitlb/v1',
    'kind: Service',
    `metadata: { name: ${name} }`,
    'spec:',
    `  vip: ${vip}`,
    `  ports: [{ port: ${o.port ?? 80}, protocol: TCP }]`,
    '  dispatch: { mode: dsr, encap: l2 }',
    ...(o.tableSize ? [`  maglev: { tableSize: ${o.tableSize} }`] : []),
    '  reals:',
    ...reals.map((r) => `    - { address: ${r}${o.weight !== undefined ? `, weight: ${o.weight}` : ''} }`),
    '',
  ].join('\n');
}

/** A whole valid config repository: one cluster, the given lb nodes, one service `web` with `reals`. */
export function configFiles(nodes: string[], reals: string[], o: { policy?: 'auto' | 'manual'; tableSize?: number } = {}): Record<string, string> {
  const files: Record<string, string> = { 'cluster.yaml': clusterYaml(o) };
  for (const n of nodes) files[`nodes/${n}.yaml`] = lbNodeYaml(n);
  files['services/web.yaml'] = serviceYaml('web', '203.0.113.10', reals);
  return files;
}

/** A node's status document as a daemon writes it (applied `applied` just now); `o` overrides any field. */
export function nodeStatus(
  node: string,
  applied: string | null,
  o: Partial<NodeStatus> & { digest?: string; reals?: string[]; down?: string } = {},
): NodeStatus {
  const now = new Date().toISOString();
  const { digest, reals, down, ...fields } = o;
  return {
    apiVersion: 'gitlb/v1',
    kind: 'NodeStatus',
    node,
    role: 'lb',
    branch: 'main',
    appliedRevision: applied,
    appliedAt: applied ? now : null,
    lastAttempt: applied ? { revision: applied, result: 'applied', at: now } : null,
    lastFailure: null,
    warnings: [],
    services: [
      {
        name: 'web',
        id: 1,
        tableSize: 251,
        digest: digest ?? 'a'.repeat(64),
        reals: (reals ?? ['198.51.100.10']).map((address, _, all) => ({ address, weight: 100, state: 'active' as const, healthy: address !== down, entries: Math.floor(251 / all.length) })),
      },
    ],
    counters: emptyCounters(),
    startedAt: now,
    updatedAt: now,
    ...fields,
  };
}
