// Runs the real commands the demo shows (gitlb, git, kill), printing each one first. `gitlb` runs the same
// way this process runs: bin/gitlb (compiled dist/) or the TypeScript source through tsx.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawn } from 'node:child_process';
import { nsArgv, type ExecResult } from '../lab/netns.js';
import { PROJECT_ROOT } from '../lab/lab.js';
import type { Narrator } from './narrator.js';

/** The argv that runs the gitlb CLI (without subcommand). */
export function gitlbArgv(): string[] {
  const fromSource = fileURLToPath(import.meta.url).endsWith('.ts');
  if (!fromSource && existsSync(join(PROJECT_ROOT, 'dist', 'cli', 'main.js'))) return [process.execPath, join(PROJECT_ROOT, 'bin', 'gitlb')];
  return [process.execPath, '--import', import.meta.resolve('tsx'), join(PROJECT_ROOT, 'src', 'cli', 'main.ts')];
}

export const DEMO_GIT_ENV = {
  GIT_AUTHOR_NAME: 'Demo Operator',
  GIT_AUTHOR_EMAIL: 'operator@gitlb.invalid',
  GIT_COMMITTER_NAME: 'Demo Operator',
  GIT_COMMITTER_EMAIL: 'operator@gitlb.invalid',
  GIT_TERMINAL_PROMPT: '0',
};

export interface ShellOptions {
  /** Full namespace name to run in (e.g. the lab's client namespace), or null for this namespace. */
  ns: string | null;
  /** Shown before `$`, e.g. `client` or `operator`. */
  prompt: string;
  cwd?: string;
  timeoutMs?: number;
}

/**
 * Runs a command in its own process group and, on timeout, kills the whole group: `git clone` over HTTP leaves
 * a `git-remote-http` child holding the output pipe, so killing only the leader would never end the wait.
 */
export function execGroup(argv: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs: number }): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { cwd: opts.cwd, env: opts.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, opts.timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ stdout, stderr: timedOut ? `${stderr}(timed out after ${opts.timeoutMs} ms)` : stderr, code: timedOut ? 124 : (code ?? 1) });
    });
  });
}

export class Shell {
  constructor(
    private readonly n: Narrator,
    private readonly o: ShellOptions,
  ) {}

  /** Prints and runs `argv`; shows up to `show` output lines (0: none). Throws on a non-zero exit unless `allow` lists it. */
  async run(argv: string[], opts: { show?: number; allow?: number[]; cwd?: string; display?: string[] } = {}): Promise<ExecResult> {
    this.n.command(this.o.prompt, opts.display ?? argv);
    const real = argv[0] === 'gitlb' ? [...gitlbArgv(), ...argv.slice(1)] : argv;
    const full = this.o.ns ? nsArgv(this.o.ns, real) : real;
    const r = await execGroup(full, {
      cwd: opts.cwd ?? this.o.cwd ?? PROJECT_ROOT,
      env: { ...process.env, ...DEMO_GIT_ENV },
      timeoutMs: this.o.timeoutMs ?? 60_000,
    });
    const show = opts.show ?? 20;
    if (show > 0) this.n.output((r.stdout + (r.code !== 0 ? r.stderr : '')).trimEnd(), show);
    if (r.code !== 0 && !(opts.allow ?? []).includes(r.code)) {
      throw new Error(`command failed (exit ${r.code}): ${argv.join(' ')}: ${r.stderr.trim().slice(-500)}`);
    }
    return r;
  }
}
