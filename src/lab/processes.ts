// Long-running lab processes: started detached (their own session, output to a log file) so they outlive the
// `gitlb lab up` command, and recorded with their start time so `lab down` stops exactly those processes and
// never a stranger that happens to reuse a pid.
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { nsArgv, pidAlive, sleep } from './netns.js';
import { nodeModuleArgv } from './compiled.js';

export type LabProcessRole = 'anchor' | 'git-server' | 'backend-server' | 'daemon' | 'bird' | 'frr' | 'prometheus';

export interface LabProcess {
  pid: number;
  /** Kernel start time of the process (clock ticks since boot, /proc/<pid>/stat field 22). */
  startTime: string;
  role: LabProcessRole;
  /** Full namespace name, or null for the host namespace (only the anchor, which does no networking). */
  ns: string | null;
  node?: string;
  argv: string[];
  log: string;
}

/** Start time of `pid` from /proc, or null if there is no such process or it is a zombie (already dead). */
export function procStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2 (comm) may contain spaces and parentheses; fields after the last ')' are plain.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (rest[0] === 'Z' || rest[0] === 'X') return null;
    return rest[19] ?? null; // field 22 = index 19 counting from field 3
  } catch {
    return null;
  }
}

/** Is the recorded process still the very process we started (same pid, same start time)? */
export function isAlive(p: Pick<LabProcess, 'pid' | 'startTime'>): boolean {
  return pidAlive(p.pid) && procStartTime(p.pid) === p.startTime;
}

/**
 * The argv that runs a Node script shipped next to this module: the compiled `.js` from dist/, or, when the CLI
 * itself runs from source (tests, development), the same compiled `.js` if dist/ is up to date with the sources, else
 * the `.ts` source through tsx (compiled.ts).
 */
export function nodeScriptArgv(relativeToLab: string, args: string[]): string[] {
  const ext = fileURLToPath(import.meta.url).endsWith('.ts') ? '.ts' : '.js';
  return [...nodeModuleArgv(fileURLToPath(new URL(`${relativeToLab}${ext}`, import.meta.url))), ...args];
}

/** Starts `argv` detached inside namespace `ns` (or the host namespace when null), output appended to `log`. */
export function spawnDetached(
  role: LabProcessRole,
  ns: string | null,
  argv: string[],
  log: string,
  extra: { node?: string; cwd?: string; env?: NodeJS.ProcessEnv } = {},
): LabProcess {
  const full = ns ? nsArgv(ns, argv) : argv;
  const fd = openSync(log, 'a');
  try {
    const child = spawn(full[0]!, full.slice(1), {
      detached: true,
      stdio: ['ignore', fd, fd],
      cwd: extra.cwd,
      env: extra.env ?? process.env,
    });
    child.unref();
    if (child.pid === undefined) throw new Error(`cannot start ${argv.join(' ')}`);
    const startTime = procStartTime(child.pid) ?? '';
    return { pid: child.pid, startTime, role, ns, ...(extra.node ? { node: extra.node } : {}), argv, log };
  } finally {
    closeSync(fd);
  }
}

/**
 * Stops a recorded process and its process group (it leads its own session): SIGTERM, then SIGKILL after
 * `graceMs`. Does nothing unless the pid still belongs to the process we started.
 */
export async function stopLabProcess(p: LabProcess, graceMs = 3000): Promise<'stopped' | 'gone'> {
  if (!isAlive(p)) return 'gone';
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-p.pid, sig); // the group: children such as git http-backend go too
    } catch {
      try {
        process.kill(p.pid, sig);
      } catch {
        /* already gone */
      }
    }
  };
  signal('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (isAlive(p) && Date.now() < deadline) await sleep(25);
  if (isAlive(p)) {
    signal('SIGKILL');
    const hard = Date.now() + 2000;
    while (isAlive(p) && Date.now() < hard) await sleep(25);
  }
  return 'stopped';
}

/** Why a lab process may not have come up, for an error message: alive or not, and the last lines of its log. */
export function describeProcess(p: LabProcess, lines = 5): string {
  let tail = '';
  try {
    tail = readFileSync(p.log, 'utf8').trimEnd().split('\n').slice(-lines).join('\n  ');
  } catch {
    tail = '(no log)';
  }
  return `; process ${p.pid} ${isAlive(p) ? 'running' : 'exited'}, log ${p.log}:\n  ${tail || '(empty)'}`;
}
