// Running a host tool (ip, bpftool, birdc, ethtool) from the daemon: the callers decide what a failure means, so
// this never rejects — a missing program, a timeout or a non-zero exit all come back as a non-zero code.
import { execFile } from 'node:child_process';

export interface FileResult { code: number; stdout: string; stderr: string }

/** Runs `file args` (no shell); killed after `timeoutMs`. code: the exit status, else 1 (not found, killed). */
export function runFile(file: string, args: string[], timeoutMs: number): Promise<FileResult> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}
